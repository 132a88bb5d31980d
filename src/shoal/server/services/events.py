"""The per-job event log: what happened to a job and when, in words.

Events are gathered in the session and written with one plain multi-row insert just before the
transaction commits (after the ORM flush, so the jobs they name exist): a busy transaction records
dozens, and the ORM's per-object bookkeeping would cost more than the inserts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, insert
from sqlalchemy.orm import Session

from shoal.store.models import Event

_INSERT = insert(Event)
_KEY = "shoal.events"


def record(
    session: Session,
    job_id: str,
    at: float,
    kind: str,
    message: str,
    role: str | None = None,
    index: int | None = None,
) -> None:
    rows: list[dict[str, Any]] = session.info.setdefault(_KEY, [])
    rows.append(
        {"job_id": job_id, "at": at, "kind": kind, "message": message, "role": role, "index": index}
    )


def flush_events(session: Session) -> None:
    """Write the events recorded so far in this transaction (done at commit; call it before
    reading them back in the same transaction)."""
    rows = session.info.pop(_KEY, None)
    if rows:
        session.flush()
        session.connection().execute(_INSERT, rows)


def _forget(session: Session, *_: Any) -> None:
    session.info.pop(_KEY, None)


event.listen(Session, "before_commit", flush_events)
event.listen(Session, "after_rollback", _forget)
