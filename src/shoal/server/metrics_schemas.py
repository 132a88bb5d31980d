"""REST bodies of the metrics and overview routes (``routers/metrics.py``; docs/metrics.md).

Series are columns, as uPlot takes them: ``t`` (bucket starts, epoch seconds) and one list per
figure, all of ``t``'s length; ``null`` where there is no figure for that bucket (no report, or
never measured: GPU figures without NVML). CPU is in cores, memory in MiB, GPUs in GPUs (used:
the sum of their utilisation, 1.0 = one GPU fully busy)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

Column = list[float | None]


class ClusterSeriesOut(BaseModel):
    cpuCapacity: Column = Field(description="Cores of the nodes that are not NOT_READY.")
    cpuAllocated: Column = Field(description="Cores reserved by unfinished tasks.")
    cpuUsed: Column = Field(description="Cores the tasks used (reported by the agents).")
    memoryCapacityMiB: Column
    memoryAllocatedMiB: Column
    memoryUsedMiB: Column = Field(description="Memory the tasks hold (reported).")
    gpuCapacity: Column
    gpuAllocated: Column
    gpuUsed: Column = Field(description="Sum of GPU utilisation / 100 (NVML only).")
    gpuMemoryUsedMiB: Column
    gpuMemoryTotalMiB: Column


class NodeSeriesOut(ClusterSeriesOut):
    hostCpuPercent: Column = Field(description="The host's busy CPU share, all cores, 0-100.")
    hostMemoryUsedMiB: Column = Field(description="The host's memory in use (total - available).")
    hostMemoryTotalMiB: Column


class GpuSeriesOut(BaseModel):
    utilizationPercent: Column
    memoryUsedMiB: Column
    memoryTotalMiB: Column


class GpuOut(BaseModel):
    index: int
    series: GpuSeriesOut


class ClusterMetricsOut(BaseModel):
    since: float = Field(description="The first bucket's start (may be later than asked).")
    until: float = Field(description="The server's clock when it answered.")
    step: float = Field(description="Seconds per point.")
    t: list[float]
    series: ClusterSeriesOut


class NodeMetricsOut(BaseModel):
    node: str
    since: float
    until: float
    step: float
    t: list[float]
    series: NodeSeriesOut
    gpus: list[GpuOut] = Field(description="Per GPU NVML reported (none: no NVML there).")


Amounts = dict[str, float | None]  # cpu (cores), memoryMiB, gpu


class UsedNowOut(BaseModel):
    at: float | None = Field(description="Start of the newest bucket; null: no recent report.")
    cpu: float | None
    memoryMiB: float | None
    gpu: float | None = Field(description="Sum of GPU utilisation / 100; null without NVML.")
    gpuMemoryMiB: float | None
    gpuMemoryTotalMiB: float | None


class NodeCountsOut(BaseModel):
    total: int
    byState: dict[str, int] = Field(
        description="READY, NOT_READY, CORDONED, DRAINING, DRAINED: every state named."
    )


class VcOverviewOut(BaseModel):
    name: str
    guarantee: Amounts = Field(description="null: that resource is not limited.")
    borrowLimit: Amounts | None = Field(description="null: may borrow any idle capacity.")
    used: dict[str, float] = Field(description="What its unfinished tasks reserve.")
    borrowed: dict[str, float] = Field(description="Used beyond the guarantee.")
    lent: dict[str, float] = Field(
        description="Its share of what all VCs borrow, in proportion to its idle guarantee."
    )
    waitingJobs: int
    runningJobs: int
    members: list[str] = Field(description="['*']: everyone.")


class OverviewOut(BaseModel):
    at: float = Field(description="The server's clock when it answered.")
    nodes: NodeCountsOut
    capacity: dict[str, float] = Field(description="Of the nodes that are not NOT_READY.")
    allocated: dict[str, float]
    used: UsedNowOut
    jobs: dict[str, int] = Field(description="Jobs by state (an array: parent and elements).")
    virtualClusters: list[VcOverviewOut]
    cloudPools: bool = Field(
        False, description="Whether the server has cloud pools: GET /api/v1/pools answers."
    )


class NodeTaskOut(BaseModel):
    jobId: str
    jobName: str
    user: str
    virtualCluster: str
    role: str
    index: int
    attempt: int
    state: str = Field(description="WAITING (placed, starting), RUNNING or STOPPING.")
    cpu: float
    memoryMiB: int
    gpus: list[int]
    ports: dict[str, list[int]]
    placedAt: float
    startedAt: float | None
    usage: dict[str, Any]
    visible: bool = Field(description="The caller's own task (or the caller is an admin).")
    command: str | None = Field(description="Only for the job's owner and admins.")
    pid: int | None = Field(description="Only for the job's owner and admins.")
