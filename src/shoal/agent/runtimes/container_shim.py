"""The command a container task's keeper runs: start the container, wait for it, pass signals on.

``python -I -S container_shim.py NAME JOIN -- PODMAN RUN-ARGS...`` (standard library only), in the
attempt's record directory (podman's monitor leaves a file named ``oom`` in its caller's
directory). It

1. starts the container detached (``podman run -d``, its output passed straight through to this
   process's stdout and stderr, the task's log files), from a child that first joins the task's
   cgroup (JOIN, as for the keeper): podman's monitor and so the container stay in it, limited
   and measured like a process task, while podman's own client (35 MiB) is not charged to the
   task and goes away once the container runs;
2. waits for it with ``podman wait`` from outside the cgroup, and exits with its exit code;
3. on SIGTERM (the keeper's process group is signalled to stop the task), sends SIGTERM to every
   process in the container, as the process runtime's signal reaches the task's whole process
   group: to its first process (which, as a container's pid 1, only gets the signals it handles)
   and, through ``podman exec ... kill -TERM -1``, to all the others. SIGKILL of this process is
   followed by the agent killing everything in the task's cgroup.

If podman cannot start the container, ``start-failed`` in the working directory holds podman's
exit code, podman's error is on the task's stderr, and the container (created, perhaps never
started) is removed. Every way out of this shim but SIGKILL removes the container; after a
SIGKILL the agent does (``ContainerRuntime.cleanup``), or the keeper if the agent is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

START_FAILED = "start-failed"


def main(argv: list[str]) -> int:
    name, join, run = argv[1], argv[2], argv[4:]
    podman = run[0]
    asked: list[int] = []  # a signal that came while the container was being started

    def stop(signo: int, _frame: object) -> None:
        asked.append(signo)
        if started_ok:
            _forward(podman, name, signo)

    started_ok = False
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started = subprocess.run(  # its own process group: a stop signal is this shim's to pass on
        run, check=False, stdin=subprocess.DEVNULL, preexec_fn=lambda: _join(join), process_group=0
    )
    if started.returncode != 0:
        with open(START_FAILED, "w") as handle:
            handle.write(str(started.returncode))
        _remove(podman, name)  # `podman run` may have created it before it failed
        return started.returncode
    started_ok = True
    if asked:
        _forward(podman, name, asked[-1])
    waited = subprocess.run(  # its own process group too: the stop signal is not for it
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
    return code


def _remove(podman: str, name: str) -> None:
    subprocess.run(
        [podman, "rm", "--force", "--ignore", "--time", "0", name],
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )


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
