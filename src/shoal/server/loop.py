"""The scheduler loop: wake on events (submit, exit, stop, node change) or every few seconds,
load a snapshot, call the pure ``core.schedule``, apply the plan."""

from __future__ import annotations

import logging
import threading

from shoal.core.scheduler import schedule
from shoal.server.context import ServerContext
from shoal.server.services.agents import lose_silent_nodes
from shoal.server.services.applier import apply_plan
from shoal.server.services.snapshot import load_snapshot

log = logging.getLogger("shoal.scheduler")


def run_cycle(ctx: ServerContext) -> int:
    """One scheduling cycle; returns the number of jobs admitted."""
    lose_silent_nodes(ctx)
    with ctx.db.read() as session:
        snapshot, versions = load_snapshot(ctx, session)
    if not snapshot.queue:
        return 0
    plan = schedule(snapshot, ctx.clock())
    return apply_plan(ctx, plan, versions)


class SchedulerLoop:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shoal-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.ctx.wake_scheduler()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        seen = -1
        while not self._stop.is_set():
            seen = self.ctx.scheduler_wake.generation
            try:
                admitted = run_cycle(self.ctx)
            except Exception:  # keep scheduling; the next cycle starts from the store again
                log.exception("scheduling cycle failed")
                admitted = 0
            if admitted:
                continue  # resources changed: look again at once
            self.ctx.scheduler_wake.wait(seen, self.ctx.settings.scheduler_interval_s)
