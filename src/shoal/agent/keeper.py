"""The keeper: the first process of every task attempt, between the agent and the task's command.

Run by the agent as a script (``python -I -S keeper.py ATTEMPT_DIR LEASE_FILE GRACE JOIN -- ARGV``)
in the attempt's own session, it imports nothing but the standard library. It

* runs ARGV as its child and waits for it; the child first joins the task's cgroup (JOIN: the
  ``cgroup.procs`` files, ``:``-separated, or ``-``), so the task is limited from its first
  instruction while the keeper itself stays outside (no task limit can kill the keeper);
* survives SIGTERM (a handler, not an ignored signal, so the child does not inherit it: the
  TERM sent to the whole process group reaches the task, and the keeper stays to record its end);
* writes how the child ended to ``ATTEMPT_DIR/exit.json`` (atomically), so the exit code outlives
  the agent: an agent restarted after ``kill -9`` reads it and reports the attempt's true end;
* enforces the agent's lease (fencing): LEASE_FILE holds a deadline on the boot-time clock
  (``CLOCK_BOOTTIME``, monotonic and counting suspend), moved forward by the agent each time the
  server acknowledges one of its reports. Once it passes, the keeper sends SIGTERM to the task's
  process group (and to its processes that left the group), and SIGKILL after GRACE seconds: the
  attempt is dead before the server can declare the node NOT_READY and run it elsewhere, even
  when the agent itself is dead;
* is the task's child subreaper (``PR_SET_CHILD_SUBREAPER``): a process of the task that leaves
  the process group (``setsid``, a daemon's double fork) is re-parented to the keeper, not to
  init, so it stays in the keeper's process tree. Once the task's first process has ended (on
  its own, stopped or fenced), the keeper SIGKILLs everything left in that tree before it
  records the end: nothing of an attempt outlives it, whether or not an agent is there to
  clean up (a ``kill -9``-ed agent's tasks left no orphans);
* once fenced (so no agent may be there to do it), does the agent's part of the end too: runs
  the runtime's cleanup command, if it left one (``ATTEMPT_DIR/cleanup.json``: a container's
  removal), and removes the task's cgroup (``ATTEMPT_DIR/cgroup.json``, written by the agent).
  An agent that comes back does the same again, to no effect.

It starts on every launch, so it imports only what the interpreter has built in (``_signal``, not
``signal``, which pulls in ``enum``; no ``json``) and ``_ctypes`` (0.3 ms, for ``prctl``): about
6 ms of CPU with ``-I -S``.
"""

from __future__ import annotations

import _ctypes  # the C module behind ctypes (which costs 2.5 ms to import)
import _signal  # type: ignore[import-not-found]  # the C module behind signal
import os
import sys
import time

LEASE_CHECK_S = 0.25
EXIT_FILE = "exit.json"
CGROUP_FILE = "cgroup.json"  # written by shoal.agent.limits: {"dirs": {controller: path}}
CLEANUP_FILE = "cleanup.json"  # written by a runtime: the argv that ends what the task left
CLEANUP_TRIES = 3
RMDIR_TRIES = 50  # EBUSY for a moment after the last process of a cgroup exits
SIGTERM, SIGKILL, SIGCHLD = 15, 9, 17  # Linux
WAITED = {SIGCHLD}
PR_SET_CHILD_SUBREAPER = 36  # prctl(2), Linux >= 3.4
SWEEPS = 5  # leftovers found and killed again, for processes that forked meanwhile
REAP_S = 1.0  # how long the killed leftovers are waited for (they are this keeper's children)


def boot_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def read_deadline(path: str) -> float | None:
    try:
        with open(path) as handle:
            return float(handle.read().strip())
    except (OSError, ValueError):
        return None  # no lease yet: nothing to enforce


def _json(value: object) -> str:
    return (
        "null"
        if value is None
        else "true"
        if value is True
        else "false"
        if value is False
        else repr(value)
    )


def write_exit(attempt_dir: str, record: dict[str, object]) -> None:
    """``exit.json``, replaced atomically (written by hand: importing json costs milliseconds)."""
    text = "{" + ", ".join(f'"{key}": {_json(value)}' for key, value in record.items()) + "}"
    path = os.path.join(attempt_dir, EXIT_FILE)
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def become_subreaper() -> None:
    """``prctl(PR_SET_CHILD_SUBREAPER, 1)`` through ``_ctypes`` (0.3 ms; ``ctypes`` costs 2.5);
    where it cannot be done, leftovers that left the group are not found (nothing else
    changes)."""
    try:

        class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]
            _type_ = "i"

        class _Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        class _Libc:  # what CFuncPtr reads of a CDLL
            _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]  # None: this process

        _Function(("prctl", _Libc()))(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # type: ignore[arg-type]
    except Exception:  # no prctl symbol: run as before
        pass


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (``/proc/PID/task/TID/children``), parents first."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children") as handle:
                    children = [int(c) for c in handle.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


def signal_outsiders(signo: int) -> None:
    """``signo`` to the task's processes that left its process group (the group gets its own)."""
    own = os.getpgid(0)
    for pid in descendants(os.getpid()):
        try:
            if os.getpgid(pid) != own:
                os.kill(pid, signo)
        except OSError:
            continue


def _live(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _reap() -> None:
    """Wait for this keeper's ended children (leftovers re-parented here)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_leftovers() -> None:
    """SIGKILL whatever the task left once its first process has ended: every live process in
    this keeper's tree (the group's and those that left it), again while more are found."""
    me = os.getpid()
    deadline = time.monotonic() + REAP_S
    for _ in range(SWEEPS):
        left = [pid for pid in descendants(me) if _live(pid)]
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                continue
        while time.monotonic() < deadline and any(_live(pid) for pid in left):
            _reap()
            time.sleep(0.005)
    _reap()


def clean_up_alone(attempt_dir: str) -> None:
    """What the agent does once a task has ended, done here because the lease lapsed and no
    agent may be there: the runtime's cleanup command (tried again: podman's first removal of
    a container whose monitor was killed may fail), then the task's cgroup, its children first,
    and the agent's directory above it once empty. Only on this rare path are json and
    subprocess imported."""
    import json  # noqa: PLC0415 - the keeper starts without them (milliseconds each)
    import subprocess  # noqa: PLC0415

    try:
        with open(os.path.join(attempt_dir, CLEANUP_FILE)) as handle:
            argv = [str(a) for a in json.load(handle)]
    except (OSError, ValueError, TypeError):
        argv = []
    for _ in range(CLEANUP_TRIES if argv else 0):
        try:
            done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            break
    try:
        with open(os.path.join(attempt_dir, CGROUP_FILE)) as handle:
            dirs = [str(d) for d in json.load(handle)["dirs"].values()]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        dirs = []
    for directory in dict.fromkeys(dirs):
        for where, _, _ in os.walk(directory, topdown=False):
            _rmdir(where)
        try:  # noqa: SIM105 - contextlib costs the keeper's start 7 ms
            os.rmdir(os.path.dirname(directory))
        except OSError:
            pass  # other attempts' cgroups are still in it


def _rmdir(path: str) -> None:
    for _ in range(RMDIR_TRIES):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def watch(child: int, lease_file: str, grace: float) -> tuple[float | None, bool]:
    """Wait for the child (SIGCHLD is blocked and waited for), enforcing the lease. Returns (when
    fencing began, whether the child ended)."""
    fenced_at: float | None = None
    while True:
        _signal.sigtimedwait(WAITED, LEASE_CHECK_S)
        if os.waitid(os.P_PID, child, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return fenced_at, True
        now = boot_clock()
        if fenced_at is None:
            deadline = read_deadline(lease_file)
            if deadline is not None and now > deadline:
                fenced_at = now
                os.killpg(0, SIGTERM)  # the task's whole group; this process survives it
                signal_outsiders(SIGTERM)
        elif now - fenced_at >= grace:
            return fenced_at, False


def join_cgroup(join: str) -> None:
    """Move this process into each of the task's cgroups (in the child, before exec)."""
    for procs in join.split(":") if join != "-" else ():
        try:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as exc:
            os.write(2, f"shoal: could not join the task's cgroup ({procs}: {exc})\n".encode())
            os._exit(125)


def main(argv: list[str]) -> int:
    attempt_dir, lease_file, grace, join = argv[1], argv[2], float(argv[3]), argv[4]
    command = argv[6:]
    _signal.signal(SIGTERM, lambda *_: None)  # a handler: exec resets it in the child
    _signal.pthread_sigmask(_signal.SIG_BLOCK, WAITED)
    become_subreaper()  # not inherited by the child
    child = os.fork()
    if child == 0:
        _signal.signal(SIGTERM, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, WAITED)  # a blocked mask survives exec
        join_cgroup(join)
        try:
            os.execv(command[0], command)
        finally:
            os._exit(127)
    fenced_at, done = watch(child, lease_file, grace)
    fenced = fenced_at is not None
    if not done:  # fenced and the grace ran out: record it, then kill the whole tree
        write_exit(attempt_dir, {"exit_code": None, "signal": SIGKILL, "fenced": True})
        os.kill(child, SIGKILL)
    _, status, rusage = os.wait4(child, 0)
    end_leftovers()  # before the record: an agent that reads it may SIGKILL this group
    if fenced:
        clean_up_alone(attempt_dir)
    code = os.waitstatus_to_exitcode(status)
    write_exit(
        attempt_dir,
        {
            "exit_code": code if code >= 0 else None,
            "signal": -code if code < 0 else None,
            "fenced": fenced,
            "cpu_seconds": rusage.ru_utime + rusage.ru_stime,
            "max_rss_kib": rusage.ru_maxrss,
        },
    )
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
