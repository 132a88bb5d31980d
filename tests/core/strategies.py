"""Hypothesis strategies for the scheduling core: random clusters, running tasks and queues.

Clusters are small (1-12 nodes) and their port ranges narrow, so ports, GPUs, cpu and memory all
run out now and then. Running tasks are drawn node by node from what is still free, so they are
always consistent with capacity (the scheduler is entitled to assume that).

Every strategy here is built once at import time and shapes come from small catalogs (one draw per
group of fields): building strategies inside draws, or drawing a 30-job queue field by field,
costs far more than the scheduler itself and would dominate the property tests' run time.
Catalog entries are ordered simplest first, so failures shrink towards them; repeats weight them.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    RoleRequest,
    TaskAllocation,
)

GPU_TYPES = ("a100", "v100")
MISSING_GPU_TYPE = "h100"  # requested now and then, present on no node
ROLE_NAMES = ("learner", "actor", "worker")

PortRequest = tuple[tuple[str, int], ...]

# --- nodes -----------------------------------------------------------------------------------

NODE_NAME = st.text("abcdefgh", min_size=1, max_size=3)
CPU_MEMORY_CAPACITY = ((8000, 32768), (2000, 2048), (4000, 8192), (16000, 262144), (64000, 8192))
NODE_BODY = st.tuples(
    st.sampled_from((0, 8, 4, 1, 8, 2, 0, 3, 8, 6, 5, 7)),  # GPUs
    st.booleans(),  # sparse GPU indices (as on a node with a GPU removed)
    st.sampled_from(CPU_MEMORY_CAPACITY),
    st.sampled_from((*GPU_TYPES, None)),
    st.integers(20000, 20050),  # port range start
    st.sampled_from((40, 12, 5, 2, 300)),  # port range width: often narrow enough to run out
    st.lists(st.integers(-2, 25), max_size=4),  # reserved ports, relative to the start
    st.sampled_from((True, True, True, False)),  # schedulable
    st.lists(  # running tasks: fractions (in quarters) of what is still free, GPU and port counts
        st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 8), st.integers(0, 3)),
        max_size=3,
    ),
)

# --- jobs ------------------------------------------------------------------------------------

PORT_CATALOG: tuple[PortRequest, ...] = (
    (("http", 1),),
    (("http", 1),),
    (),  # a task with no ports at all: its endpoint is the bare address
    (("http", 1), ("ssh", 1)),
    (("http", 1), ("master", 1)),
    (("http", 1), ("master", 0)),
    (("http", 1), ("aux", 3)),
    (("http", 1), ("ssh", 2), ("master", 1)),
)
GPU_CATALOG: tuple[tuple[int, str | None], ...] = (
    *((0, None),) * 8,
    *((1, None),) * 4,
    (2, None),
    (2, None),
    (4, None),
    (8, None),
    (3, None),
    (5, None),
    (1, "a100"),
    (2, "v100"),
    (4, "a100"),
    (1, "v100"),
    (16, None),
    (1, MISSING_GPU_TYPE),
)
CPU_MEMORY_CATALOG: tuple[tuple[int, int], ...] = (
    (0, 0),
    (250, 256),
    (1000, 1024),
    (1000, 4096),
    (500, 512),
    (2000, 1024),
    (4000, 16384),
    (8000, 4096),
    (500, 100000),
    (32000, 1024),
)
ORDER_CATALOG = ((10, 0.0), (10, 1.0), (100, 1.0), (10, 2.5), (-1, 0.0), (100, 2.5))

ROLE_BODY = st.tuples(
    st.sampled_from(ROLE_NAMES),
    st.integers(1, 6),
    st.sampled_from(GPU_CATALOG),
    st.sampled_from(CPU_MEMORY_CATALOG),
    st.sampled_from(PORT_CATALOG),
)
JOB_BODY = st.tuples(
    st.lists(ROLE_BODY, min_size=1, max_size=3, unique_by=lambda body: body[0]),
    st.sampled_from(ORDER_CATALOG),
)
RANDOMS = st.randoms(use_true_random=False)


def _node(name: str, position: int, body: tuple) -> NodeState:  # type: ignore[type-arg]
    gpus, sparse, (cpu, memory), gpu_type, low, width, reserved, schedulable, _ = body
    indices = tuple(range(0, 2 * gpus, 2)) if sparse else tuple(range(gpus))
    return NodeState(
        name=name,
        address=f"10.0.{position}.1",
        capacity=ResourceVector(cpu, memory, gpus),
        gpu_indices=indices,
        gpu_type=gpu_type if gpus else None,
        port_range=(low, low + width),
        reserved_ports=frozenset(low + offset for offset in reserved),
        schedulable=schedulable,
    )


def _running_tasks(
    node: NodeState, wanted: list[tuple[int, int, int, int]], rnd: random.Random
) -> list[TaskAllocation]:
    """The running tasks ``wanted`` asks for, each cut down to what is still free on ``node``."""
    cpu, memory = node.capacity.cpu_millis, node.capacity.memory_mib
    gpus = list(node.gpu_indices)
    ports = [p for p in range(*node.port_range) if p not in node.reserved_ports]
    tasks = []
    for k, (cpu_quarters, memory_quarters, gpu_count, port_count) in enumerate(wanted):
        need_cpu, need_memory = cpu * cpu_quarters // 4, memory * memory_quarters // 4
        cpu, memory = cpu - need_cpu, memory - need_memory
        taken_gpus = rnd.sample(gpus, min(gpu_count, len(gpus)))
        taken_ports = rnd.sample(ports, min(port_count, len(ports)))
        gpus = [g for g in gpus if g not in taken_gpus]
        ports = [p for p in ports if p not in taken_ports]
        tasks.append(
            TaskAllocation(
                job_id=f"running-{node.name}-{k}",
                role="worker",
                index=0,
                node=node.name,
                resources=ResourceVector(need_cpu, need_memory, len(taken_gpus)),
                gpu_indices=tuple(taken_gpus),
                ports=tuple(taken_ports),
            )
        )
    return tasks


@st.composite
def clusters(draw: st.DrawFn) -> tuple[tuple[NodeState, ...], tuple[TaskAllocation, ...]]:
    count = draw(st.integers(1, 12))
    names = draw(st.lists(NODE_NAME, min_size=count, max_size=count, unique=True))
    bodies = [draw(NODE_BODY) for _ in names]
    rnd = draw(RANDOMS)
    pairs = zip(names, bodies, strict=True)
    nodes = tuple(_node(name, i, body) for i, (name, body) in enumerate(pairs))
    allocations: list[TaskAllocation] = []
    for node, body in zip(nodes, bodies, strict=True):
        allocations.extend(_running_tasks(node, body[-1], rnd))
    if rnd.randrange(10) == 0:  # a task still recorded on a node that has left the cluster
        allocations.append(TaskAllocation("ghost", "worker", 0, "gone", ResourceVector(1, 1, 0)))
    return nodes, tuple(allocations)


def _role(body: tuple) -> RoleRequest:  # type: ignore[type-arg]
    name, instances, (gpu, gpu_type), (cpu, memory), ports = body
    return RoleRequest(name, instances, ResourceVector(cpu, memory, gpu), gpu_type, ports)


@st.composite
def queues(draw: st.DrawFn) -> tuple[JobRequest, ...]:
    count = draw(st.integers(1, 30))
    bodies = draw(st.lists(JOB_BODY, min_size=count, max_size=count))
    # ids are numbered in a random order so that the id tie-break is exercised too
    numbers = draw(RANDOMS).sample(range(len(bodies)), len(bodies))
    return tuple(
        JobRequest(
            job_id=f"job-{number:02d}",
            roles=tuple(_role(role) for role in roles),
            priority=priority,
            submitted_at=submitted_at,
        )
        for number, (roles, (priority, submitted_at)) in zip(numbers, bodies, strict=True)
    )


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    nodes, allocations = draw(clusters())
    return ClusterSnapshot(nodes=nodes, queue=draw(queues()), allocations=allocations)
