"""The first process of an exec session (``python -I -S exec_shim.py JOIN -- ARGV``), started by
the agent in a new session (shoal.agent.exec_relay): it makes its stdin, when a terminal, the
session's controlling terminal (so the shell gets job control, ^C and SIGWINCH), joins the task's
cgroups (JOIN: the ``cgroup.procs`` files, ``:``-separated, or ``-``), then becomes ARGV.

Doing this here rather than in a ``preexec_fn`` keeps the agent, which has threads, from running
Python between fork and exec. Standard library only (it starts with ``-I -S``)."""

from __future__ import annotations

import fcntl
import os
import sys
import termios


def main(argv: list[str]) -> int:
    join, command = argv[1], argv[3:]
    if os.isatty(0):
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    for procs in join.split(":") if join != "-" else ():
        try:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as exc:
            os.write(2, f"shoal: could not join the task's cgroup ({procs}: {exc})\r\n".encode())
            return 125
    try:
        os.execvpe(command[0], command, os.environ)
    except OSError as exc:
        os.write(2, f"shoal: cannot run {command[0]}: {exc.strerror}\r\n".encode())
        return 127 if isinstance(exc, FileNotFoundError) else 126


if __name__ == "__main__":
    sys.exit(main(sys.argv))
