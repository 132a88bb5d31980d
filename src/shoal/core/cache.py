"""``SchedulerCache``: what one scheduler remembers between cycles, owned by its caller.

Kueue keeps a scheduler cache the scheduler reads each cycle; here the cache is an explicit
argument of ``schedule``, so the function stays a pure function of its arguments: the cache only
saves work, it never changes a decision (the tests run every cycle with a fresh cache and with a
kept one and compare). Two schedulers in one process each own a cache and see nothing of the
other's. The server's scheduler, the simulator and the benchmarks keep one for their lifetime;
dry runs and tests pass none and get a fresh one per call.

What it holds:
- ``layouts``: free-resource states of the node pools of the last cycles (core/poolstate.py);
- ``usage``: the per-VC usage sums of the last allocations (core/usage.py);
- ``queues``: the queue per VC in queue order (core/queueindex.py);
- ``what_ifs``: results of "where would this job go if those jobs stopped?", valid while the
  nodes and allocations they were computed on are the very same objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.core.plan import PendingReason, TaskPlacement
from shoal.core.poolstate import Layouts
from shoal.core.queueindex import QueueIndex
from shoal.core.snapshot import ClusterSnapshot
from shoal.core.usage import UsageMemo

WhatIfKey = tuple[frozenset[str], int, tuple[object, ...]]
WHAT_IFS_KEPT = 4_096


@dataclass(eq=False)
class SchedulerCache:
    layouts: Layouts = field(default_factory=Layouts)
    usage: UsageMemo = field(default_factory=UsageMemo)
    queues: QueueIndex = field(default_factory=QueueIndex)
    _what_ifs: dict[WhatIfKey, list[TaskPlacement] | None] = field(default_factory=dict)
    _world: tuple[object, object] | None = None
    _verdicts: dict[tuple[object, ...], PendingReason | None] = field(default_factory=dict)
    _verdict_nodes: object = None

    def never_fits_verdicts(
        self, snapshot: ClusterSnapshot
    ) -> dict[tuple[object, ...], PendingReason | None]:
        """ "Could this shape ever fit?" answers, kept while the nodes are the same objects."""
        if snapshot.nodes is not self._verdict_nodes:
            self._verdicts = {}
            self._verdict_nodes = snapshot.nodes
        return self._verdicts

    def what_ifs_for(
        self, snapshot: ClusterSnapshot
    ) -> dict[WhatIfKey, list[TaskPlacement] | None]:
        """The what-if results computed on this snapshot's nodes and allocations (the same
        objects): kept across cycles until either changes."""
        world = (snapshot.nodes, snapshot.allocations)
        if self._world is None or any(a is not b for a, b in zip(world, self._world, strict=True)):
            self._what_ifs = {}
            self._world = world
        elif len(self._what_ifs) > WHAT_IFS_KEPT:
            self._what_ifs = {}
        return self._what_ifs
