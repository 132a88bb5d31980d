"""``GET /api/v1/jobs/{job}/logs/lines``: the lines of every task's streams in one job attempt,
each with the time it was shipped, from the start, a cursor, the tail, or a point in time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from shoal.core.states import State
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import LogLine, LogLines, LogStreamLines
from shoal.server.services.arrays import no_logs_of_a_parent
from shoal.server.services.jobs import find_job
from shoal.server.services.log_files import Page, read_forward, read_tail, start_after
from shoal.server.services.logs import log_path
from shoal.store.models import Job, Task

STREAMS = ("stdout", "stderr")
TOTAL_LIMIT = 8 * 1024 * 1024  # bytes of log text in one answer, over all streams ...
MIN_LIMIT = 64 * 1024  # ... but each stream may still read this much
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class LinesQuery:
    attempt: str | None = None
    previous: bool = False
    role: str | None = None
    index: int | None = None
    stream: str | None = None
    tail: int | None = None
    since: str | None = None
    cursors: tuple[str, ...] = ()
    limit: int = 256 * 1024


def parse_since(text: str, now: float) -> float:
    """``10m``, ``1h``, ``2s``, ``1d``, epoch seconds or RFC 3339 -> epoch seconds."""
    text = text.strip()
    duration = DURATION.match(text)
    if duration:
        return now - float(duration.group(1)) * UNIT_S[duration.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(
            400,
            "InvalidSince",
            f"since (--since): {text!r} is not a duration (10m, 1h, 2s, 1d) or an RFC 3339 time",
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.astimezone()  # a time without a zone is local time
    return stamp.timestamp()


def _parse_cursors(cursors: tuple[str, ...]) -> dict[tuple[str, int, str], tuple[int | None, int]]:
    """``ROLE/INDEX/STREAM[/TRY]:OFFSET`` -> (try or None, offset) per stream."""
    parsed = {}
    for cursor in cursors:
        where, _, offset = cursor.rpartition(":")
        parts = where.split("/")
        role, index, stream, attempt = (*parts, "")[:4] if len(parts) in (3, 4) else ("",) * 4
        if not (
            role
            and index.isdigit()
            and stream in STREAMS
            and (attempt.isdigit() or not attempt)
            and offset.isdigit()
        ):
            raise ApiError(
                400, "InvalidCursor", f"cursor: {cursor!r} is not ROLE/INDEX/STREAM[/TRY]:OFFSET"
            )
        parsed[(role, int(index), stream)] = (int(attempt) if attempt else None, int(offset))
    return parsed


def _parse_attempt(text: str) -> tuple[int, int | None]:
    job_attempt, _, task_attempt = text.partition(".")
    if not job_attempt.isdigit() or not (task_attempt.isdigit() or not task_attempt):
        raise ApiError(
            400, "InvalidAttempt", f"attempt: {text!r} is not N (job attempt) or N.M (task try M)"
        )
    return int(job_attempt), int(task_attempt) if task_attempt else None


def _attempt_list(attempts: list[int], current: int) -> str:
    return ", ".join(f"{a} (current)" if a == current else str(a) for a in attempts) or "none yet"


def _choose_attempt(job: Job, query: LinesQuery, attempts: list[int]) -> tuple[int, int | None]:
    if query.previous and query.attempt is not None:
        raise ApiError(400, "InvalidAttempt", "attempt: give either attempt or previous, not both")
    if query.previous:
        wanted, task_attempt = job.attempt - 1, None
        missing = f"job {job.id} has no attempt before its current one ({job.attempt})"
    elif query.attempt is not None:
        wanted, task_attempt = _parse_attempt(query.attempt)
        missing = f"job {job.id} has no attempt {query.attempt}"
    else:
        return job.attempt, None
    if wanted not in attempts:
        known = _attempt_list(attempts, job.attempt)
        raise ApiError(404, "NoAttemptError", f"{missing}; its attempts: {known}")
    return wanted, task_attempt


def _choose_tasks(
    job: Job, tasks: list[Task], query: LinesQuery, job_attempt: int, task_attempt: int | None
) -> list[Task]:
    chosen = [t for t in tasks if t.job_attempt == job_attempt]
    if query.role is not None:
        index = query.index or 0
        named = [t for t in chosen if t.role == query.role and t.index == index]
        if not named and chosen:
            names = ", ".join(f"{t.role}/{t.index}" for t in chosen)
            raise ApiError(
                404,
                "NoTaskError",
                f"job {job.id} attempt {job_attempt} has no task {query.role}/{index}; "
                f"its tasks: {names}",
            )
        chosen = named
    if task_attempt is not None:
        if not any(t.attempt >= task_attempt for t in chosen):
            tries = ", ".join(f"{t.role}/{t.index}: 1..{t.attempt}" for t in chosen)
            raise ApiError(
                404,
                "NoAttemptError",
                f"no task of job {job.id} attempt {job_attempt} has try {task_attempt}; "
                f"tries: {tries}",
            )
        chosen = [t for t in chosen if t.attempt >= task_attempt]
    return chosen


def _read_stream(
    query: LinesQuery, task: Task, which: int, stream: str, ctx: ServerContext, budget: int
) -> tuple[Page, bool]:
    path = log_path(ctx, task, which, stream)
    final = which < task.attempt or State(task.state).is_terminal
    cursor_try, cursor = _parse_cursors(query.cursors).get(
        (task.role, task.index, stream), (0, None)
    )
    if cursor_try not in (None, which):
        cursor = None  # a cursor into another try of this task: read this try from its start
    since = None if query.since is None else parse_since(query.since, ctx.clock())
    if cursor is not None:
        page = read_forward(path, cursor, budget, final)
    elif query.tail is not None:
        page = read_tail(path, query.tail, final)
    elif since is not None:
        page = read_forward(path, start_after(path, since), budget, final)
    else:
        page = read_forward(path, 0, budget, final)
    if since is not None:
        page = Page([line for line in page.lines if line.at > since], *_rest(page))
    return page, final


def _rest(page: Page) -> tuple[int, int, bool]:
    return page.next_offset, page.size, page.more


def read_lines(ctx: ServerContext, caller: Principal, ref: str, query: LinesQuery) -> LogLines:
    if query.since is not None:
        parse_since(query.since, ctx.clock())  # a bad value is a 400 even with no task yet
    _parse_cursors(query.cursors)
    with ctx.db.read() as session:
        job = find_job(session, caller, ref)
        no_logs_of_a_parent(job)
        tasks = list(
            session.scalars(
                select(Task).where(Task.job_id == job.id).order_by(Task.job_attempt, Task.id)
            )
        )
        attempts = sorted({t.job_attempt for t in tasks})
        job_attempt, task_attempt = _choose_attempt(job, query, attempts)
        chosen = _choose_tasks(job, tasks, query, job_attempt, task_attempt)
        streams = [query.stream] if query.stream else list(STREAMS)
        budget = TOTAL_LIMIT
        out = []
        for task in chosen:
            which = task_attempt or task.attempt
            for stream in streams:
                limit = min(query.limit, max(budget, MIN_LIMIT))
                page, final = _read_stream(query, task, which, stream, ctx, limit)
                budget -= sum(len(line.text) + 1 for line in page.lines)
                out.append(
                    LogStreamLines(
                        role=task.role,
                        index=task.index,
                        taskAttempt=which,
                        stream=stream,
                        lines=[LogLine(at=line.at, text=line.text) for line in page.lines],
                        nextOffset=page.next_offset,
                        size=page.size,
                        more=page.more,
                        complete=final and not page.more and page.next_offset >= page.size,
                    )
                )
        return LogLines(
            id=job.id,
            state=job.state,
            jobAttempt=job_attempt,
            currentAttempt=job.attempt,
            attempts=attempts,
            streams=out,
        )
