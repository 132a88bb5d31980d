"""One autoscaler pass, and the thread that runs one every ``autoscale_interval_s``.

A pass: poll each provider's errors; settle the store against the providers' lists (at start and
every ``RECONCILE_S``); mark machines whose node registered as joined; ask
``core.autoscale.plan_scaling`` what to do with the jobs that wait for room; then drain,
terminate and launch. Provider calls block (an ARM operation may take minutes), so passes run in
a thread of their own, never on the event loop or in the scheduler.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.cloud.pools import CloudConfig
from shoal.cloud.provider import Provider, ProviderError
from shoal.cloud.registry import make_provider
from shoal.core.autoscale import (
    PoolTemplate,
    PoolWait,
    Removal,
    RemovalCause,
    ScalePlan,
    Step,
    plan_scaling,
)
from shoal.core.nodestates import Hold, NodeEvent
from shoal.core.plan import ReasonCode
from shoal.core.snapshot import ClusterSnapshot
from shoal.core.states import State
from shoal.server.autoscaling.launching import LaunchTarget, launch_one
from shoal.server.autoscaling.offers import OfferBook, gone_pool, offer_id, template_of
from shoal.server.autoscaling.reconcile import (
    handle_events,
    joined_nodes,
    reconcile,
    remove_machine_node,
)
from shoal.server.autoscaling.rows import (
    as_instance,
    block_offer,
    blocked_offers,
    live_rows,
    note,
    pool_targets,
)
from shoal.server.context import ServerContext
from shoal.server.services.node_life import change_node
from shoal.server.services.nodes import load_nodes
from shoal.server.services.snapshot import holding_allocations, request_for
from shoal.store.models import CloudInstanceRow, Job, Node

log = logging.getLogger("shoal.autoscaler")
RECONCILE_S = 30.0


@dataclass
class Autoscaler:
    """The pools of one cloud file, their providers, and what the last pass decided."""

    ctx: ServerContext
    config: CloudConfig
    providers: dict[str, Provider]
    book: OfferBook = field(default_factory=OfferBook)
    waits: dict[str, list[PoolWait]] = field(default_factory=dict)
    unservable: dict[str, str] = field(default_factory=dict)
    templates: dict[str, PoolTemplate] = field(default_factory=dict)
    offer_errors: dict[str, str] = field(default_factory=dict)
    reconciled_at: float = float("-inf")
    _stop: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def start_for(cls, ctx: ServerContext, config: CloudConfig) -> Autoscaler:
        providers = {name: make_provider(name, s) for name, s in config.providers.items()}
        scaler = cls(ctx, config, providers)
        ctx.autoscaler = scaler
        scaler._thread = threading.Thread(target=scaler.run, name="shoal-autoscaler", daemon=True)
        scaler._thread.start()
        return scaler

    def wake(self) -> None:
        """Run the next pass now (a pool's target changed)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=30)
        for provider in self.providers.values():
            provider.close()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_pass()
            except Exception:  # the next pass starts from the store and the providers again
                log.exception("autoscaler pass failed")
            self._wake.wait(self.ctx.settings.autoscale_interval_s)
            self._wake.clear()

    def run_pass(self) -> ScalePlan:
        for name, provider in self.providers.items():
            try:
                handle_events(self.ctx, name, provider.poll_errors())
            except ProviderError as exc:
                log.warning("provider %s: polling errors failed: %s", name, exc.message)
        if time.monotonic() - self.reconciled_at >= RECONCILE_S:
            reconcile(self.ctx, self.config.cluster, self.providers)
            self.reconciled_at = time.monotonic()
        joined_nodes(self.ctx)
        plan = self._decide()
        self._apply(plan)
        return plan

    def _decide(self) -> ScalePlan:
        now = self.ctx.clock()
        with self.ctx.db.read() as session:
            targets = pool_targets(session)
            instances = [as_instance(r) for r in live_rows(session)]
            waiting = _waiting_for_room(session)
            jobs = session.scalars(select(Job).where(Job.id.in_(list(waiting)))).all()
            queue = sorted(map(request_for, jobs), key=lambda j: (-j.priority, j.submitted_at))
            snapshot = ClusterSnapshot(
                tuple(load_nodes(session)), tuple(queue), holding_allocations(session)
            )
            blocked = blocked_offers(session, now)
        templates = {}
        for pool in self.config.pools:
            offers = self.book.for_pool(pool, self.providers[pool.provider], now)
            if offers.error:
                self.offer_errors[pool.name] = offers.error
            # a pool whose every offer is blocked cannot grow now: the next pool may
            usable = [o for o in offers.offers if offer_id(pool.provider, o) not in blocked]
            templates[pool.name] = template_of(pool, usable, targets.get(pool.name))
        for instance in instances:  # machines of pools taken out of the cloud file
            templates.setdefault(instance.pool, gone_pool(instance.pool))
        self.templates = templates
        plan = plan_scaling(snapshot, waiting, list(templates.values()), instances, now)
        waits: dict[str, list[PoolWait]] = {}
        for wait in plan.waits:
            waits.setdefault(wait.job_id, []).append(wait)
        self.waits, self.unservable = waits, dict(plan.unservable)
        return plan

    def _apply(self, plan: ScalePlan) -> None:
        if plan.idle_since:
            with self.ctx.db.write() as session:
                for request_id, mark in plan.idle_since.items():
                    row = session.get(CloudInstanceRow, request_id)
                    if row is not None and row.ended_at is None:
                        row.idle_since = mark
        for removal in plan.removals:
            self._remove(removal)
        for launch in plan.launches:
            self._launch(launch.pool, launch.count, launch.for_jobs)

    def _remove(self, removal: Removal) -> None:
        now = self.ctx.clock()
        if removal.step is Step.DRAIN:
            with self.ctx.db.write() as session:
                row = session.get(CloudInstanceRow, removal.request_id)
                node = session.get(Node, removal.node)
                if row is None or node is None:
                    return
                if node.hold != Hold.DRAINING.value:
                    change_node(session, node, NodeEvent.DRAIN, now, by="autoscaler")
                row.phase, row.removal_cause = "draining", removal.cause.value
                note(session, row, now, "draining", _why_removed(removal, row))
            self.ctx.wake_scheduler()
            return
        provider = self.providers.get(self._provider_of(removal.request_id))
        if provider is None:  # its provider left the cloud file: nothing can remove it now
            log.warning("cannot terminate %s: its provider is not in the cloud file", removal.node)
            return
        try:
            provider.terminate(removal.request_id)
        except ProviderError as exc:
            log.warning("terminating %s failed: %s", removal.node, exc.message)
            return
        with self.ctx.db.write() as session:
            row = session.get(CloudInstanceRow, removal.request_id)
            if row is None:
                return
            row.phase = "terminating"
            row.removal_cause = row.removal_cause or removal.cause.value
            note(session, row, now, "terminating", _why_removed(removal, row))
            if removal.cause is RemovalCause.JOIN_TIMEOUT and row.offer_key:
                key = f"{row.provider}:{row.offer_key}"
                until = now + self.ctx.settings.offer_block_s
                block_offer(session, key, until, f"a machine of it never joined ({row.node})")
        remove_machine_node(self.ctx, removal.node)

    def _provider_of(self, request_id: str) -> str:
        with self.ctx.db.read() as session:
            row = session.get(CloudInstanceRow, request_id)
            assert row is not None
            return row.provider

    def _launch(self, pool_name: str, count: int, for_jobs: tuple[str, ...]) -> None:
        pool = self.config.pool(pool_name)
        assert pool is not None
        provider = self.providers[pool.provider]
        offers = self.book.for_pool(pool, provider, self.ctx.clock()).offers
        with self.ctx.db.read() as session:
            blocked = blocked_offers(session, self.ctx.clock())
        target = LaunchTarget(self.config.cluster, pool, pool.provider, provider, offers, blocked)
        jobs = ", ".join(for_jobs[:5]) + (", ..." if len(for_jobs) > 5 else "")
        log.info(
            "pool %s: launching %d machine(s)%s", pool_name, count, f" for {jobs}" if jobs else ""
        )
        for _ in range(count):
            if launch_one(self.ctx, target) is None:
                break  # no offer would start one: the next pass tries again


def _why_removed(removal: Removal, row: CloudInstanceRow) -> str:
    if removal.cause is RemovalCause.JOIN_TIMEOUT:
        return "never joined within the pool's join timeout"
    if removal.cause is RemovalCause.NODE_GONE:
        return "its node was removed from the cluster"
    if removal.cause is RemovalCause.SCALE_DOWN:
        return "above the pool's target size"
    if removal.step is Step.TERMINATE:
        return "drained: no task left"
    return "idle past the pool's idle timeout"


def _waiting_for_room(session: Session) -> dict[str, ReasonCode]:
    query = select(Job.id, Job.pending_code).where(
        Job.state == State.WAITING.value,
        Job.pending_code.is_not(None),
        Job.completing.is_(None),
        Job.array_held.is_(False),
        Job.missing_image.is_(None),
    )
    found = {}
    for job_id, code in session.execute(query):
        try:
            found[job_id] = ReasonCode(code or "")
        except ValueError:
            continue
    return found
