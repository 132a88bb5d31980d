"""How much one scheduling cycle may do, and where the next one picks up.

A cycle examines every VC's first ``head_depth`` jobs (Kueue looks at the heads of its queues),
then up to ``backfill_jobs`` more in queue order starting where the previous cycle stopped
(Slurm's backfill resumes its scan; here the resume point is data the caller passes back in).
It stops early when it has made ``placements`` placement attempts or when ``deadline`` says the
time is up, but it always examines the heads and at least ``min_backfill`` backfill jobs first,
so the sweep through the queue advances every cycle.

Bound: with ``Q`` jobs waiting, every waiting job is examined at least once in any
``ceil(Q / min_backfill) + 1`` consecutive cycles, and in ``ceil(Q / backfill_jobs) + 1`` when no
cycle stops early (tests/core/test_bounded_cycle.py checks both).

``deadline`` is the one way a clock can reach the core: the caller passes a callable ("is my time
up?"); with None (the default, and what the simulator and the tests use) a cycle is a pure
function of its arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shoal.core.queueindex import QueueKey

UNLIMITED = 1 << 62


@dataclass(frozen=True, slots=True)
class Budget:
    head_depth: int = 4  # jobs per VC examined first, every cycle
    backfill_jobs: int = 2_000  # further jobs per cycle, resuming where the last cycle stopped
    placements: int = 1_000  # placement attempts per cycle (shapes not already known not to fit)
    what_ifs: int = 32  # preemption "what if these stopped?" simulations per cycle
    min_backfill: int = 64  # backfill jobs examined even when the deadline has passed
    deadline: Callable[[], bool] | None = None  # "is the time up?"; None: no time limit
    # Examine jobs queued behind a waiting strict-FIFO head (only to refresh their reasons: they
    # cannot start before it). The simulator, which shows no reasons, turns this off.
    strict_followers: bool = True

    def __post_init__(self) -> None:
        for name in ("head_depth", "backfill_jobs", "placements", "min_backfill"):
            if getattr(self, name) < 1:
                raise ValueError(f"budget {name} must be at least 1")
        if self.what_ifs < 0:
            raise ValueError("budget what_ifs must not be negative")


UNBOUNDED = Budget(UNLIMITED, UNLIMITED, UNLIMITED, UNLIMITED, UNLIMITED)


@dataclass(frozen=True, slots=True)
class Resume:
    """Where the next cycle's backfill starts: the first job whose queue key is at least
    ``from_key`` (None: from the start of the queue)."""

    from_key: QueueKey | None = None
