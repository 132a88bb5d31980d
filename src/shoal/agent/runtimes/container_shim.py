"""The command a container task's keeper runs: start the container, wait for it, pass signals on.

``python -I -S container_shim.py NAME JOIN [GUARD] -- PODMAN RUN-ARGS...`` (standard library only),
in the attempt's record directory (podman's monitor leaves a file named ``oom`` in its caller's
directory). It

1. starts the container detached (``podman run -d``, its output passed straight through to this
   process's stdout and stderr, the task's log files) from its **guard** (below), whose child
   first joins the task's cgroup (JOIN, as for the keeper): podman's monitor and so the container
   stay in it, limited and measured like a process task, while podman's own client (35 MiB) is
   not charged to the task and goes away once the container runs;
2. waits for it with ``podman wait`` from outside the cgroup, and exits with its exit code;
3. on SIGTERM (the keeper's process group is signalled to stop the task), sends SIGTERM to every
   process in the container, as the process runtime's signal reaches the task's whole process
   group: to its first process (which, as a container's pid 1, only gets the signals it handles)
   and, through ``podman exec ... kill -TERM -1``, to all the others. SIGKILL of this process is
   followed by the agent killing everything in the task's cgroup.

If podman cannot start the container, ``start-failed`` in the working directory holds podman's
exit code, podman's error is on the task's stderr, and the container (created, perhaps never
started) is removed. Every way out of this shim but SIGKILL removes the container; after a
SIGKILL, its guard does.

**The guard** makes sure the container never outlives this shim, however it ends: a process forked
from the shim into a process group of its own (so the SIGKILL of the keeper's group, by the agent
or by whoever kills an agent and its tasks, does not reach it; a SIGTERM is ignored), which runs
``podman run`` as its child, waits for it, and tells the shim its exit code. It then waits for the
shim: when the shim ends without saying it has removed the container (it was killed, during the
start or after it), the guard removes it, once ``podman run`` is over: a container is never
created after its removal. It holds a lock on the file GUARD (taken by the shim before
``podman run`` exists) until it is done, which the agent's ``ContainerRuntime.cleanup`` waits for
before its own removal. The keeper, when it ends a fenced task, kills the guard with the rest of
its tree and removes the container itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import sys
import time

START_FAILED = "start-failed"
DONE = b"d"  # the shim to its guard: the container is removed, nothing left to do
ABANDON_S = 60.0  # how long the guard lets ``podman run`` go on once the shim is gone
REMOVE_TRIES = 3  # podman's first removal of a container whose monitor was killed may fail


def main(argv: list[str]) -> int:
    split = argv.index("--")
    name, join = argv[1], argv[2]
    guard = argv[3] if split > 3 else None
    run = argv[split + 1 :]
    podman = run[0]
    asked: list[int] = []  # a signal that came while the container was being started

    def stop(signo: int, _frame: object) -> None:
        asked.append(signo)
        if started_ok:
            _forward(podman, name, signo)

    started_ok = False
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code, done = _start(podman, name, join, guard, run)
    if code != 0:
        with open(START_FAILED, "w") as handle:
            handle.write(str(code))
        _remove(podman, name)  # `podman run` may have created it before it failed
        _release(done)
        return code
    started_ok = True
    if asked:
        _forward(podman, name, asked[-1])
    waited = subprocess.run(  # its own process group: the stop signal is not for it
        [podman, "wait", name],
        check=False,
        process_group=0,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    try:
        code = int(waited.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        sys.stderr.write(f"shoal: podman wait {name} failed: {waited.stderr.strip()}\n")
        code = 125
    _remove(podman, name)
    _release(done)
    return code


def _start(podman: str, name: str, join: str, guard: str | None, run: list[str]) -> tuple[int, int]:
    """Fork the guard, which runs ``podman run``; returns its exit code, and the pipe end on
    which the guard is told the container is removed (its closing unsaid: removal is its job)."""
    lock = None
    if guard is not None:  # locked before the guard exists: no moment without it
        try:
            lock = os.open(guard, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError as exc:  # the agent's removal will not wait for the guard: it still runs
            sys.stderr.write(f"shoal: no lock for the start of {name} ({exc})\n")
    told, done = os.pipe()  # shim -> guard: DONE, or end of file if the shim is gone
    answer, answered = os.pipe()  # guard -> shim: `podman run`'s exit code
    pid = os.fork()
    if pid == 0:  # the guard
        code = 1
        try:
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, _ignore)  # a handler: podman's exec resets it
            signal.signal(signal.SIGINT, _ignore)
            os.close(done)
            os.close(answer)
            _guard(podman, name, join, run, told, answered)
            if guard is not None:
                with contextlib.suppress(OSError):
                    os.unlink(guard)
            code = 0
        finally:
            os._exit(code)
    os.close(told)
    os.close(answered)
    if lock is not None:
        os.close(lock)  # the guard holds it (the same open file) until it is done
    said = b""
    while chunk := os.read(answer, 64):
        said += chunk
    os.close(answer)
    try:
        return int(said), done
    except ValueError:
        sys.stderr.write(f"shoal: the start of container {name} was cut short\n")
        return 125, done


def _guard(podman: str, name: str, join: str, run: list[str], told: int, answered: int) -> None:
    code = _run(run, join, told)
    try:
        os.write(answered, str(code).encode())
        os.close(answered)
        said = os.read(told, 1)  # for as long as the shim lives
    except OSError:  # the shim is gone
        said = b""
    if said != DONE:
        _remove(podman, name, REMOVE_TRIES)


def _run(run: list[str], join: str, told: int) -> int:
    """``podman run``'s exit code; it is let go on (up to ABANDON_S) once the shim is gone."""
    try:
        started = subprocess.Popen(
            run,
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: _join(join),  # noqa: PLW1509 - neither shim nor guard has threads
        )
    except (OSError, subprocess.SubprocessError) as exc:
        sys.stderr.write(f"shoal: could not run podman: {exc}\n")
        return 125
    shim_gone_at: float | None = None
    while True:
        try:
            return started.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
            pass
        if shim_gone_at is None:
            if select.select([told], [], [], 0)[0]:  # only end of file comes before the answer
                shim_gone_at = time.monotonic()
        elif time.monotonic() - shim_gone_at > ABANDON_S:
            started.kill()


def _release(done: int) -> None:
    """Tell the guard the container is removed (it may be gone: then nothing is left to do)."""
    with contextlib.suppress(OSError):
        os.write(done, DONE)
    os.close(done)


def _ignore(_signo: int, _frame: object) -> None:
    pass


def _remove(podman: str, name: str, tries: int = 1) -> None:
    for _ in range(tries):
        done = subprocess.run(
            [podman, "rm", "--force", "--ignore", "--time", "0", name],
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
        if done.returncode == 0:
            return


def _forward(podman: str, name: str, signo: int) -> None:
    """``signo`` to the container's first process, then, from inside, to all the others (in that
    order: a first process that ends once its children have would otherwise end before its own
    signal reached it, as the process group's signal does in the process runtime)."""
    null = subprocess.DEVNULL
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(
            [podman, "kill", "--signal", str(signo), name],
            check=False,
            timeout=10,
            stdin=null,
            stdout=null,
            stderr=null,
        )
    everyone = [podman, "exec", name, "/bin/sh", "-c", f"kill -{signo} -1"]
    subprocess.Popen(everyone, stdin=null, stdout=null, stderr=null)  # not waited for


def _join(join: str) -> None:
    for procs in join.split(":") if join != "-" else ():
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
