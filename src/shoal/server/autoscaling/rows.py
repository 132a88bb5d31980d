"""The store side of the pools: instance rows, offer blocks, targets, and their events.

Every launch, join, failure and termination is a node event of the machine's node name (so
``shoal node events NAME`` tells a machine's story even after it is gone) and an audit row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from shoal.core.autoscale import Phase, PoolInstance
from shoal.server.auth import Principal
from shoal.server.services import audit
from shoal.server.services.node_life import record_node_event
from shoal.store.models import CloudInstanceRow, CloudOfferBlockRow, CloudPoolTargetRow

# An admin of its own (kind "user": the admin checks of the services it calls let it act).
AUTOSCALER = Principal(user="autoscaler", is_admin=True, kind="user")
ENDED = "ended"  # the phase of a row whose machine is gone


def live_rows(session: Session) -> list[CloudInstanceRow]:
    query = select(CloudInstanceRow).where(CloudInstanceRow.ended_at.is_(None))
    return list(session.scalars(query.order_by(CloudInstanceRow.launched_at)))


def as_instance(row: CloudInstanceRow) -> PoolInstance:
    return PoolInstance(
        request_id=row.request_id,
        pool=row.pool,
        node=row.node,
        phase=Phase(row.phase),
        launched_at=row.launched_at,
        idle_since=row.idle_since,
    )


def note(
    session: Session,
    row: CloudInstanceRow,
    now: float,
    kind: str,
    message: str,
    detail: dict[str, Any] | None = None,
) -> None:
    """One step of a machine's life: a node event and an audit row (``cloud.KIND``)."""
    record_node_event(session, row.node, now, f"cloud.{kind}", message, by=AUTOSCALER.user)
    full = {"pool": row.pool, "request": row.request_id, **(detail or {})}
    audit.record(session, now, AUTOSCALER, f"cloud.{kind}", f"node {row.node}", full)


def end(session: Session, row: CloudInstanceRow, now: float, why: str) -> None:
    row.phase, row.ended_at = ENDED, now
    row.idle_since = None
    note(session, row, now, "ended", why)


def pool_targets(session: Session) -> dict[str, int]:
    return {r.pool: r.target for r in session.scalars(select(CloudPoolTargetRow))}


def set_target(session: Session, pool: str, target: int | None, by: str, now: float) -> None:
    session.execute(delete(CloudPoolTargetRow).where(CloudPoolTargetRow.pool == pool))
    if target is not None:
        session.add(CloudPoolTargetRow(pool=pool, target=target, set_by=by, set_at=now))


def blocked_offers(session: Session, now: float) -> dict[str, str]:
    """``provider:offer key`` -> why it is not tried, for blocks still in force."""
    rows = session.scalars(select(CloudOfferBlockRow).where(CloudOfferBlockRow.until > now))
    return {r.offer: r.reason for r in rows}


def block_offer(session: Session, offer: str, until: float, reason: str) -> None:
    row = session.get(CloudOfferBlockRow, offer)
    if row is None:
        session.add(CloudOfferBlockRow(offer=offer, until=until, reason=reason))
    else:
        row.until, row.reason = max(row.until, until), reason
