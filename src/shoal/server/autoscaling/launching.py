"""Launching one machine of a pool: its row first, then the provider, offer after offer.

The row is committed before the provider is asked, so a server killed during a scale-up finds,
after its restart, every machine it may have started (``reconcile.py`` settles them). Each
machine joins with a token of its own: one use, expiring with the pool's join timeout, pinning
the cluster's CA (the same ``shoal agent join`` as any machine: docs/cluster.md).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

from shoal.cloud.bootstrap import render_user_data
from shoal.cloud.pools import PoolSpec
from shoal.cloud.provider import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    ErrorKind,
    LaunchRequest,
    Offer,
    Provider,
    ProviderError,
)
from shoal.core.autoscale import Phase
from shoal.server.autoscaling.offers import offer_id
from shoal.server.autoscaling.rows import AUTOSCALER, block_offer, end, note
from shoal.server.ca import PkiFiles
from shoal.server.context import ServerContext
from shoal.server.services.joining import create_token, revoke_token
from shoal.store.models import CloudInstanceRow

log = logging.getLogger("shoal.autoscaler")


@dataclass(frozen=True)
class LaunchTarget:
    cluster: str
    pool: PoolSpec
    provider_name: str
    provider: Provider
    offers: list[Offer]  # cheapest first
    blocked: dict[str, str]  # offer id -> why not


def launch_one(ctx: ServerContext, target: LaunchTarget) -> CloudInstanceRow | None:
    """Launch one machine, trying the offers in price order; None if none would start."""
    now = ctx.clock()
    pool = target.pool
    request_id = secrets.token_hex(8)
    created = create_token(ctx, AUTOSCALER, float(pool.join_timeout_s), 1)
    with ctx.db.write() as session:
        row = CloudInstanceRow(
            request_id=request_id,
            pool=pool.name,
            provider=target.provider_name,
            node=f"{pool.name}-{request_id[:8]}",
            phase=Phase.LAUNCHING.value,
            launched_at=now,
            spot=pool.spot,
        )
        session.add(row)
        note(session, row, now, "requested", f"pool {pool.name} asked for a machine")
    tried: list[str] = []
    for offer in target.offers:
        key = offer_id(target.provider_name, offer)
        if key in target.blocked:
            tried.append(f"{offer.key}: blocked ({target.blocked[key]})")
            continue
        request = _request(ctx, target, row, offer, str(created.token))
        try:
            instance = target.provider.launch(request)
        except ProviderError as exc:
            tried.append(f"{offer.key}: {exc.kind.value}: {exc.message}")
            if _after_refusal(ctx, target, row, offer, exc):
                continue
            break
        with ctx.db.write() as session:
            row = session.merge(row)
            row.offer_key, row.price_per_hour = offer.key, offer.price_per_hour
            row.cpu_millis, row.memory_mib, row.gpus = (
                offer.cpu_millis,
                offer.memory_mib,
                offer.gpus,
            )
            row.instance_id, row.address = instance.instance_id, instance.address
            message = (
                f"launching {offer.instance_type} in {offer.zone} at {offer.price_per_hour:g}/h"
            )
            note(session, row, ctx.clock(), "launched", message, {"offer": offer.key})
        return row
    revoke_token(ctx, AUTOSCALER, created.row.id)
    with ctx.db.write() as session:
        row = session.merge(row)
        row.last_error = "; ".join(tried) or "the pool has no offer"
        end(session, row, ctx.clock(), f"no machine started: {row.last_error}")
    return None


def _request(
    ctx: ServerContext, target: LaunchTarget, row: CloudInstanceRow, offer: Offer, token: str
) -> LaunchRequest:
    pool = target.pool
    ca_pem = PkiFiles.of(ctx.settings.home).ca_cert.read_text()
    user_data = render_user_data(
        server_url=ctx.settings.cloud_join_url or ctx.settings.url,
        join_token=token,
        node_name=row.node,
        labels={**dict(pool.labels), "shoal.pool": pool.name},
        cpu_millis=offer.cpu_millis,
        memory_mib=offer.memory_mib,
        gpus=offer.gpus,
        install=pool.install,
        shoal_path=pool.shoal_path,
        ca_pem=ca_pem,
        # where the machine learns of its coming preemption (Azure's Scheduled Events, or the
        # local provider's copy of them); None: the provider gives no notices
        scheduled_events_url=getattr(target.provider, "scheduled_events_url", None),
    )
    tags = {TAG_CLUSTER: target.cluster, TAG_POOL: pool.name, TAG_REQUEST: row.request_id}
    return LaunchRequest(
        row.request_id, target.cluster, pool.name, row.node, offer, user_data, tags
    )


def _after_refusal(
    ctx: ServerContext,
    target: LaunchTarget,
    row: CloudInstanceRow,
    offer: Offer,
    exc: ProviderError,
) -> bool:
    """Record a refused launch; whether the next offer is worth trying."""
    now = ctx.clock()
    with ctx.db.write() as session:
        row = session.merge(row)
        if exc.kind is ErrorKind.QUOTA:
            until = now + ctx.settings.offer_block_s
            key = offer_id(target.provider_name, offer)
            block_offer(session, key, until, f"quota: {exc.message}")
            target.blocked[key] = f"quota: {exc.message}"
            rest = f"not tried for {ctx.settings.offer_block_s:g} s"
            message = f"{offer.key} refused for quota, {rest}: {exc.message}"
        else:
            message = f"{offer.key} refused ({exc.kind.value}): {exc.message}"
        note(session, row, now, f"refused.{exc.kind.value}", message, {"offer": offer.key})
    log.info("pool %s: %s", target.pool.name, message)
    return exc.kind in (ErrorKind.CAPACITY, ErrorKind.QUOTA)
