"""Start, stop and check one detached process by its pid file, on a host (stdlib only).

``shoal cluster`` copies this file to each host's install directory and runs it with the host's
own Python over SSH, so it imports nothing of shoal::

    python3 hostctl.py start --pidfile P --log L --cwd D -- COMMAND...
    python3 hostctl.py status --pidfile P        # exit 0 running, 3 not running
    python3 hostctl.py stop --pidfile P [--grace S]

The process starts in a session of its own (its pid is its process group), detached from the SSH
session (stdin /dev/null, output to the log). The pid file holds ``PID START`` where START is the
process's start time in clock ticks since boot (``/proc/PID/stat``): a pid the kernel has since
given to another process is never signalled. Stopping signals the process group (SIGTERM, then
SIGKILL after the grace), never a process found by name.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time

NOT_RUNNING = 3


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == "Z":  # a zombie has ended
        return None
    return int(fields[19])


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def read_pidfile(path: str) -> tuple[int, int] | None:
    try:
        with open(path, encoding="ascii") as handle:
            pid_text, ticks_text = handle.read().split()[:2]
        return int(pid_text), int(ticks_text)
    except (OSError, ValueError):
        return None


def running_pid(path: str) -> int | None:
    """The pid of the pid file's process if it is still that process, else None."""
    recorded = read_pidfile(path)
    if recorded is None:
        return None
    pid, ticks = recorded
    return pid if start_ticks(pid) == ticks else None


def launch(pidfile: str, log: str, cwd: str, command: list[str]) -> tuple[int | None, str]:
    """Start ``command`` detached unless the pid file's process runs: (pid, what happened), or
    (None, why not) when it exited at once."""
    pid = running_pid(pidfile)
    if pid is not None:
        return pid, f"already running {pid}"
    os.makedirs(os.path.dirname(os.path.abspath(pidfile)), exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    temporary = f"{pidfile}.tmp"
    with open(temporary, "w", encoding="ascii") as handle:
        handle.write(f"{proc.pid} {start_ticks(proc.pid)}\n")
    os.replace(temporary, pidfile)
    time.sleep(1.0)
    if proc.poll() is not None:
        os.unlink(pidfile)
        return None, f"exited at once with status {proc.returncode}; see {log}"
    return proc.pid, f"started {proc.pid}"


def start(pidfile: str, log: str, cwd: str, command: list[str]) -> int:
    pid, message = launch(pidfile, log, cwd, command)
    print(message, file=sys.stdout if pid is not None else sys.stderr)
    return 0 if pid is not None else 1


def status(pidfile: str) -> int:
    pid = running_pid(pidfile)
    if pid is None:
        print("not running")
        return NOT_RUNNING
    print(f"running {pid}")
    return 0


def _wait_group_gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.1)
    return not group_members(pgid)


def terminate(pidfile: str, grace: float) -> str:
    """Stop the pid file's process group (SIGTERM, SIGKILL after ``grace``); what happened."""
    recorded = read_pidfile(pidfile)
    if recorded is None:
        return "not running"
    pid, ticks = recorded
    # Ours: the leader is the process we started, or no process has its pid any more but members
    # of its group live on (the kernel does not reuse a pid that is still some group's id). A
    # process with that pid and another start time means the pid was reused: not ours.
    now = start_ticks(pid)
    if now != ticks and (now is not None or not group_members(pid)):
        os.unlink(pidfile)
        return "not running"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if not _wait_group_gone(pid, grace):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        _wait_group_gone(pid, 10.0)
    os.unlink(pidfile)
    return f"stopped {pid}"


def stop(pidfile: str, grace: float) -> int:
    print(terminate(pidfile, grace))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hostctl")
    sub = parser.add_subparsers(dest="action", required=True)
    started = sub.add_parser("start")
    started.add_argument("--pidfile", required=True)
    started.add_argument("--log", required=True)
    started.add_argument("--cwd", required=True)
    started.add_argument("command", nargs="+")
    checked = sub.add_parser("status")
    checked.add_argument("--pidfile", required=True)
    stopped = sub.add_parser("stop")
    stopped.add_argument("--pidfile", required=True)
    stopped.add_argument("--grace", type=float, default=30.0)
    args = parser.parse_args(argv)
    if args.action == "start":
        return start(args.pidfile, args.log, args.cwd, args.command)
    if args.action == "status":
        return status(args.pidfile)
    return stop(args.pidfile, args.grace)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
