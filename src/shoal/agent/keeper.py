"""The keeper: the first process of every task attempt, between the agent and the task's command.

Run by the agent as a script (``python -I -S keeper.py ATTEMPT_DIR LEASE_FILE GRACE -- ARGV...``)
in the attempt's own session, it imports nothing but the standard library. It

* runs ARGV as its child and waits for it;
* survives SIGTERM (a handler, not an ignored signal, so the child does not inherit it: the
  TERM sent to the whole process group reaches the task, and the keeper stays to record its end);
* writes how the child ended to ``ATTEMPT_DIR/exit.json`` (atomically), so the exit code outlives
  the agent: an agent restarted after ``kill -9`` reads it and reports the attempt's true end;
* enforces the agent's lease (fencing): LEASE_FILE holds a deadline on the boot-time clock
  (``CLOCK_BOOTTIME``, monotonic and counting suspend), moved forward by the agent each time the
  server acknowledges one of its reports. Once it passes, the keeper sends SIGTERM to the task's
  process group, and SIGKILL after GRACE seconds: the attempt is dead before the server can
  declare the node NOT_READY and run it elsewhere, even when the agent itself is dead.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

LEASE_CHECK_S = 0.25
EXIT_FILE = "exit.json"


def boot_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def read_deadline(path: str) -> float | None:
    try:
        with open(path) as handle:
            return float(handle.read().strip())
    except (OSError, ValueError):
        return None  # no lease yet: nothing to enforce


def write_exit(attempt_dir: str, record: dict[str, object]) -> None:
    path = os.path.join(attempt_dir, EXIT_FILE)
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(record, handle)
    os.replace(temporary, path)


def watch(child: int, lease_file: str, grace: float) -> tuple[float | None, bool]:
    """Wait for the child, enforcing the lease. Returns (when fencing began, child ended)."""
    pidfd = os.pidfd_open(child)
    fenced_at: float | None = None
    while True:
        ready, _, _ = select.select([pidfd], [], [], LEASE_CHECK_S)
        if ready:
            os.close(pidfd)
            return fenced_at, True
        now = boot_clock()
        if fenced_at is None:
            deadline = read_deadline(lease_file)
            if deadline is not None and now > deadline:
                fenced_at = now
                os.killpg(0, signal.SIGTERM)  # the task's whole group; this process survives it
        elif now - fenced_at >= grace:
            return fenced_at, False


def main(argv: list[str]) -> int:
    attempt_dir, lease_file, grace = argv[1], argv[2], float(argv[3])
    command = argv[5:]
    signal.signal(signal.SIGTERM, lambda *_: None)  # a handler: exec resets it in the child
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.execv(command[0], command)
        finally:
            os._exit(127)
    fenced_at, ended = watch(child, lease_file, grace)
    fenced = fenced_at is not None
    if not ended:  # fenced and the grace ran out: record it, then kill the group (and this)
        write_exit(attempt_dir, {"exit_code": None, "signal": signal.SIGKILL, "fenced": True})
        os.killpg(0, signal.SIGKILL)
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
