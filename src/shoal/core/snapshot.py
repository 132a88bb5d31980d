"""What the scheduler sees: nodes with their capacity, what already runs on them, and the queue.

A snapshot is plain immutable data. Free capacity is derived from capacity minus the running
allocations, so there is one source of truth for what is in use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.core.plan import TaskPlacement
from shoal.core.resources import ResourceVector

DEFAULT_PORT_RANGE = (20000, 30000)
# What a role may need of its node beyond resources; a node that reported it unsupported (its
# agent says what it cannot do, and why) gets no task of such a role.
CONTAINER = "container"  # the container runtime (podman)


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as registered: capacity, GPU indices, GPU type, the ports shoal may hand out."""

    name: str
    address: str
    capacity: ResourceVector
    gpu_indices: tuple[int, ...] = ()
    gpu_type: str | None = None
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE
    reserved_ports: frozenset[int] = frozenset()
    schedulable: bool = True
    # What the node cannot do, with why, as its agent reported it: (("container", "podman is
    # not installed"), ...), sorted. A role that needs one of these is never placed here.
    unsupported: tuple[tuple[str, str], ...] = ()
    lacks: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lacks", frozenset(what for what, _ in self.unsupported))
        if len(self.gpu_indices) != self.capacity.gpu:
            raise ValueError(
                f"node {self.name}: {self.capacity.gpu} GPUs but indices {self.gpu_indices}"
            )
        if not self.port_range[0] < self.port_range[1]:
            raise ValueError(f"node {self.name}: empty port range {self.port_range}")


@dataclass(frozen=True, slots=True)
class RoleRequest:
    """``instances`` copies of one task shape, all of which must be placed together."""

    name: str
    instances: int
    per_instance: ResourceVector
    gpu_type: str | None = None
    ports: tuple[tuple[str, int], ...] = (("http", 1),)
    needs: frozenset[str] = frozenset()  # e.g. {CONTAINER}: what a node must not lack

    def can_run_on(self, node: NodeState) -> bool:
        """Whether ``node`` can do all this role needs (resources aside)."""
        return not self.needs or self.needs.isdisjoint(node.lacks)


OPPORTUNISTIC = -1  # priority of `oppo` jobs: idle capacity only, preempted first


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A queued job as the scheduler sees it: ordered by priority, then submission time, then id."""

    job_id: str
    roles: tuple[RoleRequest, ...]
    priority: int = 10
    submitted_at: float = 0.0
    virtual_cluster: str = "default"
    user: str = ""
    total: ResourceVector = field(init=False, repr=False, compare=False)
    _shape: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        total = ResourceVector()
        for role in self.roles:
            total = total + role.per_instance.scaled(role.instances)
        # computed once: asked for many times a cycle
        object.__setattr__(self, "total", total)
        shape = tuple(
            (r.name, r.instances, r.per_instance, r.gpu_type, r.ports, r.needs) for r in self.roles
        )
        object.__setattr__(self, "_shape", shape)

    @property
    def opportunistic(self) -> bool:
        return self.priority < 0

    @property
    def task_count(self) -> int:
        return sum(role.instances for role in self.roles)

    def shape(self) -> tuple[object, ...]:
        """Jobs with equal shapes fit (or not) in exactly the same places."""
        return self._shape


@dataclass(frozen=True, slots=True)
class TaskAllocation:
    """Resources held by one running (or starting, or stopping) task."""

    job_id: str
    role: str
    index: int
    node: str
    resources: ResourceVector
    gpu_indices: tuple[int, ...] = ()
    ports: tuple[int, ...] = ()
    virtual_cluster: str = "default"
    priority: int = 10
    submitted_at: float = 0.0
    user: str = ""
    terminating: bool = False  # being stopped (e.g. preempted): held until it exits


def allocation_for(job: JobRequest, placement: TaskPlacement) -> TaskAllocation:
    """What a placed task of ``job`` holds once it runs."""
    return TaskAllocation(
        job.job_id,
        placement.role,
        placement.index,
        placement.node,
        placement.resources,
        placement.gpu_indices,
        placement.all_ports(),
        job.virtual_cluster,
        job.priority,
        job.submitted_at,
        job.user,
    )


@dataclass(frozen=True, slots=True)
class VirtualCluster:
    """A team's share: a guaranteed quota, how much idle capacity it may borrow on top
    (``None``: any), a per-user GPU cap, and whether higher priority classes may preempt lower
    ones inside it."""

    name: str
    guarantee: ResourceVector
    borrow_limit: ResourceVector | None = None
    user_gpu_cap: int | None = None
    preempt_within: bool = True
    # Guaranteed GPUs per GPU type, e.g. (("A100", 4),). When set, a job asking for a type
    # is inside the guarantee only while the VC's use of that type stays within it.
    gpu_by_type: tuple[tuple[str, int], ...] = ()
    # Strict FIFO (Kueue's StrictFIFO, YARN's FIFO queue): once a job of this VC waits, every
    # later job of the VC waits behind it, even one that would fit (no backfill).
    strict_fifo: bool = False


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    nodes: tuple[NodeState, ...]
    queue: tuple[JobRequest, ...] = ()
    allocations: tuple[TaskAllocation, ...] = field(default_factory=tuple)
    virtual_clusters: tuple[VirtualCluster, ...] = ()  # empty: no quotas, one shared queue
