"""What a simulation produces: one record per job and a timeline of the cluster's state."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal.sim.engine import SimConfig
    from shoal.sim.pools import PoolUsage


@dataclass(slots=True)
class JobRecord:
    job_id: str
    virtual_cluster: str
    gpus: int
    submit_s: float
    duration_s: float
    first_start_s: float | None = None
    end_s: float | None = None
    preemptions: int = 0
    lost_s: float = 0.0  # work done and lost to preemption (since the last checkpoint)
    never_reason: str | None = None  # why a job never completed

    @property
    def completed(self) -> bool:
        return self.end_s is not None

    @property
    def jct_s(self) -> float:
        assert self.end_s is not None
        return self.end_s - self.submit_s

    @property
    def queue_delay_s(self) -> float:
        """Submission to first start (time spent requeued after preemption counts in the JCT)."""
        assert self.first_start_s is not None
        return self.first_start_s - self.submit_s


@dataclass(slots=True)
class Timeline:
    """The cluster's state as a step function: each sample holds until the next one."""

    times: array[float] = field(default_factory=lambda: array("d"))
    busy_gpus: array[int] = field(default_factory=lambda: array("q"))
    queued: array[int] = field(default_factory=lambda: array("q"))
    running: array[int] = field(default_factory=lambda: array("q"))
    fragmented_gpus: array[int] = field(default_factory=lambda: array("q"))

    def add(self, now: float, busy: int, queued: int, running: int, fragmented: int) -> None:
        if self.times and self.times[-1] == now:  # the later state of one instant wins
            self.busy_gpus[-1] = busy
            self.queued[-1] = queued
            self.running[-1] = running
            self.fragmented_gpus[-1] = fragmented
            return
        self.times.append(now)
        self.busy_gpus.append(busy)
        self.queued.append(queued)
        self.running.append(running)
        self.fragmented_gpus.append(fragmented)

    def __len__(self) -> int:
        return len(self.times)


@dataclass(slots=True)
class SimResult:
    policy: str
    cluster: str
    total_gpus: int
    trace: str
    notes: tuple[str, ...]
    records: list[JobRecord]
    timeline: Timeline
    cycles: int
    scheduling_s: float
    wall_s: float
    config: SimConfig
    pools: tuple[PoolUsage, ...] = ()  # what each pool's machines cost (scaling or always on)
    variant: str = ""  # "fixed", "idle-15m": which form of a cluster with pools this run used

    @property
    def run(self) -> str:
        """The run's name in reports: the policy, and the cluster's form if it has pools."""
        return f"{self.policy} {self.variant}".strip()
