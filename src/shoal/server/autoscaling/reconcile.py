"""The store against the providers: their lists are the truth about machines.

* A machine the provider holds for this cluster that no live row names is terminated: after a
  restart, no machine is left that the pools do not know.
* A row whose launch was never confirmed (the server died between writing it and hearing from
  the provider) is terminated by its request id (idempotent) and ended.
* A row whose machine is gone from the list is ended; its node, if it joined, is removed (its
  tasks end as lost and are retried as their jobs allow).
* Polled errors: a launch that failed after it was accepted ends its row; a preempted machine
  ends its row and its node.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from shoal.cloud.provider import ErrorKind, InstanceState, Provider, ProviderError, ProviderEvent
from shoal.core.autoscale import Phase
from shoal.server.autoscaling.rows import AUTOSCALER, block_offer, end, live_rows, note
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import audit
from shoal.server.services.joining import remove_node
from shoal.store.models import CloudInstanceRow, Node

log = logging.getLogger("shoal.autoscaler")
LIST_GRACE_S = 30.0  # a just-launched machine may not be listed yet
CAPACITY_BLOCK_S = 60.0  # an offer whose accepted launch failed for capacity rests this long


def reconcile(ctx: ServerContext, cluster: str, providers: dict[str, Provider]) -> None:
    for name, provider in providers.items():
        try:
            listed = provider.list_instances(cluster)
        except ProviderError as exc:
            log.warning("provider %s: listing machines failed: %s", name, exc.message)
            continue
        alive = {i.request_id: i for i in listed if i.state is not InstanceState.TERMINATED}
        with ctx.db.read() as session:
            rows = [r for r in live_rows(session) if r.provider == name]
        known = {r.request_id for r in rows}
        for request_id, instance in alive.items():
            if request_id not in known:
                _terminate_unknown(ctx, provider, name, request_id, instance.name)
        for row in rows:
            _settle_row(ctx, provider, row, request_id_alive=row.request_id in alive)


def _terminate_unknown(
    ctx: ServerContext, provider: Provider, name: str, request_id: str, machine: str
) -> None:
    try:
        provider.terminate(request_id)
    except ProviderError as exc:
        log.warning("provider %s: terminating unknown %s failed: %s", name, machine, exc.message)
        return
    with ctx.db.write() as session:
        detail = {"provider": name, "request": request_id}
        audit.record(
            session, ctx.clock(), AUTOSCALER, "cloud.unknown", f"machine {machine}", detail
        )
    log.warning("provider %s: terminated %s, which no pool knows", name, machine)


def _settle_row(
    ctx: ServerContext, provider: Provider, row: CloudInstanceRow, request_id_alive: bool
) -> None:
    now = ctx.clock()
    if row.phase == Phase.LAUNCHING.value and row.offer_key is None:
        try:
            provider.terminate(row.request_id)
        except ProviderError as exc:
            log.warning("terminating unconfirmed launch %s failed: %s", row.request_id, exc)
            return
        _end_with_node(ctx, row, "its launch was never confirmed (the server stopped): terminated")
        return
    if request_id_alive:
        return
    if row.phase == Phase.TERMINATING.value:
        _end_with_node(ctx, row, "terminated")
    elif now - row.launched_at >= LIST_GRACE_S:
        _end_with_node(ctx, row, "gone from the provider's list")


def _end_with_node(ctx: ServerContext, row: CloudInstanceRow, why: str) -> None:
    with ctx.db.write() as session:
        fresh = session.get(CloudInstanceRow, row.request_id)
        if fresh is None or fresh.ended_at is not None:
            return
        end(session, fresh, ctx.clock(), why)
        node_there = session.get(Node, row.node) is not None
    if node_there:
        remove_machine_node(ctx, row.node)


def remove_machine_node(ctx: ServerContext, node: str) -> None:
    """Remove a pool machine's node (its certificate revoked; tasks, if any, end as lost)."""
    try:
        remove_node(ctx, AUTOSCALER, node, force=True)
    except ApiError as exc:
        if exc.status != 404:
            raise


def handle_events(ctx: ServerContext, provider_name: str, events: list[ProviderEvent]) -> None:
    for event in events:
        with ctx.db.read() as session:
            row = session.get(CloudInstanceRow, event.request_id)
        if row is None or row.ended_at is not None:
            continue
        if event.offer_key is not None and event.kind is ErrorKind.QUOTA:
            with ctx.db.write() as session:
                key = f"{provider_name}:{event.offer_key}"
                until = ctx.clock() + ctx.settings.offer_block_s
                block_offer(session, key, until, f"quota: {event.message}")
        elif event.offer_key is not None and event.kind is ErrorKind.CAPACITY:
            with ctx.db.write() as session:
                key = f"{provider_name}:{event.offer_key}"
                block_offer(session, key, ctx.clock() + CAPACITY_BLOCK_S, event.message)
        with ctx.db.write() as session:
            fresh = session.get(CloudInstanceRow, event.request_id)
            if fresh is not None:
                fresh.last_error = f"{event.kind.value}: {event.message}"
                note(session, fresh, ctx.clock(), event.kind.value, event.message)
        _end_with_node(ctx, row, f"{event.kind.value}: {event.message}")


def joined_nodes(ctx: ServerContext) -> None:
    """Launching machines whose node has registered are joined."""
    with ctx.db.write() as session:
        launching = [r for r in live_rows(session) if r.phase == Phase.LAUNCHING.value]
        if not launching:
            return
        names = set(
            session.scalars(select(Node.name).where(Node.name.in_([r.node for r in launching])))
        )
        for row in launching:
            if row.node in names:
                row.phase, row.joined_at = Phase.JOINED.value, ctx.clock()
                waited = row.joined_at - row.launched_at
                note(session, row, row.joined_at, "joined", f"joined {waited:.0f} s after launch")
