"""The server's bounded history of what nodes use (docs/metrics.md), kept in memory: a server
restart starts it afresh.

Each node has a ring of fixed-width buckets per tier (``TIERS``: 10 s buckets for the last hour,
5 min buckets for the last day). A report adds its figures to the current bucket of each tier
(sums and counts: a bucket holds the mean of the reports it got), so the memory a node takes is
fixed whatever the number or rate of reports: about 115 KB per node and 29 KB per GPU.

Once per 10 s bucket, at the first report that falls in a new one, the server reads what the
nodes hold (capacity, and what their tasks reserve): that reading starts the new bucket in
every node's ring and ends the open one if it is the one just before (a bucket's reservations
are the mean of its start and its end), and the bucket that ends is closed: the cluster's
rings get, per field, the sum over nodes of each node's mean in it. The cluster's history is
kept apart from the nodes' so that a removed node's ring can go (``retain``) without rewriting
the cluster's past.

Times are the server's clock when it got the report, so agents' clocks do not matter. Bucket
``b`` of a tier of width ``w`` covers ``[b*w, (b+1)*w)``; a series' times are its buckets'
starts.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from shoal.protocol import NodeMetrics

# (bucket width in seconds, buckets kept): the finest tier first
TIERS: tuple[tuple[float, int], ...] = ((10.0, 360), (300.0, 288))
MAX_GPUS_PER_NODE = 64
LATEST_BUCKETS = 3  # "now" is the newest figures no older than this many fine buckets

CLUSTER_FIELDS = (
    "cpuCapacity",
    "cpuAllocated",
    "cpuUsed",
    "memoryCapacityMiB",
    "memoryAllocatedMiB",
    "memoryUsedMiB",
    "gpuCapacity",
    "gpuAllocated",
    "gpuUsed",
    "gpuMemoryUsedMiB",
    "gpuMemoryTotalMiB",
)
NODE_FIELDS = (*CLUSTER_FIELDS, "hostCpuPercent", "hostMemoryUsedMiB", "hostMemoryTotalMiB")
GPU_FIELDS = ("utilizationPercent", "memoryUsedMiB", "memoryTotalMiB")
USED_FIELDS = ("cpuUsed", "memoryUsedMiB", "gpuUsed", "gpuMemoryUsedMiB", "gpuMemoryTotalMiB")

Column = list[float | None]


class Ring:
    """Sums and counts of named values in ``slots`` buckets of ``width`` seconds: the newest
    buckets seen, each slot reused for the bucket ``slots`` later."""

    def __init__(self, width: float, slots: int, fields: tuple[str, ...]) -> None:
        self.width, self.slots, self.fields = width, slots, fields
        self._bucket = array("q", [-1]) * slots
        self._sum = {f: array("d", [0.0]) * slots for f in fields}
        self._count = {f: array("I", [0]) * slots for f in fields}

    def bucket_of(self, t: float) -> int:
        return math.floor(t / self.width)

    def add(self, t: float, values: Mapping[str, float | None]) -> None:
        """Add ``values`` (None: not measured) to the bucket of ``t``; a bucket older than the
        one its slot holds now is gone: the values are dropped."""
        bucket = self.bucket_of(t)
        slot = bucket % self.slots
        held = self._bucket[slot]
        if held > bucket:
            return
        if held != bucket:
            self._bucket[slot] = bucket
            for name in self.fields:
                self._sum[name][slot] = 0.0
                self._count[name][slot] = 0
        for name, value in values.items():
            if value is not None:
                self._sum[name][slot] += value
                self._count[name][slot] += 1

    def totals(self, name: str, bucket: int) -> tuple[float, int]:
        slot = bucket % self.slots
        if self._bucket[slot] != bucket:
            return 0.0, 0
        return self._sum[name][slot], self._count[name][slot]

    def mean(self, name: str, bucket: int) -> float | None:
        total, count = self.totals(name, bucket)
        return total / count if count else None

    def column(self, name: str, window: Window) -> Column:
        """The means of ``name`` over each group of ``window``."""
        return window.column(lambda bucket: self.totals(name, bucket))


@dataclass(frozen=True, slots=True)
class Window:
    """Which buckets of a tier a series covers: groups of ``per`` buckets (aligned to multiples
    of ``per``) from the group of bucket ``first`` to that of ``last``."""

    tier: int
    width: float
    per: int
    first: int
    last: int

    @property
    def step(self) -> float:
        return self.width * self.per

    def times(self) -> list[float]:
        return [g * self.step for g in range(self.first // self.per, self.last // self.per + 1)]

    def column(self, totals: Callable[[int], tuple[float, int]]) -> Column:
        values: Column = []
        for group in range(self.first // self.per, self.last // self.per + 1):
            total, count = 0.0, 0
            for bucket in range(group * self.per, (group + 1) * self.per):
                s, c = totals(bucket)
                total, count = total + s, count + c
            values.append(round(total / count, 3) if count else None)
        return values


def plan_window(since: float, now: float, step: float | None) -> Window:
    """The finest tier that reaches back to ``since`` (else the coarsest, from as far back as it
    goes), in groups of at least ``step`` seconds (None: one bucket each)."""
    span = max(0.0, now - since)
    tier = next((i for i, (w, n) in enumerate(TIERS) if w * n >= span), len(TIERS) - 1)
    width, slots = TIERS[tier]
    per = max(1, math.ceil(step / width)) if step else 1
    last = math.floor(now / width)
    first = max(math.floor(since / width), last - slots + 1)
    return Window(tier, width, per, min(first, last), last)


def _tiers(fields: tuple[str, ...]) -> list[Ring]:
    return [Ring(width, slots, fields) for width, slots in TIERS]


@dataclass
class NodeHistory:
    rings: list[Ring] = field(default_factory=lambda: _tiers(NODE_FIELDS))
    gpus: dict[int, list[Ring]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What a node offers (``capacity`` None: it is NOT_READY, it offers nothing) and what its
    tasks reserve, as (cpu cores, memory MiB, GPUs)."""

    name: str
    capacity: tuple[float, float, float] | None
    allocated: tuple[float, float, float]


@dataclass
class Series:
    """Columns of equal length: ``t`` (bucket starts, epoch seconds) and one per field (None:
    no figure in that bucket); ``gpus``: per GPU index, its columns."""

    step: float
    t: list[float]
    columns: dict[str, Column]
    gpus: dict[int, dict[str, Column]] = field(default_factory=dict)


def _node_values(
    metrics: NodeMetrics, gpus: list[tuple[int, float, float, float]]
) -> dict[str, float | None]:
    cpu = metrics.tasks_cpu_millis
    values: dict[str, float | None] = {
        "cpuUsed": None if cpu is None else cpu / 1000,
        "memoryUsedMiB": metrics.tasks_memory_mib,
        "hostCpuPercent": metrics.host_cpu_pct,
        "hostMemoryUsedMiB": metrics.host_memory_used_mib,
        "hostMemoryTotalMiB": metrics.host_memory_total_mib,
    }
    if gpus:  # GPU figures only from NVML: none at all (not zero) without it
        values["gpuUsed"] = sum(g[1] for g in gpus) / 100
        values["gpuMemoryUsedMiB"] = sum(g[2] for g in gpus)
        values["gpuMemoryTotalMiB"] = sum(g[3] for g in gpus)
    return values


class MetricsHistory:
    """Every node's rings and the cluster's; safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeHistory] = {}
        self._cluster = _tiers(CLUSTER_FIELDS)
        self._open: int | None = None  # the fine bucket reports go to now (not closed yet)
        self._claimed: int | None = None  # the newest bucket a caller was asked to ``turn`` to

    def _fine_bucket(self, t: float) -> int:
        return math.floor(t / TIERS[0][0])

    def begin(self, t: float) -> bool:
        """Note a report at ``t``; True when it is the first in a fine bucket after the open
        one: the caller then reads what the nodes hold and calls ``turn`` with it."""
        bucket = self._fine_bucket(t)
        with self._lock:
            if self._claimed is not None and bucket <= self._claimed:
                return False
            self._claimed = bucket
            return True

    def turning(self, t: float) -> bool:
        """Whether a report at ``t`` would be asked to ``turn`` (``begin``), without claiming."""
        bucket = self._fine_bucket(t)
        with self._lock:
            return self._claimed is None or bucket > self._claimed

    def turn(self, t: float, loads: Iterable[NodeLoad]) -> None:
        """Close the open bucket and open that of ``t``: ``loads`` (what the nodes held at
        ``t``) starts the one and, if it follows the open one, ends that one too, so a bucket's
        reservations are the mean of what they were at its start and its end; the closed
        bucket's node figures are summed into the cluster's rings."""
        bucket = self._fine_bucket(t)
        loads = list(loads)
        with self._lock:
            if self._open is not None and bucket > self._open:
                if bucket == self._open + 1:  # after a silence, what holds now is not its end
                    self._allocate(self._open * TIERS[0][0], loads)
                self._close(self._open)
            if self._open is None or bucket > self._open:
                self._open = bucket
                self._allocate(t, loads)

    def _close(self, bucket: int) -> None:
        at = bucket * TIERS[0][0]
        sums: dict[str, float | None] = {}
        for name in CLUSTER_FIELDS:
            means = [
                m for n in self._nodes.values() if (m := n.rings[0].mean(name, bucket)) is not None
            ]
            sums[name] = sum(means) if means else None
        for ring in self._cluster:
            ring.add(at, sums)

    def record(self, node: str, t: float, metrics: NodeMetrics) -> None:
        """Add a node's reported figures at ``t``."""
        gpus = [
            (g.index, g.utilization_pct, g.memory_used_mib, g.memory_total_mib)
            for g in metrics.gpus[:MAX_GPUS_PER_NODE]
        ]
        values = _node_values(metrics, gpus)
        with self._lock:
            history = self._nodes.setdefault(node, NodeHistory())
            for ring in history.rings:
                ring.add(t, values)
            for index, utilization, used, total in gpus:
                rings = history.gpus.get(index)
                if rings is None:
                    if len(history.gpus) >= MAX_GPUS_PER_NODE:
                        continue
                    rings = history.gpus[index] = _tiers(GPU_FIELDS)
                figures = dict(zip(GPU_FIELDS, (utilization, used, total), strict=True))
                for ring in rings:
                    ring.add(t, figures)

    def _allocate(self, t: float, loads: list[NodeLoad]) -> None:
        """Add what each node offers and what its tasks reserve at ``t`` (lock held)."""
        for load in loads:
            names = ("cpuAllocated", "memoryAllocatedMiB", "gpuAllocated")
            values: dict[str, float | None] = dict(zip(names, load.allocated, strict=True))
            if load.capacity is not None:
                offered = ("cpuCapacity", "memoryCapacityMiB", "gpuCapacity")
                values.update(zip(offered, load.capacity, strict=True))
            history = self._nodes.setdefault(load.name, NodeHistory())
            for ring in history.rings:
                ring.add(t, values)

    def retain(self, nodes: Collection[str]) -> None:
        """Forget every node but ``nodes`` (those removed from the cluster)."""
        with self._lock:
            for name in [n for n in self._nodes if n not in nodes]:
                del self._nodes[name]

    def known(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def cluster(self, since: float, now: float, step: float | None = None) -> Series:
        """The cluster's series: closed buckets only (the one still filling is partial)."""
        window = plan_window(since, now, step)
        with self._lock:
            ring = self._cluster[window.tier]
            columns = {name: ring.column(name, window) for name in CLUSTER_FIELDS}
        return Series(window.step, window.times(), columns)

    def node(self, name: str, since: float, now: float, step: float | None = None) -> Series:
        """A node's series, with each GPU's (empty for a node never heard of)."""
        window = plan_window(since, now, step)
        with self._lock:
            history = self._nodes.get(name, NodeHistory())
            ring = history.rings[window.tier]
            columns = {f: ring.column(f, window) for f in NODE_FIELDS}
            gpus = {
                index: {f: rings[window.tier].column(f, window) for f in GPU_FIELDS}
                for index, rings in sorted(history.gpus.items())
            }
        return Series(window.step, window.times(), columns, gpus)

    def latest(self, now: float) -> tuple[float | None, dict[str, float | None]]:
        """(when, the cluster's use then): each node's newest figures from the filling bucket or
        the one before, summed; None when no node reported lately."""
        with self._lock:
            if self._open is None or self._open < self._fine_bucket(now) - LATEST_BUCKETS:
                return None, dict.fromkeys(USED_FIELDS)
            sums: dict[str, float | None] = {}
            for name in USED_FIELDS:
                found = [
                    m
                    for history in self._nodes.values()
                    if (m := _newest(history.rings[0], name, self._open)) is not None
                ]
                sums[name] = round(sum(found), 3) if found else None
            return self._open * TIERS[0][0], sums


def _newest(ring: Ring, name: str, bucket: int) -> float | None:
    value = ring.mean(name, bucket)
    return value if value is not None else ring.mean(name, bucket - 1)
