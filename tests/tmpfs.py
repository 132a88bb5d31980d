"""A small tmpfs the test mounts (as root) and always unmounts, and ways to fill it: for the disk
full tests (docs/disk.md). Skips with the reason where mounting is not permitted."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

MiB = 1024 * 1024


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size_mib: int) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs at {where}: {mounted.stderr.strip() or 'not root'}")
    try:
        yield where
    finally:
        done = subprocess.run(["umount", str(where)], capture_output=True, check=False)
        if done.returncode != 0:  # something still holds a file open there: detach it
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def resize(where: Path, size_mib: int) -> None:
    subprocess.run(
        ["mount", "-o", f"remount,size={size_mib}m", str(where)], check=True, capture_output=True
    )


def free_bytes(where: Path) -> int:
    stat = os.statvfs(where)
    return stat.f_bavail * stat.f_frsize


def fill(filler: Path, leave: int = 0) -> int:
    """Grow ``filler`` until its filesystem has at most ``leave`` bytes free (0: until a write
    fails with ENOSPC); returns the bytes written."""
    written = 0
    with open(filler, "ab", buffering=0) as handle:
        while True:
            room = free_bytes(filler.parent) - leave
            if leave and room <= 0:
                break
            step = max(min(room if leave else MiB, MiB), 4096)
            try:
                written += handle.write(b"\0" * step) or 0
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return written


def integrity(database: Path) -> str:
    """``PRAGMA integrity_check`` on a connection of its own ("ok" when sound)."""
    with contextlib.closing(sqlite3.connect(database, timeout=10)) as connection:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])
