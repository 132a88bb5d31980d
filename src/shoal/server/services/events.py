"""The per-job event log: what happened to a job and when, in words."""

from __future__ import annotations

from sqlalchemy.orm import Session

from shoal.store.models import Event


def record(
    session: Session,
    job_id: str,
    at: float,
    kind: str,
    message: str,
    role: str | None = None,
    index: int | None = None,
) -> None:
    session.add(Event(job_id=job_id, at=at, kind=kind, message=message, role=role, index=index))
