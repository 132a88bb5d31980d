"""The line a failed task's command left on why it failed (``protocol.EXIT_MESSAGE_FILE`` in its
attempt's directory), read for its exit report.

The directory belongs to the task's user, who could put a link or a pipe where the file should
be: each step is opened without following links, only a regular file with a single name is read,
and at most ``MAX_BYTES`` of it, so the agent never reports what the task could not read itself.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from shoal.protocol import EXIT_MESSAGE_FILE

MAX_BYTES = 4096
MAX_CHARS = 500
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_exit_message(workdir: Path) -> str | None:
    """The message's first line, cleaned of control characters (None: there is none)."""
    *dirs, name = EXIT_MESSAGE_FILE.split("/")
    opened: list[int] = []
    try:
        opened.append(os.open(workdir, _DIR_FLAGS))
        for part in dirs:
            opened.append(os.open(part, _DIR_FLAGS, dir_fd=opened[-1]))
        opened.append(os.open(name, _FILE_FLAGS, dir_fd=opened[-1]))
        info = os.fstat(opened[-1])
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return None
        data = os.read(opened[-1], MAX_BYTES)
    except OSError:
        return None
    finally:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
    lines = data.decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return None
    text = "".join(ch if ch.isprintable() else " " for ch in lines[0]).strip()
    return text[:MAX_CHARS] or None
