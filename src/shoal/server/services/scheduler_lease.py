"""One scheduler among several servers on one store (docs/postgresql.md, "One scheduler").

Each server's scheduler loop asks ``LeaseKeeper.hold`` before a cycle. The lease is one row
(``scheduler_lease``, migration 0031), read and written in a write transaction, so the store's
one-writer-at-a-time lock makes every decision about it atomic:

- nobody holds it, or it has expired: take it, with the fencing token one higher;
- this scheduler holds it: renew it (a third of the way through, so not every cycle writes);
- the same server (host and home) holds it with an earlier run whose process is gone (killed
  before it could let go): take it at once, token raised, rather than wait out a dead run's
  lease (a run still alive keeps it until it expires);
- another server holds it and it has not expired: do not schedule; ask again later.

``check``, called first in every plan's write transaction, refuses the plan (``StaleLeader``)
unless the row still names this run and its token: a scheduler paused past its lease (a long GC
pause, SIGSTOP, a VM migrated) wakes with a plan made on an old view and cannot apply it.

Expiry uses the servers' wall clocks: servers on several hosts need them in step (NTP), as
Kubernetes' leases do.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session

from shoal.server.context import ServerContext
from shoal.store.models import SchedulerLeaseRow

log = logging.getLogger("shoal.scheduler")
NAME = "scheduler"


def lease_holder(ctx: ServerContext) -> str:
    """The name a server's scheduler holds the lease under: its host and home."""
    return f"{socket.gethostname()}:{ctx.settings.home}"


class StaleLeader(RuntimeError):
    """This scheduler's lease was taken over: its plan is refused."""


@dataclass(frozen=True)
class Held:
    token: int
    fresh: bool  # taken just now: the model must be reloaded whole (another may have run)


class LeaseKeeper:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.holder = lease_holder(ctx)
        self.incarnation = f"{os.getpid()}-{uuid.uuid4().hex[:16]}"  # pid first: see _gone
        self.token: int | None = None
        self.ever_held = False
        self._renew_at = 0.0  # our clock: when the lease is renewed next

    @property
    def lease_s(self) -> float:
        return self.ctx.settings.scheduler_lease_s

    def hold(self) -> Held | None:
        """The lease, taken or renewed as needed; None while another server holds it."""
        now = self.ctx.clock()
        if self.token is not None and now < self._renew_at:
            return Held(self.token, fresh=False)
        with self.ctx.db.write() as session:
            row = session.get(SchedulerLeaseRow, NAME)
            held = self._decide(session, row, now)
        if held is None:
            if self.token is not None:
                log.warning("the scheduler lease was taken over: this server stops scheduling")
            self.token = None
            return None
        if held.fresh:
            log.info("this server's scheduler holds the lease (token %d)", held.token)
        self.token, self.ever_held = held.token, True
        self._renew_at = now + self.lease_s / 3
        return held

    def _decide(self, session: Session, row: SchedulerLeaseRow | None, now: float) -> Held | None:
        expires = now + self.lease_s
        if row is None:
            session.add(self._row(1, now, expires))
            return Held(1, fresh=True)
        if row.incarnation == self.incarnation and row.token == self.token:
            row.expires_at = expires
            return Held(row.token, fresh=False)
        if row.expires_at <= now or (row.holder == self.holder and _gone(row.incarnation)):
            row.holder, row.incarnation = self.holder, self.incarnation
            row.token, row.expires_at, row.acquired_at = row.token + 1, expires, now
            return Held(row.token, fresh=True)
        return None

    def _row(self, token: int, now: float, expires: float) -> SchedulerLeaseRow:
        return SchedulerLeaseRow(
            name=NAME,
            holder=self.holder,
            incarnation=self.incarnation,
            token=token,
            expires_at=expires,
            acquired_at=now,
        )

    def check(self, session: Session) -> None:
        """In a write transaction: raise ``StaleLeader`` unless this run still holds the lease.
        The loop applies plans only once it has held it; a cycle run by hand before that (as
        tests do beside a starting loop) is not a leader's and is not fenced."""
        if not self.ever_held:
            return
        row = session.get(SchedulerLeaseRow, NAME, populate_existing=True)
        if row is None or row.incarnation != self.incarnation or row.token != self.token:
            by = "nobody" if row is None else f"{row.holder} (token {row.token})"
            self.token = None
            raise StaleLeader(f"the scheduler lease is held by {by}: this plan is not applied")

    def release(self) -> None:
        """Let go at a clean stop, so another server need not wait out the lease."""
        if self.token is None:
            return
        with self.ctx.db.write() as session:
            row = session.get(SchedulerLeaseRow, NAME)
            if row is not None and row.incarnation == self.incarnation:
                row.expires_at = 0.0
        self.token = None


def _gone(incarnation: str) -> bool:
    """Whether the process of a run of this same host (its pid leads ``incarnation``) has
    ended; a run of unknown shape counts as alive."""
    pid_text = incarnation.split("-", 1)[0]
    if not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
