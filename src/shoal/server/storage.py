"""Free space under ``SHOAL_HOME`` (docs/disk.md).

The server keeps a reserve of free space for its database: a submission is refused with 507
``StorageFull`` before it writes anything once the filesystem holding the home has less free
space than the reserve, and stored task logs stop growing there (with one marker line,
``services/logs.py``). A write that still meets a full disk (SQLite's ``SQLITE_FULL``, an
``ENOSPC`` while a file is written) is rolled back and answered 507 too, never 500, by the app's
exception handlers (``disk_full_answer``). Reads need no space and keep working.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from shoal import archives
from shoal.server.context import ApiError
from shoal.server.settings import ServerSettings

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
CODE = "StorageFull"


@dataclass(frozen=True)
class Space:
    path: Path
    free: int  # bytes an unprivileged writer may still use
    total: int
    reserve: int

    @property
    def low(self) -> bool:
        return self.free < self.reserve


def space(settings: ServerSettings) -> Space:
    """The filesystem holding the home: its free space and the reserve shoal keeps on it."""
    stat = os.statvfs(settings.home)
    total = stat.f_blocks * stat.f_frsize
    reserve = min(settings.storage_reserve_bytes, int(total * settings.storage_reserve_fraction))
    return Space(settings.home, stat.f_bavail * stat.f_frsize, total, reserve)


def require_room(settings: ServerSettings) -> None:
    """Raise 507 ``StorageFull`` if the home's filesystem is below its reserve."""
    found = space(settings)
    if found.low:
        raise ApiError(507, CODE, full_message(found))


def full_message(found: Space) -> str:
    reserve = f", below the {archives.human(found.reserve)} shoal keeps free for its database"
    reserve = reserve if found.low else ""
    return (
        f"the disk holding {found.path} is full: {archives.human(found.free)} free of "
        f"{archives.human(found.total)}{reserve}; nothing was stored. Free space on it "
        f"(finished jobs' logs under {found.path / 'logs'}, data sets no job needs) or grow "
        "it, then try again"
    )


def is_disk_full(exc: BaseException) -> bool:
    """An ``ENOSPC``/``EDQUOT`` from a file write, or SQLite's ``SQLITE_FULL`` (possibly wrapped
    by SQLAlchemy, whose errors keep the driver's in ``orig``)."""
    original = getattr(exc, "orig", None) or exc
    if isinstance(original, OSError) and original.errno in DISK_FULL_ERRNOS:
        return True
    if isinstance(original, sqlite3.Error):
        code = getattr(original, "sqlite_errorcode", None)
        return code is not None and code & 0xFF == sqlite3.SQLITE_FULL
    return False


def disk_full_answer(settings: ServerSettings, exc: BaseException) -> ApiError | None:
    """The 507 for a write that met a full disk (None: ``exc`` is something else)."""
    if not is_disk_full(exc):
        return None
    try:
        message = full_message(space(settings))
    except OSError:
        message = f"the disk holding {settings.home} is full; nothing was stored"
    return ApiError(507, CODE, message)
