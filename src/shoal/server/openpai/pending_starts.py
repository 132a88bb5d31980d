"""``executionType: START`` asked while the job is stopping (docs/openpai-compat.md, "Jobs").

OpenPAI accepted it (202) and ran the job again once it had stopped. shoal records the request as
the job's event ``start-requested``, so it is durable: a server restarted in between finds it
again at its start (``resume``). A watcher thread, running only while some request waits, runs
each job again (``restarts.restart``) once it has ended. A STOP asked meanwhile cancels the
request (event ``start-cancelled``); the job's ``restarted`` event closes it."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from shoal.core.states import State
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import restarts
from shoal.server.services.events import record
from shoal.store.models import Event, Job

ASKED, CANCELLED, RESTARTED = "start-requested", "start-cancelled", "restarted"
POLL_S = 0.2  # how often a waiting request looks at its job
_ASKER = re.compile(r"^START asked by (\S+) ")

log = logging.getLogger("shoal.openpai")


class PendingStarts:
    """The START requests waiting for their jobs to stop, by job id (the user who asked)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._waiting: dict[str, str] = {}
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def ask(self, caller: Principal, job_id: str) -> bool:
        """Record START for the job if it is stopping (True); False if it is not (then START
        applies to it at once)."""
        with self.ctx.db.write() as session:
            job = session.get(Job, job_id)
            if job is None or job.state != State.STOPPING.value or job.array_size is not None:
                return False
            message = (
                f"START asked by {caller.user} while the job stops: it runs again as its next "
                "attempt once it has stopped (a STOP cancels this)"
            )
            record(session, job_id, self.ctx.clock(), ASKED, message)
        self._watch(job_id, caller.user)
        return True

    def cancel(self, caller: Principal, job_id: str) -> None:
        """A STOP after START: the job is not run again."""
        with self._lock:
            asked = self._waiting.pop(job_id, None)
        if asked is None:
            return
        with self.ctx.db.write() as session:
            message = f"STOP asked by {caller.user}: the START {asked} asked is cancelled"
            record(session, job_id, self.ctx.clock(), CANCELLED, message)

    def resume(self) -> None:
        """Watch again the requests an earlier run of the server recorded and did not carry out
        (the last of a job's ``start-requested``, ``start-cancelled`` and ``restarted``
        events is a request)."""
        asked_jobs = select(Event.job_id).where(Event.kind == ASKED)
        query = (
            select(Event.job_id, Event.kind, Event.message)
            .where(Event.job_id.in_(asked_jobs), Event.kind.in_((ASKED, CANCELLED, RESTARTED)))
            .order_by(Event.id)
        )
        with self.ctx.db.read() as session:
            last = {job_id: (kind, message) for job_id, kind, message in session.execute(query)}
        for job_id, (kind, message) in last.items():
            if kind == ASKED:
                found = _ASKER.match(message)
                self._watch(job_id, found.group(1) if found else "admin")

    def waiting(self) -> list[str]:
        with self._lock:
            return sorted(self._waiting)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(10)

    def _watch(self, job_id: str, user: str) -> None:
        with self._lock:
            self._waiting[job_id] = user
            if self._closed or self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._run, name="openpai-pending-starts", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._waiting:
                    self._thread = None
                    return
                waiting = dict(self._waiting)
            for job_id, user in waiting.items():
                try:
                    self._settle(job_id, user)
                except Exception:  # one job's trouble must not end the others' watch
                    log.exception("running job %s again after its stop", job_id)
            self._wake.wait(POLL_S)
            self._wake.clear()

    def _settle(self, job_id: str, user: str) -> None:
        """Run the job again if it has ended; forget the request if it is no longer stopping."""
        with self.ctx.db.read() as session:
            job = session.get(Job, job_id)
            state = None if job is None else State(job.state)
        if state is State.STOPPING:
            return
        with self._lock:
            if self._waiting.get(job_id) != user:
                return  # cancelled meanwhile
            del self._waiting[job_id]
        if state is None or not state.is_terminal:
            return  # gone, or run again some other way
        try:
            restarts.restart(self.ctx, Principal(user=user, is_admin=False, kind="user"), job_id)
        except ApiError as exc:
            log.warning("job %s was not run again after its stop: %s", job_id, exc.message)


def pending_starts(app: FastAPI) -> PendingStarts:
    """The app's requests (made at its start; on first use for an app started without one)."""
    starts: PendingStarts | None = getattr(app.state, "pending_starts", None)
    if starts is None:
        starts = app.state.pending_starts = PendingStarts(app.state.context)
    return starts


@asynccontextmanager
async def _watching(app: FastAPI) -> AsyncIterator[None]:
    starts = pending_starts(app)
    await run_in_threadpool(starts.resume)
    yield
    await run_in_threadpool(starts.close)


router = APIRouter(lifespan=_watching)  # no routes: it watches for the app's life
