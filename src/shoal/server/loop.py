"""The scheduler loop: wake on events (submit, exit, stop, node change) or every few seconds,
load a snapshot, call the pure ``core.schedule``, apply the plan.

Wake-ups are coalesced: after a cycle that had a queue to look at and took ``t``, the next one
starts no sooner than ``max(t, BUSY_GAP_S)`` later (capped at ``MAX_GAP_S``). On an idle server a
submission is scheduled at once; in a burst of submissions and exits, one cycle (and one launch
order to the agent) serves several of them, and the API threads keep at least half of the
interpreter (the cycle and the request handlers share one GIL).
"""

from __future__ import annotations

import logging
import threading
import time

from shoal.core.scheduler import schedule
from shoal.server.context import ServerContext
from shoal.server.services.agents import lose_silent_nodes
from shoal.server.services.applier import apply_plan
from shoal.server.services.snapshot import load_snapshot

log = logging.getLogger("shoal.scheduler")
BUSY_GAP_S = 0.02  # after a cycle with a queue, wait this long for more work to join the next
MAX_GAP_S = 0.05  # the longest a wake-up waits for the previous cycle's share of the GIL


def run_cycle(ctx: ServerContext, check_nodes: bool = True) -> int | None:
    """One scheduling cycle; returns the number of jobs admitted (None: the queue was empty)."""
    if check_nodes:
        lose_silent_nodes(ctx)
    with ctx.db.read() as session:
        snapshot, versions = load_snapshot(ctx, session, queue_only=True)
    if not snapshot.queue:
        ctx.positions = {}
        return None
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
        # Silent nodes are looked for a few times per node timeout, not on every cycle.
        check_every = min(1.0, self.ctx.settings.node_timeout_s / 4)
        last_check = 0.0
        while not self._stop.is_set():
            seen = self.ctx.scheduler_wake.generation
            started = time.monotonic()
            check = started - last_check >= check_every
            busy = True
            try:
                busy = run_cycle(self.ctx, check_nodes=check) is not None
            except Exception:  # keep scheduling; the next cycle starts from the store again
                log.exception("scheduling cycle failed")
            ended = time.monotonic()
            last_check = started if check else last_check
            # Anything that happened during the cycle moved the generation past ``seen``: the
            # wait returns at once and the next cycle sees it.
            self.ctx.scheduler_wake.wait(
                seen, min(check_every, self.ctx.settings.scheduler_interval_s)
            )
            took = max(ended - started, BUSY_GAP_S) if busy else ended - started
            gap = min(took, MAX_GAP_S) - (time.monotonic() - ended)
            if gap > 0:
                self._stop.wait(gap)
