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
  process group, and SIGKILL after GRACE seconds: the attempt is dead before the server can
  declare the node NOT_READY and run it elsewhere, even when the agent itself is dead.

It starts on every launch, so it imports only what the interpreter has built in (``_signal``, not
``signal``, which pulls in ``enum``; no ``json``): about 6 ms of CPU with ``-I -S``.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module behind signal
import os
import sys
import time

LEASE_CHECK_S = 0.25
EXIT_FILE = "exit.json"
SIGTERM, SIGKILL, SIGCHLD = 15, 9, 17  # Linux
WAITED = {SIGCHLD}


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
    if not done:  # fenced and the grace ran out: record it, then kill the group (and this)
        write_exit(attempt_dir, {"exit_code": None, "signal": SIGKILL, "fenced": True})
        os.killpg(0, SIGKILL)
    _, status, rusage = os.wait4(child, 0)
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
