"""Stored task logs on a full disk: they stop growing with one marker line (docs/disk.md).

When the home's filesystem is below its reserve (``server/storage.py``), or an append meets
``ENOSPC``, the server stores nothing of the chunk (a partly written append is cut back) and
answers the agent with the size it has, so the agent keeps the output on its own disk and sends
it again later: nothing is dropped by the server. One marker line is appended to the stored log
at that point, once per episode (a log that already ends with it gets no other), and stays there
when the output goes on below it once space returns.

The marker is bytes the agent's file does not have, so offsets shift: ``<stream>.shift`` beside
the log holds how many bytes shoal inserted (absent: none). The agent's offsets are the stored
file's minus that shift; reads (which never see agents' offsets) are unaffected.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from shoal import archives
from shoal.server.services.log_files import record_time
from shoal.server.storage import Space, is_disk_full

MARKER_PREFIX = b"[shoal: log paused: "
TAIL_CHECK = 1024  # bytes read from the end to find a marker already there


def shift_path(path: Path) -> Path:
    return path.with_name(path.name + ".shift")


def read_shift(path: Path) -> int:
    """Bytes of markers inserted into ``path`` by the server (not in the agent's file)."""
    try:
        return int(shift_path(path).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def marker(found: Space) -> bytes:
    reason = (
        f"below the {archives.human(found.reserve)} shoal keeps free"
        if found.reserve and found.low
        else "out of space"
    )
    return (
        MARKER_PREFIX
        + (
            f"the disk under {found.path} is full ({archives.human(found.free)} free, "
            f"{reason}); the agent keeps the output and it follows here once space returns]\n"
        ).encode()
    )


def paused(path: Path, size: int) -> bool:
    """Whether the log (``size`` bytes) already ends with a marker."""
    if size == 0:
        return False
    with open(path, "rb") as handle:
        handle.seek(max(size - TAIL_CHECK, 0))
        tail = handle.read()
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return last.startswith(MARKER_PREFIX)


def pause(path: Path, size: int, shift: int, found: Space, at: float) -> None:
    """Append the marker to the log of ``size`` bytes unless it ends with one; its length is
    added to the shift first, in a file that replaces the old one only once the marker is
    stored. On a full disk either write may fail: then nothing is changed, and the next chunk
    tries again."""
    if not path.exists() or paused(path, size):
        return
    with open(path, "rb") as handle:
        handle.seek(max(size - 1, 0))
        text = marker(found) if size == 0 or handle.read(1) == b"\n" else b"\n" + marker(found)
    pending = shift_path(path).with_name(shift_path(path).name + ".tmp")
    try:
        pending.write_text(f"{shift + len(text)}\n")
        _append(path, text)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.truncate(path, size)
        pending.unlink(missing_ok=True)
        if not is_disk_full(exc):
            raise
        return
    os.replace(pending, shift_path(path))
    with contextlib.suppress(OSError):  # without it, the marker's time is the chunk's before
        record_time(path, size, at)


def append_or_cut(path: Path, size: int, data: bytes) -> bool:
    """Append ``data`` to the log of ``size`` bytes and sync it; on a full disk, cut back what
    was written and return False."""
    try:
        _append(path, data)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        with contextlib.suppress(OSError):
            os.truncate(path, size)  # frees space: nothing half-written stays
        return False
    return True


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
