"""The first process of an exec session (``python -I -S exec_shim.py JOIN -- ARGV``), started by
the agent in a new session (shoal.agent.exec_relay): it makes its stdin, when a terminal, the
session's controlling terminal (so the shell gets job control, ^C and SIGWINCH), joins the task's
cgroups (JOIN: the ``cgroup.procs`` files, ``:``-separated, or ``-``), then runs ARGV as its child
and waits for it, exiting as it did.

It stays (rather than becoming ARGV) to end the session if the agent dies: it asks the kernel
for SIGTERM when its parent, the agent, ends (``PR_SET_PDEATHSIG``, which a change of user in
ARGV would clear if set there), and then hangs up every process of its session and every process
carrying the session's marker (``SHOAL_EXEC_SESSION=<id>``, inside a container too), and kills
what is left after a grace period. A ``shoal job exec`` never outlives the agent that started it.

Doing this here rather than in a ``preexec_fn`` keeps the agent, which has threads, from running
Python between fork and exec. Standard library only (it starts with ``-I -S``)."""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import termios
import time

PR_SET_PDEATHSIG = 1
MARKER = "SHOAL_EXEC_SESSION="  # shoal.protocol.EXEC_MARKER
HANGUP_GRACE_S = 2.0


def _on_parent_death(signo: int) -> None:
    import ctypes  # noqa: PLC0415 - 2.5 ms, paid once per exec session

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signo, 0, 0, 0)


def _marked(marker: bytes) -> list[int]:
    """Processes of this session, or carrying ``marker`` in their environment."""
    own, me = os.getsid(0), os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            if os.getsid(pid) == own:
                found.append(pid)
                continue
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if marker and marker in handle.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


def end_session(marker: bytes) -> None:
    """SIGHUP what the session started, SIGKILL what is left after the grace."""
    deadline = time.monotonic() + HANGUP_GRACE_S
    for signo in (signal.SIGHUP, signal.SIGKILL):
        for pid in _marked(marker):
            try:
                os.kill(pid, signo)
            except OSError:
                continue
        while signo == signal.SIGHUP and time.monotonic() < deadline and _marked(marker):
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    join, command = argv[1], argv[3:]
    marker = next((a for a in command if a.startswith(MARKER)), "").encode()
    agent = os.getppid()

    def parent_gone(*_: object) -> None:
        end_session(marker)
        os._exit(129)

    signal.signal(signal.SIGTERM, parent_gone)
    _on_parent_death(signal.SIGTERM)
    if os.getppid() != agent:  # the agent ended before the request took hold
        parent_gone()
    if os.isatty(0):
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    for procs in join.split(":") if join != "-" else ():
        try:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as exc:
            os.write(2, f"shoal: could not join the task's cgroup ({procs}: {exc})\r\n".encode())
            return 125
    for signo in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP):  # the terminal's: the child's
        signal.signal(signo, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        for signo in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP):
            signal.signal(signo, signal.SIG_DFL)
        try:
            os.execvpe(command[0], command, os.environ)
        except OSError as exc:
            os.write(2, f"shoal: cannot run {command[0]}: {exc.strerror}\r\n".encode())
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # ended by a signal: end the same way, so the agent reports that signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
