"""The agent's attempts on disk, so a restarted agent (even after ``kill -9``) keeps its tasks.

Under ``HOME/attempts/ATTEMPT_ID/`` (0700): ``state.json`` (0600, replaced atomically) holds the
launch order without its secrets, the keeper's pid and process create time (together they name
the process, whatever pids are reused since), where the task's files and logs are, its deadline
and whether a stop was asked for; ``exit.json`` is written by the task's keeper when the task ends.
``HOME/lease`` holds the lease deadline on the boot-time clock, read by every keeper.

After a restart the agent re-adopts each saved attempt whose keeper is alive (same pid, same create
time, not a zombie), reports the ones that ended with their recorded exit, and forgets an attempt
once the server has acknowledged its exit.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, ValidationError

from shoal.protocol import LaunchOrder

log = logging.getLogger("shoal.agent")
ATTEMPTS = "attempts"
STATE_FILE = "state.json"
EXIT_FILE = "exit.json"  # written by shoal.agent.keeper
LEASE_FILE = "lease"
CREATE_TIME_SLACK_S = 0.05  # psutil's create time is derived from clock ticks since boot


class SavedAttempt(BaseModel):
    order: LaunchOrder  # secrets removed: they are never written down
    workdir: str
    log_dir: str
    pid: int | None = None  # None: the agent stopped between saving and starting it
    create_time: float | None = None
    started_at: float | None = None
    deadline_at: float | None = None  # wall clock: when the job's max runtime runs out
    stop_requested: bool = False
    timed_out: bool = False
    agent_shutdown: bool = False


class Found(StrEnum):
    """What a restarted agent finds of a saved attempt."""

    RUNNING = "running"  # its keeper is alive: adopt it
    EXITED = "exited"  # its keeper recorded the task's end: report it
    VANISHED = "vanished"  # no live keeper and no record: killed (or never started)


def boot_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text``, readable by this user only."""
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _overwrite(path: Path, text: str) -> None:
    """Write ``text`` over the start of ``path`` in place (space-padded to its length)."""
    descriptor = os.open(path, os.O_WRONLY)
    try:
        size = os.fstat(descriptor).st_size
        os.pwrite(descriptor, (text.ljust(size - 1) + "\n").encode(), 0)
    finally:
        os.close(descriptor)


def same_process(pid: int, create_time: float | None) -> bool:
    """Is ``pid`` still the process started at ``create_time``, and not a zombie?"""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False  # dead; PID 1 here may not reap it
        started = process.create_time()
    except psutil.Error:
        return False
    return create_time is None or abs(started - create_time) <= CREATE_TIME_SLACK_S


def create_time_of(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


class Journal:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / ATTEMPTS
        self.lease_path = home / LEASE_FILE

    def dir(self, attempt_id: str) -> Path:
        return self.root / attempt_id

    def save(self, saved: SavedAttempt) -> None:
        path = self.dir(saved.order.attempt_id)
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(path / STATE_FILE, saved.model_dump_json())

    def forget(self, attempt_id: str) -> None:
        shutil.rmtree(self.dir(attempt_id), ignore_errors=True)

    def exit_record(self, attempt_id: str) -> dict[str, Any] | None:
        """How the keeper recorded the task's end, if it has."""
        try:
            record: dict[str, Any] = json.loads((self.dir(attempt_id) / EXIT_FILE).read_text())
        except (OSError, ValueError):
            return None
        return record

    def load_all(self) -> list[SavedAttempt]:
        """Every saved attempt; an unreadable one is logged and set aside."""
        if not self.root.is_dir():
            return []
        saved: list[SavedAttempt] = []
        for path in sorted(self.root.iterdir()):
            try:
                saved.append(SavedAttempt.model_validate_json((path / STATE_FILE).read_text()))
            except (OSError, ValidationError) as exc:
                log.warning("ignoring the saved attempt %s: %s", path, exc)
        return saved

    def find(self, saved: SavedAttempt) -> Found:
        """What became of a saved attempt. One saved before its keeper's pid was known (the agent
        stopped as it launched) is looked for by its keeper's command line, which names the
        attempt's directory; if found, ``saved`` gets its pid and create time."""
        if saved.pid is None:
            self._look_for_keeper(saved)
        if saved.pid is not None and same_process(saved.pid, saved.create_time):
            return Found.RUNNING
        if self.exit_record(saved.order.attempt_id) is not None:
            return Found.EXITED
        return Found.VANISHED

    def _look_for_keeper(self, saved: SavedAttempt) -> None:
        marker = str(self.dir(saved.order.attempt_id))
        for process in psutil.process_iter(["pid", "cmdline", "create_time"]):
            if marker in (process.info["cmdline"] or []):
                saved.pid, saved.create_time = process.info["pid"], process.info["create_time"]
                return

    # ---- the lease ----

    def extend_lease(self, deadline: float) -> None:
        """Keepers stop their tasks once the boot-time clock passes ``deadline``."""
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            write_private(self.lease_path, f"{deadline:.3f}\n")
        except OSError as exc:
            if exc.errno != errno.ENOSPC or not self.lease_path.exists():
                raise
            # A full disk (docs/disk.md): a new file needs a block, the old one has it. The
            # deadline only grows, and a keeper that cannot parse it enforces nothing that turn.
            _overwrite(self.lease_path, f"{deadline:.3f}")

    def lease_deadline(self) -> float | None:
        with contextlib.suppress(OSError, ValueError):
            return float(self.lease_path.read_text().strip())
        return None
