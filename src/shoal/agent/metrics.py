"""What a node uses, sampled by its agent and sent with each report (``protocol.NodeMetrics``;
docs/metrics.md).

- Its tasks: CPU and memory of the shoal tasks placed on the node, added up from the usage the
  runner samples once a second per attempt (its cgroup, or its process tree without one). CPU is
  a rate: the CPU seconds the tasks gained between the runner's samples, over the time since the
  previous report, so a report carries the average since the one before, whatever their spacing.
- Its host: the machine's busy CPU share (``psutil.cpu_times`` deltas) and memory in use (total
  less available). Nodes simulated on one machine each report the machine's figures.
- Its GPUs: utilisation and memory per GPU index of the node, through NVML when it is present
  (the module is given: tests pass a fake one). Simulated GPUs have no NVML: none are reported.

Reports closer together than ``TAKE_GAP_S`` (a burst of starts and exits) repeat the last
figures: a rate over a few milliseconds says nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psutil

from shoal.protocol import GpuMetrics, NodeMetrics

log = logging.getLogger("shoal.agent")
TAKE_GAP_S = 1.0
MIB = float(1 << 20)

# (node, attempt id, usage) of each running attempt: ``Runner.live_usage``
LiveUsage = Callable[[], list[tuple[str, str, dict[str, float]]]]


class HostProbe:
    """The machine's CPU busy share since the previous call, and its memory in use."""

    def __init__(
        self,
        cpu_times: Callable[[], Any] = psutil.cpu_times,
        memory: Callable[[], Any] = psutil.virtual_memory,
    ) -> None:
        self._cpu_times = cpu_times
        self._memory = memory
        self._before = self._busy_and_total()

    def _busy_and_total(self) -> tuple[float, float]:
        times = self._cpu_times()
        fields = times._asdict()
        # guest time is counted in user (and guest_nice in nice) already
        total = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
        idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0)
        return total - idle, total

    def cpu_pct(self) -> float | None:
        busy, total = self._busy_and_total()
        busy_before, total_before = self._before
        self._before = (busy, total)
        if total <= total_before:
            return None
        return round(min(100.0, max(0.0, 100 * (busy - busy_before) / (total - total_before))), 1)

    def memory_mib(self) -> tuple[float, float]:
        """(in use, total)."""
        memory = self._memory()
        return round((memory.total - memory.available) / MIB, 1), round(memory.total / MIB, 1)


class GpuSampler:
    """Each GPU's utilisation and memory through ``nvml`` (pynvml, initialised)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._handles: dict[int, Any] = {}
        self._failed: set[int] = set()

    def sample(self, indices: Iterable[int]) -> dict[int, GpuMetrics]:
        """The GPUs among ``indices`` NVML could read (one it cannot is left out, not zero)."""
        found: dict[int, GpuMetrics] = {}
        for index in sorted(set(indices)):
            try:
                handle = self._handles.get(index)
                if handle is None:
                    handle = self._handles[index] = self.nvml.nvmlDeviceGetHandleByIndex(index)
                rates = self.nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as exc:  # NVMLError: gone, lost, not supported on this GPU
                if index not in self._failed:
                    log.warning("cannot read GPU %d through NVML: %s", index, exc)
                    self._failed.add(index)
                self._handles.pop(index, None)
                continue
            self._failed.discard(index)
            found[index] = GpuMetrics(
                index=index,
                utilization_pct=float(rates.gpu),
                memory_used_mib=round(memory.used / MIB, 1),
                memory_total_mib=round(memory.total / MIB, 1),
            )
        return found


class NodeSampler:
    """Per node figures for the reports: ``sample`` right after the runner's own usage sample
    (the agent's monitor, once a second), ``take`` for each report."""

    def __init__(
        self,
        live_usage: LiveUsage,
        nvml: Any | None = None,
        host: HostProbe | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._live_usage = live_usage
        self._gpus = GpuSampler(nvml) if nvml is not None else None
        self._host = host if host is not None else HostProbe()
        self._clock = clock
        self._lock = threading.Lock()
        self._cpu_seconds: dict[str, float] = {}  # attempt -> CPU seconds at the last sample
        self._gained: dict[str, float] = {}  # node -> CPU seconds gained since the last take
        self._memory: dict[str, float] | None = None  # node -> its tasks' memory (None: unsampled)
        self._taken_at: float | None = None
        self._last: dict[str, NodeMetrics] = {}

    def sample(self) -> None:
        """Add up what each node's tasks gained since the previous sample and hold now."""
        live = self._live_usage()
        with self._lock:
            seen: dict[str, float] = {}
            memory: dict[str, float] = {}
            for node, attempt, usage in live:
                memory[node] = memory.get(node, 0.0) + float(usage.get("rssMiB", 0.0))
                cpu = usage.get("cpuSeconds")
                if cpu is None:
                    continue
                before = self._cpu_seconds.get(attempt)
                if before is not None and cpu > before:
                    self._gained[node] = self._gained.get(node, 0.0) + cpu - before
                seen[attempt] = float(cpu)
            self._cpu_seconds = seen  # ended attempts are forgotten
            self._memory = memory

    def take(self, nodes: Sequence[tuple[str, Sequence[int]]]) -> dict[str, NodeMetrics]:
        """The figures of each of ``nodes`` (name, GPU indices) since the previous take."""
        now = self._clock()
        with self._lock:
            if self._taken_at is not None and now - self._taken_at < TAKE_GAP_S and self._last:
                return self._last
            elapsed = None if self._taken_at is None else now - self._taken_at
            gained, self._gained = self._gained, {}
            memory = self._memory
            self._taken_at = now
        host_cpu = self._host.cpu_pct()
        host_used, host_total = self._host.memory_mib()
        gpus: dict[int, GpuMetrics] = {}
        if self._gpus is not None:
            gpus = self._gpus.sample(i for _, indices in nodes for i in indices)
        taken: dict[str, NodeMetrics] = {}
        for name, indices in nodes:
            cpu = None
            if elapsed is not None and elapsed > 0 and memory is not None:
                cpu = round(1000 * gained.get(name, 0.0) / elapsed, 1)
            taken[name] = NodeMetrics(
                tasks_cpu_millis=cpu,
                tasks_memory_mib=None if memory is None else round(memory.get(name, 0.0), 1),
                host_cpu_pct=host_cpu,
                host_memory_used_mib=host_used,
                host_memory_total_mib=host_total,
                gpus=[gpus[i] for i in sorted(indices) if i in gpus],
            )
        with self._lock:
            self._last = taken
        return taken
