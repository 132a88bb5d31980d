"""What the simulator replays: jobs with a submission time, a run time and a gang shape.

Every trace format (Philly, Alibaba, Tiresias, shoal's own list) is read into these records; the
engine turns them into the same ``JobRequest`` objects the server hands to ``core.schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import RoleRequest


class TraceError(ValueError):
    """A trace file that cannot be read: names the file, the row and the column."""


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a trace. ``duration_s`` is the run time on an idle cluster (from the trace);
    ``roles`` is the gang, placed all at once."""

    job_id: str
    submit_s: float
    duration_s: float
    roles: tuple[RoleRequest, ...]
    virtual_cluster: str = "default"
    priority: int = 10
    user: str = ""
    gpus: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.duration_s < 0:
            raise ValueError(f"job {self.job_id}: negative duration {self.duration_s}")
        gpus = sum(role.per_instance.gpu * role.instances for role in self.roles)
        object.__setattr__(self, "gpus", gpus)


@dataclass(frozen=True, slots=True)
class Trace:
    """Jobs sorted by submission time, plus what the reader had to skip or change, and why."""

    jobs: tuple[SimJob, ...]
    source: str
    notes: tuple[str, ...] = ()


def gpu_gang(
    gpus: int,
    gpus_per_node: int,
    cpu_millis_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
    gpu_type: str | None = None,
) -> tuple[RoleRequest, ...]:
    """The gang for a trace job that only says how many GPUs it used: one task when it fits on
    one node, else equal tasks of the largest size that divides the GPU count and fits a node
    (16 GPUs on 8-GPU nodes: 2 tasks of 8; 12 GPUs: 2 tasks of 6)."""
    if gpus <= 0:
        raise ValueError(f"a GPU gang needs at least one GPU, not {gpus}")
    per_task = next(size for size in range(min(gpus, gpus_per_node), 0, -1) if gpus % size == 0)
    shape = ResourceVector(cpu_millis_per_gpu * per_task, memory_mib_per_gpu * per_task, per_task)
    return (RoleRequest("worker", gpus // per_task, shape, gpu_type, ()),)


def sort_jobs(jobs: list[SimJob]) -> tuple[SimJob, ...]:
    """Submission order; ties keep the trace's own order (stable sort)."""
    return tuple(sorted(jobs, key=lambda job: job.submit_s))
