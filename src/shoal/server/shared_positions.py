"""Queue positions on every server of one PostgreSQL store (docs/postgresql.md, "Several
servers").

Positions are the leading scheduler's, published to its own server after each cycle
(``positions.py``). Another server's scheduler does not run cycles, so its API would show none.
The leader also writes them to the store (``PositionPublisher``: one row, at most once a second
and only when they changed, under its lease's fencing token, so a paused old leader cannot
overwrite a newer one's), and the API of a server whose scheduler does not lead reads them from
there (``SharedPositions``: the row read at most once a second). A follower's positions are so
at most about two seconds older than the leader's own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert

from shoal.server.positions import Positions, QueuePositions, SentPositions
from shoal.server.services.scheduler_lease import NAME as LEASE
from shoal.server.services.scheduler_lease import lease_holder
from shoal.store.models import PublishedPositionsRow, SchedulerLeaseRow

if TYPE_CHECKING:
    from shoal.server.context import ServerContext
    from shoal.store.db import Database

log = logging.getLogger("shoal.scheduler")
NAME = "queue"
QUEUES = "\x1e"  # between queues in the row (a job id never holds it)
PUBLISH_EVERY_S = 1.0
READ_EVERY_S = 1.0


class PositionPublisher:
    """The leading scheduler's side."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._published_at = 0.0  # monotonic
        self._last: str | None = None

    def offer(self, positions: QueuePositions, token: int | None, now: float) -> None:
        """Write ``positions`` if due and changed (``token``: the lease's; None: not leading)."""
        if token is None or time.monotonic() - self._published_at < PUBLISH_EVERY_S:
            return
        body = QUEUES.join(positions.encoded())
        if body == self._last:
            return
        row = {"name": NAME, "token": token, "published_at": now, "queues": body}
        statement = insert(PublishedPositionsRow).values(**row)
        statement = statement.on_conflict_do_update(
            index_elements=["name"],
            set_={"token": token, "published_at": now, "queues": body},
            where=PublishedPositionsRow.token <= token,
        )
        try:  # its own small transaction: not under the store's write lock
            with self._db.engine.begin() as connection:
                connection.execute(statement)
        except Exception:  # positions are a convenience: never fail a cycle for them
            log.exception("could not publish the queue positions")
            return
        self._published_at, self._last = time.monotonic(), body


class SharedPositions:
    """The API's positions on a shared store: its own scheduler's while it leads, else the
    published ones."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.holder = lease_holder(ctx)
        self._lock = threading.Lock()
        self._read_at = -READ_EVERY_S  # monotonic
        self._leading = True
        self._published_at: float | None = None
        self._published = SentPositions()

    def of_ids(self, job_ids: Sequence[str]) -> dict[str, int]:
        return self._current().of_ids(job_ids)

    def _current(self) -> Positions:
        with self._lock:
            if time.monotonic() - self._read_at >= READ_EVERY_S:
                self._read()
            leading = self._leading
        return self.ctx.positions if leading else self._published

    def _read(self) -> None:
        """Who leads, and the published positions if they are newer (under ``_lock``)."""
        self._read_at = time.monotonic()
        try:
            with self.ctx.db.read() as session:
                holder = session.scalar(
                    select(SchedulerLeaseRow.holder).where(SchedulerLeaseRow.name == LEASE)
                )
                self._leading = holder is None or holder == self.holder
                if self._leading:
                    return
                published = session.scalar(
                    select(PublishedPositionsRow.published_at).where(
                        PublishedPositionsRow.name == NAME
                    )
                )
                if published is None or published == self._published_at:
                    return
                queues = session.scalar(
                    select(PublishedPositionsRow.queues).where(PublishedPositionsRow.name == NAME)
                )
        except Exception:  # the store is away: keep what was read last
            log.exception("could not read the published queue positions")
            return
        self._published_at = published
        self._published.update(queues.split(QUEUES) if queues else [])
