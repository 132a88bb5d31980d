"""What the pools look like to users: sizes, machines, node-hours and cost, and what a job waits
for ("waiting for 2 nodes of pool gpu (launching, 40 s)")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from shoal.server.auth import Principal
from shoal.server.autoscaling.offers import offer_id
from shoal.server.autoscaling.rows import blocked_offers, pool_targets, set_target
from shoal.server.context import ApiError, ServerContext
from shoal.server.pool_schemas import PoolInstanceOut, PoolOut
from shoal.server.services import audit
from shoal.server.services.users import require_admin
from shoal.store.models import CloudInstanceRow

if TYPE_CHECKING:
    from shoal.server.autoscaling.autoscaler import Autoscaler

NO_POOLS = (
    "this server has no cloud pools: start it with `shoal server start --cloud FILE` "
    "(docs/cloud.md)"
)


def _scaler(ctx: ServerContext) -> Autoscaler:
    if ctx.autoscaler is None:
        raise ApiError(409, "NoCloudPools", NO_POOLS)
    scaler: Autoscaler = ctx.autoscaler
    return scaler


def machine_hours(row: CloudInstanceRow, now: float) -> float:
    return max(0.0, (row.ended_at or now) - row.launched_at) / 3600


def list_pools(ctx: ServerContext) -> list[PoolOut]:
    scaler = _scaler(ctx)
    now = ctx.clock()
    with ctx.db.read() as session:
        targets = pool_targets(session)
        blocked = blocked_offers(session, now)
        rows = list(
            session.scalars(select(CloudInstanceRow).order_by(CloudInstanceRow.launched_at))
        )
    out = []
    for pool in scaler.config.pools:
        mine = [r for r in rows if r.pool == pool.name]
        live = [r for r in mine if r.ended_at is None]
        template = scaler.templates.get(pool.name)
        out.append(
            PoolOut(
                name=pool.name,
                provider=pool.provider,
                min=pool.min_nodes,
                max=pool.max_nodes,
                target=targets.get(pool.name),
                size=sum(1 for r in live if r.phase != "terminating"),
                idleTimeoutS=pool.idle_timeout_s,
                joinTimeoutS=pool.join_timeout_s,
                pricePerHour=None
                if template is None or not template.can_grow
                else template.price_per_hour,
                offerError=scaler.offer_errors.get(pool.name),
                nodeHours=round(sum(machine_hours(r, now) for r in mine), 4),
                cost=round(sum(machine_hours(r, now) * r.price_per_hour for r in mine), 4),
                machines=[_machine(r, now) for r in live],
                blockedOffers=[
                    f"{offer.key}: {blocked[key]}"
                    for offer in scaler.book.known(pool.name)
                    if (key := offer_id(pool.provider, offer)) in blocked
                ],
            )
        )
    return out


def _machine(row: CloudInstanceRow, now: float) -> PoolInstanceOut:
    return PoolInstanceOut(
        node=row.node,
        requestId=row.request_id,
        phase=row.phase,
        offer=row.offer_key,
        address=row.address,
        spot=row.spot,
        pricePerHour=row.price_per_hour,
        launchedAt=row.launched_at,
        joinedAt=row.joined_at,
        idleSince=row.idle_since,
        lastError=row.last_error,
    )


def scale_pool(ctx: ServerContext, caller: Principal, name: str, target: int | None) -> PoolOut:
    """Set a pool's size (``None``: back to its file's min and max): `shoal cluster scale`."""
    require_admin(caller)
    scaler = _scaler(ctx)
    pool = scaler.config.pool(name)
    if pool is None:
        known = ", ".join(p.name for p in scaler.config.pools) or "none"
        raise ApiError(404, "NoPoolError", f"no pool named {name!r} (pools: {known})")
    if target is not None and target > pool.max_nodes:
        raise ApiError(
            400,
            "TargetAboveMax",
            f"target {target} is above pool {name}'s max of {pool.max_nodes}: raise `max` in "
            "the cloud file and restart the server, or ask for fewer",
        )
    with ctx.db.write() as session:
        set_target(session, name, target, caller.user, ctx.clock())
        detail = {"target": target}
        audit.record(session, ctx.clock(), caller, "pool.scale", f"pool {name}", detail)
    scaler.wake()
    return next(p for p in list_pools(ctx) if p.name == name)


def waiting_lines(ctx: ServerContext, job_id: str) -> list[str]:
    """What a waiting job waits for from the pools, in words (empty: nothing)."""
    scaler = ctx.autoscaler
    if scaler is None:
        return []
    now = ctx.clock()
    lines = []
    for wait in scaler.waits.get(job_id, []):
        nodes = f"{wait.nodes} node{'s' if wait.nodes != 1 else ''} of pool {wait.pool}"
        since = "to be launched" if wait.since is None else f"launching, {now - wait.since:.0f} s"
        lines.append(f"waiting for {nodes} ({since})")
    unservable = scaler.unservable.get(job_id)
    if unservable:
        lines.append(f"the pools cannot grow for it: {unservable}")
    return lines
