"""The scheduler loop: wake on events (submit, exit, stop, node change) or every few seconds,
bring the in-memory model up to date from the store's change feed, call the pure
``core.schedule`` with a bounded budget, apply the plan.

Each cycle's work is bounded (core/budget.py): it examines every VC's head jobs and a slice of the
deep queue, resuming where the previous cycle stopped, and stops examining after
``cycle_deadline_ms``. So no cycle holds the interpreter for long, however large the cluster, and
the API threads and agent reports sharing it wait at most one short cycle.

Wake-ups are coalesced: after a cycle that had a queue to look at and took ``t``, the next one
starts no sooner than ``max(t, BUSY_GAP_S)`` later (capped at ``MAX_GAP_S``). On an idle server a
submission is scheduled at once; in a burst of submissions and exits, one cycle (and one launch
order to the agent) serves several of them.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shoal.core.budget import Budget
from shoal.core.cache import SchedulerCache
from shoal.core.queueindex import QueueKey
from shoal.core.scheduler import schedule
from shoal.server.context import ServerContext
from shoal.server.model import SchedulerModel
from shoal.server.positions import Positions, QueuePositions
from shoal.server.services.applier import apply_plan
from shoal.server.services.scheduler_lease import LeaseKeeper, StaleLeader
from shoal.server.services.silent_nodes import lose_silent_nodes
from shoal.server.shared_positions import PositionPublisher

log = logging.getLogger("shoal.scheduler")
BUSY_GAP_S = 0.02  # after a cycle with a queue, wait this long for more work to join the next
MAX_GAP_S = 0.05  # the longest a wake-up waits for the previous cycle's share of the GIL
FORGET_CHANGES_S = 5.0  # how often the change rows already read are deleted


@dataclass(eq=False)
class SchedulerState:
    """What the scheduler keeps between cycles (one owner: the scheduler loop)."""

    model: SchedulerModel = field(default_factory=SchedulerModel)
    cache: SchedulerCache = field(default_factory=SchedulerCache)
    resume_from: QueueKey | None = None
    stopped_early: bool = False  # the last cycle ran out of budget: run the next one at once
    verified_at: float = 0.0
    forgot_at: float = 0.0
    forgot_seq: int = 0  # change rows up to this one are deleted already
    # After each check of the model: collect, then freeze what lives (``gc.freeze``), so the
    # collector's full passes skip the model instead of walking it several times a second while
    # holding the interpreter (in the scheduler process, whose queue-position answers wait).
    freeze_heap: bool = False
    # Called with the positions each cycle publishes, before its plan is written (the scheduler
    # process sends them to the API: a pending reason should not show before its position).
    on_positions: Callable[[Positions], None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def budget_for(ctx: ServerContext, started: float) -> Budget:
    limit = started + ctx.settings.cycle_deadline_ms / 1000
    return Budget(
        backfill_jobs=ctx.settings.cycle_backfill_jobs,
        deadline=lambda: time.monotonic() >= limit,
    )


def run_cycle(ctx: ServerContext, check_nodes: bool = True) -> int | None:
    """One scheduling cycle; returns the number of jobs admitted (None: the queue was empty)."""
    if check_nodes:
        lose_silent_nodes(ctx)
    if ctx.scheduler_state is None:
        ctx.scheduler_state = SchedulerState()
    state: SchedulerState = ctx.scheduler_state
    with state.lock:  # tests may run cycles from their own threads
        started = time.monotonic()
        with ctx.db.read() as session:
            state.model.refresh(ctx, session)
        maintain_model(ctx, state, started)
        snapshot, versions = state.model.snapshot()
        if not snapshot.queue:
            publish(ctx, state, QueuePositions())
            state.resume_from, state.stopped_early = None, False
            return None
        plan = schedule(
            snapshot,
            ctx.clock(),
            cache=state.cache,
            budget=budget_for(ctx, started),
            resume_from=state.resume_from,
        )
        state.resume_from = plan.resume_from
        state.stopped_early = plan.stopped_by is not None
        gone = {a.job_id for a in plan.admissions} | {i.job_id for i in plan.infeasible}
        publish(ctx, state, QueuePositions.publish(state.cache.queues, state.model.queue, gone))
        return apply_plan(ctx, plan, dict(versions))


def publish(ctx: ServerContext, state: SchedulerState, positions: QueuePositions) -> None:
    ctx.positions = positions
    if state.on_positions is not None:
        state.on_positions(positions)
    if ctx.position_publisher is not None and ctx.scheduler_lease is not None:
        ctx.position_publisher.offer(positions, ctx.scheduler_lease.token, ctx.clock())


def maintain_model(ctx: ServerContext, state: SchedulerState, now: float) -> None:
    """Now and then: check the model against the store, and delete change rows already read."""
    if now - state.verified_at >= ctx.settings.model_verify_s:
        state.verified_at = now
        with ctx.db.snapshot() as session:  # the feed and the full load, one view
            state.model.verify(ctx, session)
        if state.freeze_heap:
            gc.unfreeze()  # what was frozen last time and died since is collected now
            gc.collect()
            gc.freeze()
    if now - state.forgot_at >= FORGET_CHANGES_S and state.model.seq > state.forgot_seq:
        state.forgot_at, state.forgot_seq = now, state.model.seq  # no write when nothing new
        with ctx.db.write() as session:
            if ctx.scheduler_lease is not None:  # a stale scheduler must not eat the feed
                ctx.scheduler_lease.check(session)
            state.model.forget_processed(session)


class SchedulerLoop:
    """Cycle after cycle until stopped: in a thread of its own (``start``), or in the calling
    thread (``run``, the scheduler process's main thread)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.lease = ctx.scheduler_lease = LeaseKeeper(ctx)
        if not ctx.db.is_sqlite:  # the other servers on the store show its queue positions
            ctx.position_publisher = PositionPublisher(ctx.db)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name="shoal-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Ask ``run`` to return after the cycle under way (callable from any thread)."""
        self._stop.set()
        self.ctx.wake_scheduler()

    def stop(self) -> None:
        self.request_stop()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def run(self) -> None:
        # Silent nodes are looked for a few times per node timeout, not on every cycle.
        check_every = min(1.0, self.ctx.settings.node_timeout_s / 4)
        last_check = 0.0
        while not self._stop.is_set():
            if not self._leading():
                self._stop.wait(self.ctx.settings.scheduler_lease_s / 3)
                continue
            seen = self.ctx.scheduler_wake.generation
            started = time.monotonic()
            check = started - last_check >= check_every
            busy = True
            more = False
            try:
                admitted = run_cycle(self.ctx, check_nodes=check)
                busy = admitted is not None
                more = self.ctx.scheduler_state.stopped_early
            except StaleLeader as exc:  # paused past the lease: another server schedules now
                log.warning("%s", exc)
                if self.ctx.scheduler_state is not None:
                    self.ctx.scheduler_state.model.loaded = False
            except Exception:  # keep scheduling; the next cycle starts from the store again
                log.exception("scheduling cycle failed")
                if self.ctx.scheduler_state is not None:
                    self.ctx.scheduler_state.model.loaded = False  # reload it whole
            ended = time.monotonic()
            last_check = started if check else last_check
            if not more:  # a cycle that ran out of budget is followed by the next at once
                # Anything that happened during the cycle moved the generation past ``seen``:
                # the wait returns at once and the next cycle sees it.
                self.ctx.scheduler_wake.wait(
                    seen, min(check_every, self.ctx.settings.scheduler_interval_s)
                )
            took = max(ended - started, BUSY_GAP_S) if busy else ended - started
            gap = min(took, MAX_GAP_S) - (time.monotonic() - ended)
            if gap > 0:
                self._stop.wait(gap)
        with contextlib.suppress(Exception):  # the store may be gone at shutdown
            self.lease.release()

    def _leading(self) -> bool:
        """True if this server's scheduler holds the lease (taken or renewed now if need be)."""
        try:
            held = self.lease.hold()
        except Exception:  # the store is unreachable: no cycle could run anyway
            log.exception("could not take or renew the scheduler lease")
            return False
        if held is not None and held.fresh and self.ctx.scheduler_state is not None:
            self.ctx.scheduler_state.model.loaded = False  # another may have scheduled meanwhile
        return held is not None
