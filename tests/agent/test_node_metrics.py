"""What an agent reports its nodes use (shoal.agent.metrics): its tasks' CPU as a rate over the
time between reports, their memory, the host's CPU and memory, and GPUs through NVML given as a
module (a fake one here: this machine has no GPU), absent without it."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace
from typing import Any

import pytest

from shoal.agent.metrics import GpuSampler, HostProbe, NodeSampler

CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait guest guest_nice")
MIB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeHost(HostProbe):
    """psutil's answers, given: ``busy`` and ``idle`` CPU seconds so far."""

    def __init__(self) -> None:
        self.busy, self.idle = 0.0, 0.0
        super().__init__(
            self._times, lambda: SimpleNamespace(total=8192 * MIB, available=6144 * MIB)
        )

    def _times(self) -> CpuTimes:
        return CpuTimes(self.busy, 0.0, 0.0, self.idle, 0.0, 0.0, 0.0)


class FakeNvml:
    """The calls of pynvml the sampler makes; GPU 3 is gone (NVML raises)."""

    def __init__(self, utilization: dict[int, int]) -> None:
        self.utilization = utilization

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index not in self.utilization:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=self.utilization[handle], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=(handle + 1) * 1024 * MIB, total=16 * 1024 * MIB, free=0)


def test_tasks_cpu_is_the_rate_between_reports_and_memory_what_they_hold_now() -> None:
    usage: list[tuple[str, str, dict[str, float]]] = []
    clock, host = Clock(), FakeHost()
    sampler = NodeSampler(lambda: list(usage), host=host, clock=clock)
    first = sampler.take([("n0", ()), ("n1", ())])
    assert first["n0"].tasks_cpu_millis is None  # nothing to compare with yet
    assert first["n0"].tasks_memory_mib is None  # not sampled yet
    usage[:] = [("n0", "1.1", {"cpuSeconds": 10.0, "rssMiB": 300.0})]
    sampler.sample()
    clock.now += 1
    usage[:] = [
        ("n0", "1.1", {"cpuSeconds": 11.5, "rssMiB": 320.0}),
        ("n0", "2.1", {"cpuSeconds": 0.5, "rssMiB": 80.0}),  # new: counted from its next sample
    ]
    sampler.sample()
    clock.now += 1
    host.busy, host.idle = 3.0, 1.0
    taken = sampler.take([("n0", ()), ("n1", ())])
    assert taken["n0"].tasks_cpu_millis == 750.0  # 1.5 CPU seconds over the 2 s since the take
    assert taken["n0"].tasks_memory_mib == 400.0
    assert taken["n1"].tasks_cpu_millis == 0.0 and taken["n1"].tasks_memory_mib == 0.0
    assert taken["n0"].host_cpu_pct == 75.0
    assert (taken["n0"].host_memory_used_mib, taken["n0"].host_memory_total_mib) == (2048, 8192)
    assert taken["n0"].gpus == []  # no NVML: no GPU figures at all


def test_reports_close_together_repeat_the_last_figures() -> None:
    usage = [("n0", "1.1", {"cpuSeconds": 1.0, "rssMiB": 10.0})]
    clock = Clock()
    sampler = NodeSampler(lambda: list(usage), host=FakeHost(), clock=clock)
    sampler.sample()
    sampler.take([("n0", ())])
    usage = [("n0", "1.1", {"cpuSeconds": 3.0, "rssMiB": 10.0})]
    sampler.sample()
    clock.now += 0.03  # a burst of starts and exits: reports 30 ms apart
    assert sampler.take([("n0", ())])["n0"].tasks_cpu_millis is None  # the first take's again
    clock.now += 1.97
    assert sampler.take([("n0", ())])["n0"].tasks_cpu_millis == 1000.0  # 2 s over 2 s


def test_gpus_through_nvml_per_node_and_a_lost_gpu_left_out() -> None:
    nvml = FakeNvml({0: 35, 1: 90, 2: 0})
    sampler = NodeSampler(list, nvml=nvml, host=FakeHost(), clock=Clock())
    taken = sampler.take([("a", (0, 1)), ("b", (2, 3))])
    assert [(g.index, g.utilization_pct, g.memory_used_mib) for g in taken["a"].gpus] == [
        (0, 35.0, 1024.0),
        (1, 90.0, 2048.0),
    ]
    assert [g.index for g in taken["b"].gpus] == [2]  # GPU 3 fell off: absent, not zero
    assert taken["b"].gpus[0].memory_total_mib == 16384.0


def test_a_gpu_nvml_loses_is_read_again_once_back(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml({})
    gpus = GpuSampler(nvml)
    assert gpus.sample([0]) == {} and gpus.sample([0]) == {}
    assert sum("cannot read GPU 0" in r.message for r in caplog.records) == 1  # said once
    nvml.utilization[0] = 12
    assert gpus.sample([0])[0].utilization_pct == 12.0
