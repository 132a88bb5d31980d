"""The scheduler's output: data describing what to do, applied elsewhere with guarded writes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shoal.core.resources import ResourceVector


class ReasonCode(StrEnum):
    """Why a job is not running. Shown to users with a message; stable for scripts."""

    INSUFFICIENT_GPU = "InsufficientGPU"
    INSUFFICIENT_CPU = "InsufficientCPU"
    INSUFFICIENT_MEMORY = "InsufficientMemory"
    INSUFFICIENT_PORTS = "InsufficientPorts"
    GPU_TYPE_UNAVAILABLE = "GPUTypeUnavailable"
    # the task needs what no schedulable node can do (the container runtime), as reported
    UNSUPPORTED_BY_NODES = "UnsupportedByNodes"
    GANG_DOES_NOT_FIT = "GangDoesNotFit"
    NO_SCHEDULABLE_NODES = "NoSchedulableNodes"
    NEVER_FITS = "NeverFits"
    OVER_QUOTA = "OverQuota"  # the VC's guarantee (plus borrowing limit) is used up
    USER_GPU_CAP = "UserGPUCap"  # the user's GPU cap inside the VC is reached
    # infeasible: more than the VC's guarantee plus borrowing limit, or than its per-user cap
    EXCEEDS_VC_LIMIT = "ExceedsVirtualClusterLimit"
    EXCEEDS_USER_GPU_CAP = "ExceedsUserGPUCap"
    NO_IDLE_CAPACITY = "NoIdleCapacity"  # borrowing or `oppo`: only idle capacity may be used
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"  # victims are being stopped for this job
    RESERVED_FOR_HEAD = "ReservedForEarlierJob"  # the room is held for a job ahead in the queue
    UNKNOWN_VIRTUAL_CLUSTER = "UnknownVirtualCluster"


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    role: str
    index: int
    node: str
    address: str
    resources: ResourceVector
    gpu_indices: tuple[int, ...]
    ports: tuple[tuple[str, tuple[int, ...]], ...]

    def port_list(self, label: str) -> tuple[int, ...]:
        for name, ports in self.ports:
            if name == label:
                return ports
        return ()

    def all_ports(self) -> tuple[int, ...]:
        return tuple(p for _, ports in self.ports for p in ports)


@dataclass(frozen=True, slots=True)
class Admission:
    """Start this job: every task with its node, GPUs and ports (the whole gang, never part)."""

    job_id: str
    placements: tuple[TaskPlacement, ...]


@dataclass(frozen=True, slots=True)
class PendingReason:
    code: ReasonCode
    message: str


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: str
    reason: PendingReason
    position: int


@dataclass(frozen=True, slots=True)
class InfeasibleJob:
    job_id: str
    reason: PendingReason


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``victim_job_id`` (SIGTERM, grace, SIGKILL) so that ``for_job_id`` can run; the victim
    goes back to the queue keeping its submission time."""

    victim_job_id: str
    for_job_id: str
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    infeasible: tuple[InfeasibleJob, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    # Bounded cycles (core/budget.py): where the next cycle's backfill starts (pass it back as
    # ``resume_from``; None: from the start), how many jobs this one examined, and what made it
    # stop early (None, "placements" or "deadline").
    resume_from: tuple[int, float, str] | None = None
    examined: int = 0
    stopped_by: str | None = None

    def admitted_ids(self) -> list[str]:
        return [a.job_id for a in self.admissions]

    def reason_for(self, job_id: str) -> PendingReason | None:
        for waiting in self.pending:
            if waiting.job_id == job_id:
                return waiting.reason
        for never in self.infeasible:
            if never.job_id == job_id:
                return never.reason
        return None
