"""``schedule`` on small hand-made clusters, one table per rule.

Every expectation below is derived from the documented policy, not copied from a run:
jobs in (priority desc, submitted_at, job_id) order; a job is placed as a whole gang or not at all;
within a job the largest roles go first; a GPU task goes to the node with the fewest free GPUs that
still fits it (best fit), a CPU-only task to nodes with no free GPU first; ties break by node name;
a job that could not fit even on the idle cluster (cordoned nodes included) is infeasible.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from shoal.core.placement import NodePool, PlacementFailure, choose_gpus
from shoal.core.plan import Plan, ReasonCode, TaskPlacement
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    RoleRequest,
    TaskAllocation,
)

CPU = 1000  # millicores per cpu
Task = tuple[str, int]


def node(
    name: str,
    gpus: int = 8,
    cpus: int = 64,
    memory_mib: int = 512 * 1024,
    *,
    gpu_type: str | None = None,
    ports: tuple[int, int] = (20000, 30000),
    reserved: frozenset[int] = frozenset(),
    schedulable: bool = True,
) -> NodeState:
    return NodeState(
        name=name,
        address=f"addr-{name}",
        capacity=ResourceVector(cpus * CPU, memory_mib, gpus),
        gpu_indices=tuple(range(gpus)),
        gpu_type=gpu_type,
        port_range=ports,
        reserved_ports=reserved,
        schedulable=schedulable,
    )


def role(
    name: str = "worker",
    instances: int = 1,
    gpu: int = 0,
    cpus: float = 1,
    memory_mib: int = 1024,
    *,
    gpu_type: str | None = None,
    ports: tuple[tuple[str, int], ...] = (("http", 1),),
) -> RoleRequest:
    return RoleRequest(
        name, instances, ResourceVector(round(cpus * CPU), memory_mib, gpu), gpu_type, ports
    )


def job(
    job_id: str, *roles: RoleRequest, priority: int = 10, submitted_at: float = 0.0
) -> JobRequest:
    return JobRequest(job_id, roles or (role(),), priority=priority, submitted_at=submitted_at)


def running(
    on: str,
    gpus: tuple[int, ...] = (),
    cpus: float = 0,
    memory_mib: int = 0,
    ports: tuple[int, ...] = (),
) -> TaskAllocation:
    resources = ResourceVector(round(cpus * CPU), memory_mib, len(gpus))
    return TaskAllocation(f"running-on-{on}", "worker", 0, on, resources, gpus, ports)


def run(
    nodes: Sequence[NodeState],
    queue: Sequence[JobRequest],
    allocations: Sequence[TaskAllocation] = (),
) -> Plan:
    return schedule(ClusterSnapshot(tuple(nodes), tuple(queue), tuple(allocations)), now=0.0)


def placed(plan: Plan, job_id: str) -> dict[Task, TaskPlacement]:
    for admission in plan.admissions:
        if admission.job_id == job_id:
            return {(p.role, p.index): p for p in admission.placements}
    raise AssertionError(f"{job_id} was not admitted: {plan.reason_for(job_id)}")


def layout(plan: Plan) -> dict[str, dict[Task, str]]:
    return {a.job_id: {(p.role, p.index): p.node for p in a.placements} for a in plan.admissions}


# --- where tasks go ------------------------------------------------------------------------------

PLACEMENT_CASES = [
    pytest.param(
        [node("a")],
        [],
        [job("j1", role(gpu=2))],
        {"j1": {("worker", 0): "a"}},
        set(),
        id="single-job-fits",
    ),
    pytest.param(
        # trainers (8 GPUs) go first as the largest role: one whole node each (a, then b by name);
        # the CPU-only ps then prefers a node without free GPUs: both have none, so a by name.
        [node("b"), node("a")],
        [],
        [job("j1", role("ps", 1, cpus=4), role("trainer", 2, gpu=8))],
        {"j1": {("trainer", 0): "a", ("trainer", 1): "b", ("ps", 0): "a"}},
        set(),
        id="multi-role-gang-across-two-nodes",
    ),
    pytest.param(
        # j1 (first by priority) needs 3 x 3 GPUs; c's GPUs are all busy, so 2 fit (on a and b)
        # and the third does not: j1 gets nothing. j2 needs a and b whole: it only fits if j1's two
        # placed tasks were undone (had they stayed, a and b would have one free GPU each).
        [node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)],
        [running("c", gpus=(0, 1, 2, 3))],
        [job("j1", role(instances=3, gpu=3), priority=100), job("j2", role(instances=2, gpu=4))],
        {"j2": {("worker", 0): "a", ("worker", 1): "b"}},
        {"j1"},
        id="gang-all-or-nothing-leaves-pool-unchanged",
    ),
    pytest.param(
        # best fit: the 1-GPU task goes to b (4 free) rather than a (8 free), so the 8-GPU job still
        # finds a whole node. Worst fit (most free GPUs) or first fit by name would both pick a,
        # leaving 7 + 4 free GPUs and no whole node: the 8-GPU job would wait.
        [node("a"), node("b")],
        [running("b", gpus=(0, 1, 2, 3))],
        [job("small", role(gpu=1)), job("big", role(gpu=8), submitted_at=1)],
        {"small": {("worker", 0): "b"}, "big": {("worker", 0): "a"}},
        set(),
        id="best-fit-keeps-whole-node",
    ),
    pytest.param(
        # on an idle cluster, best fit takes the exact 2-GPU node c before the roomier ones
        [node("a", gpus=8), node("b", gpus=4), node("c", gpus=2)],
        [],
        [job("two", role(gpu=2)), job("four", role(gpu=4), submitted_at=1)],
        {"two": {("worker", 0): "c"}, "four": {("worker", 0): "b"}},
        set(),
        id="best-fit-idle-smallest-node-first",
    ),
    pytest.param(
        # a CPU-only task goes to the GPU-less node even though "a-gpu" sorts first by name
        [node("a-gpu"), node("b-cpu", gpus=0)],
        [],
        [job("cpu-only", role(cpus=2))],
        {"cpu-only": {("worker", 0): "b-cpu"}},
        set(),
        id="cpu-only-prefers-gpuless-node",
    ),
    pytest.param(
        # a node whose GPUs are all in use counts as "no free GPUs" too
        [node("a"), node("b")],
        [running("b", gpus=tuple(range(8)))],
        [job("cpu-only", role(cpus=2))],
        {"cpu-only": {("worker", 0): "b"}},
        set(),
        id="cpu-only-prefers-node-with-all-gpus-busy",
    ),
    pytest.param(
        # the GPU-less node is full (cpu), so the CPU task falls back to a GPU node
        [node("a-gpu"), node("b-cpu", gpus=0, cpus=4)],
        [running("b-cpu", cpus=4)],
        [job("cpu-only", role(cpus=2))],
        {"cpu-only": {("worker", 0): "a-gpu"}},
        set(),
        id="cpu-only-falls-back-to-gpu-node",
    ),
    pytest.param(
        [node("a", gpu_type="v100"), node("b", gpu_type="a100"), node("c", gpu_type="v100")],
        [],
        [job("typed", role(instances=2, gpu=4, gpu_type="a100"))],
        {"typed": {("worker", 0): "b", ("worker", 1): "b"}},
        set(),
        id="gpu-type-only-matching-nodes",
    ),
    pytest.param(
        [node("a", schedulable=False), node("b")],
        [],
        [job("j1", role(gpu=1))],
        {"j1": {("worker", 0): "b"}},
        set(),
        id="cordoned-node-not-used",
    ),
    pytest.param(
        # best-effort FIFO: the head (8 GPUs) waits, the later 2-GPU job starts
        [node("a")],
        [running("a", gpus=(0, 1, 2, 3))],
        [job("head", role(gpu=8), priority=100), job("later", role(gpu=2))],
        {"later": {("worker", 0): "a"}},
        {"head"},
        id="later-smaller-job-starts",
    ),
]


@pytest.mark.parametrize(("nodes", "running", "queue", "expected", "waiting"), PLACEMENT_CASES)
def test_placement(
    nodes: list[NodeState],
    running: list[TaskAllocation],
    queue: list[JobRequest],
    expected: dict[str, dict[Task, str]],
    waiting: set[str],
) -> None:
    plan = run(nodes, queue, running)
    assert layout(plan) == expected
    assert {p.job_id for p in plan.pending} == waiting
    assert plan.infeasible == ()
    by_name = {n.name: n for n in nodes}
    for admission in plan.admissions:
        for p in admission.placements:
            assert p.address == by_name[p.node].address
            assert len(p.gpu_indices) == p.resources.gpu


def test_gang_failure_leaves_ports_and_gpus_untouched() -> None:
    # j1 fails on its third task after two were placed (c is busy); j2 must get exactly what
    # idle nodes would give: every GPU and, on each node, the first port of the range.
    nodes = [
        node("a", gpus=4, ports=(100, 110)),
        node("b", gpus=4, ports=(200, 210)),
        node("c", gpus=4, ports=(300, 310)),
    ]
    queue = [job("j1", role(instances=3, gpu=3), priority=100), job("j2", role(instances=2, gpu=4))]
    plan = run(nodes, queue, [running("c", gpus=(0, 1, 2, 3))])
    tasks = placed(plan, "j2")
    assert {p.gpu_indices for p in tasks.values()} == {(0, 1, 2, 3)}
    assert sorted(p.port_list("http") for p in tasks.values()) == [(100,), (200,)]
    assert plan.reason_for("j1").code is ReasonCode.GANG_DOES_NOT_FIT  # type: ignore[union-attr]


# --- order -----------------------------------------------------------------------------------


ORDER_CASES = [
    pytest.param(
        [job("a-low", priority=10), job("b-high", priority=100, submitted_at=9)],
        ["b-high", "a-low"],
        id="priority-beats-submit-time-and-id",
    ),
    pytest.param(
        [job("a-late", submitted_at=5), job("z-early", submitted_at=1)],
        ["z-early", "a-late"],
        id="fifo-beats-id",
    ),
    pytest.param(
        [job("j-2"), job("j-10"), job("j-1")],
        ["j-1", "j-10", "j-2"],
        id="job-id-breaks-ties-as-strings",
    ),
    pytest.param(
        [
            job("d", submitted_at=2),
            job("c", priority=-1),
            job("b", priority=100, submitted_at=3),
            job("a", submitted_at=2),
            job("e", priority=100, submitted_at=1),
        ],
        ["e", "b", "a", "d", "c"],
        id="mixed",
    ),
]


@pytest.mark.parametrize(("queue", "expected_order"), ORDER_CASES)
def test_queue_order(queue: list[JobRequest], expected_order: list[str]) -> None:
    # one node with one GPU and 1-GPU jobs: only the first job in queue order can start, and the
    # others wait at positions 1..n in queue order
    gpu_queue = [
        job(j.job_id, role(gpu=1), priority=j.priority, submitted_at=j.submitted_at) for j in queue
    ]
    for shuffled in (gpu_queue, gpu_queue[::-1]):
        plan = run([node("a", gpus=1)], shuffled)
        assert plan.admitted_ids() == expected_order[:1]
        assert [p.job_id for p in plan.pending] == expected_order[1:]
        assert [p.position for p in plan.pending] == list(range(1, len(queue)))


def test_pending_positions_skip_admitted_and_infeasible_jobs() -> None:
    queue = [
        job("j0", role(gpu=4)),  # admitted
        job("j1", role(gpu=8), submitted_at=1),  # waits: 4 GPUs left
        job("j2", role(gpu=16), submitted_at=2),  # infeasible
        job("j3", role(gpu=2), submitted_at=3),  # admitted
        job("j4", role(gpu=4), submitted_at=4),  # waits: 2 GPUs left
        job("j5", role(gpu=3), submitted_at=5),  # waits
    ]
    plan = run([node("a")], queue)
    assert plan.admitted_ids() == ["j0", "j3"]
    assert [(p.job_id, p.position) for p in plan.pending] == [("j1", 1), ("j4", 2), ("j5", 3)]
    assert [i.job_id for i in plan.infeasible] == ["j2"]


# --- why a job waits --------------------------------------------------------------------------

REASON_CASES = [
    pytest.param(
        # free blocks: 4 on n1, 2 on n2: the largest is named, with its node
        [node("n1"), node("n2")],
        [running("n1", gpus=(0, 1, 2, 3)), running("n2", gpus=(0, 1, 2, 3, 4, 5))],
        role("head", gpu=8),
        ReasonCode.INSUFFICIENT_GPU,
        ["head[0] needs 8 GPUs on one node", "the largest free block is 4 on n1"],
        id="insufficient-gpu-names-largest-block",
    ),
    pytest.param(
        [node("n1", gpus=2), node("n2", gpus=2)],
        [running("n1", gpus=(0, 1)), running("n2", gpus=(0, 1))],
        role("head", gpu=1),
        ReasonCode.INSUFFICIENT_GPU,
        ["head[0] needs 1 GPUs on one node", "0 (no GPU is free)"],
        id="insufficient-gpu-none-free",
    ),
    pytest.param(
        # every single 4-GPU task fits (4 free on each node) but only two at once
        [node("n1"), node("n2")],
        [running("n1", gpus=(0, 1, 2, 3)), running("n2", gpus=(4, 5, 6, 7))],
        role("head", instances=3, gpu=4),
        ReasonCode.GANG_DOES_NOT_FIT,
        ["all 3 tasks must start together and only 2 fit at once", "head[2] found no room"],
        id="gang-does-not-fit",
    ),
    pytest.param(
        [node("n1", gpus=0, cpus=8), node("n2", gpus=0, cpus=8)],
        [running("n1", cpus=7), running("n2", cpus=5.5)],
        role("head", cpus=4),
        ReasonCode.INSUFFICIENT_CPU,
        ["head[0] needs 4 cpu", "the most free is 2.5 on n2"],
        id="insufficient-cpu",
    ),
    pytest.param(
        [node("n1", gpus=0, memory_mib=8192)],
        [running("n1", memory_mib=6144)],
        role("head", memory_mib=4096),
        ReasonCode.INSUFFICIENT_MEMORY,
        ["head[0] needs 4096 MiB", "the most free is 2048 MiB on n1"],
        id="insufficient-memory",
    ),
    pytest.param(
        # range 20000..20003 (4 ports), 20001 reserved, 20000 and 20003 in use: 1 port free
        [node("n1", gpus=0, ports=(20000, 20004), reserved=frozenset({20001}))],
        [running("n1", ports=(20000, 20003))],
        role("head", ports=(("http", 1), ("ssh", 1))),
        ReasonCode.INSUFFICIENT_PORTS,
        ["head[0] needs 2 ports", "is 1 on n1"],
        id="insufficient-ports",
    ),
    pytest.param(
        # the only a100 node is cordoned: the job could run some day, so it waits
        [node("n1", gpu_type="v100"), node("n2", gpu_type="a100", schedulable=False)],
        [],
        role("head", gpu=1, gpu_type="a100"),
        ReasonCode.GPU_TYPE_UNAVAILABLE,
        ["head[0] needs GPU type 'a100'"],
        id="gpu-type-only-on-cordoned-node",
    ),
    pytest.param(
        # the only 16-GPU node is cordoned: waits (counts for feasibility), never placed there
        [node("big", gpus=16, schedulable=False), node("small")],
        [],
        role("head", gpu=16),
        ReasonCode.INSUFFICIENT_GPU,
        ["the largest free block is 8 on small"],
        id="cordoned-node-counts-for-feasibility",
    ),
    pytest.param([], [], role("head"), ReasonCode.NO_SCHEDULABLE_NODES, [], id="no-nodes"),
    pytest.param(
        [node("n1", schedulable=False), node("n2", schedulable=False)],
        [],
        role("head"),
        ReasonCode.NO_SCHEDULABLE_NODES,
        ["no schedulable node"],
        id="all-nodes-cordoned",
    ),
]


@pytest.mark.parametrize(("nodes", "running", "head", "code", "fragments"), REASON_CASES)
def test_pending_reason(
    nodes: list[NodeState],
    running: list[TaskAllocation],
    head: RoleRequest,
    code: ReasonCode,
    fragments: list[str],
) -> None:
    # the head waits; a later 1-cpu job that fits anywhere still starts (best-effort FIFO)
    later = job("later", role(gpu=0, cpus=0.5, memory_mib=512, ports=()), submitted_at=1)
    plan = run(nodes, [job("head", head, priority=100), later], running)
    assert [p.job_id for p in plan.pending][:1] == ["head"]
    reason = plan.reason_for("head")
    assert reason is not None
    assert reason.code is code
    for fragment in fragments:
        assert fragment in reason.message
    assert plan.infeasible == ()
    if any(n.schedulable for n in nodes):
        assert plan.admitted_ids() == ["later"]
    else:
        assert plan.admitted_ids() == []


# --- jobs that can never run ------------------------------------------------------------------

INFEASIBLE_CASES = [
    pytest.param(
        [node("a"), node("b")],
        job("huge", role(gpu=16)),
        ["worker[0] needs 16 GPUs on one node", "largest free block is 8 on a"],
        id="instance-larger-than-any-node",
    ),
    pytest.param(
        # 15 GPUs <= 16 in total, but a 5-GPU task needs 5 on one node: one per node, never three
        [node("a"), node("b")],
        job("j", role(instances=3, gpu=5)),
        ["all 3 tasks must start together and only 2 fit at once"],
        id="gang-larger-than-cluster-in-blocks",
    ),
    pytest.param(
        [node("a", gpu_type="v100"), node("b", gpu_type="a100")],
        job("j", role(gpu=1, gpu_type="h100")),
        ["needs GPU type 'h100'"],
        id="gpu-type-nowhere",
    ),
    pytest.param(
        [node("a", gpus=0, cpus=8), node("b", gpus=0, cpus=16)],
        job("j", role(cpus=32)),
        ["needs 32 cpu", "the most free is 16 on b"],
        id="too-much-cpu",
    ),
    pytest.param(
        [node("a", gpus=0, ports=(30000, 30002))],
        job("j", role(ports=(("http", 1), ("aux", 2)))),
        ["needs 3 ports"],
        id="port-range-too-small",
    ),
]


@pytest.mark.parametrize(("nodes", "never", "fragments"), INFEASIBLE_CASES)
def test_infeasible(nodes: list[NodeState], never: JobRequest, fragments: list[str]) -> None:
    # busy nodes must not matter: infeasibility is judged on the idle cluster
    busy = [running(n.name, cpus=1, memory_mib=1) for n in nodes]
    twin = JobRequest("twin", never.roles, submitted_at=5)  # same shape, same verdict
    plan = run(nodes, [never, twin], busy)
    assert [i.job_id for i in plan.infeasible] == [never.job_id, "twin"]
    assert plan.admissions == () and plan.pending == ()
    for verdict in plan.infeasible:
        assert verdict.reason.code is ReasonCode.NEVER_FITS
        assert verdict.reason.message.startswith("can never run on this cluster")
        for fragment in fragments:
            assert fragment in verdict.reason.message


def test_gang_total_within_cluster_total_is_still_infeasible() -> None:
    nodes = [node("a"), node("b")]
    gang = job("j", role(instances=3, gpu=5))
    assert gang.total.gpu <= sum(n.capacity.gpu for n in nodes)  # 15 <= 16
    plan = run(nodes, [gang])
    assert plan.reason_for("j").code is ReasonCode.NEVER_FITS  # type: ignore[union-attr]


def test_job_that_fits_on_idle_cluster_is_not_infeasible() -> None:
    # r2 (10 cpu) goes first as the larger role and takes node a (first by name, fits), leaving
    # only b (1 MiB) for r1 (100 MiB). Yet r1 -> a and r2 -> b is a valid placement.
    nodes = [
        NodeState("a", "addr-a", ResourceVector(10 * CPU, 100, 1), (0,)),
        NodeState("b", "addr-b", ResourceVector(10 * CPU, 1, 1), (0,)),
    ]
    gang = job(
        "j", role("r1", gpu=1, cpus=1, memory_mib=100), role("r2", gpu=1, cpus=10, memory_mib=1)
    )
    plan = run(nodes, [gang])
    assert plan.infeasible == ()
    assert plan.admitted_ids() == ["j"]


# --- what running tasks hold ------------------------------------------------------------------


def test_gpus_in_use_are_never_handed_out() -> None:
    # GPUs 0 and 2 are in use: a 2-GPU job can only get 1 and 3; a second one must wait
    nodes = [node("a", gpus=4)]
    queue = [job("j1", role(gpu=2)), job("j2", role(gpu=2), submitted_at=1)]
    plan = run(nodes, queue, [running("a", gpus=(0, 2))])
    assert placed(plan, "j1")[("worker", 0)].gpu_indices == (1, 3)
    assert plan.reason_for("j2").code is ReasonCode.INSUFFICIENT_GPU  # type: ignore[union-attr]


def test_gpus_of_several_tasks_on_a_node_are_disjoint() -> None:
    nodes = [node("a", gpus=8)]
    queue = [job("j1", role(instances=3, gpu=2)), job("j2", role(gpu=1), submitted_at=1)]
    plan = run(nodes, queue, [running("a", gpus=(5,))])
    given = [g for a in plan.admissions for p in a.placements for g in p.gpu_indices]
    assert len(given) == 7
    assert sorted(given) == [0, 1, 2, 3, 4, 6, 7]


def test_cpu_and_memory_in_use_reduce_what_fits() -> None:
    # 16 cpu, 12 in use: only one more 3-cpu task fits on a, so the 2-instance job spills to b
    nodes = [node("a", gpus=0, cpus=16), node("b", gpus=0, cpus=16)]
    plan = run(nodes, [job("j", role(instances=2, cpus=3))], [running("a", cpus=12)])
    assert {t: p.node for t, p in placed(plan, "j").items()} == {
        ("worker", 0): "a",
        ("worker", 1): "b",
    }


def test_ports_in_use_and_reserved_are_never_handed_out() -> None:
    # range 20000..20005: 20001 reserved, 20000 and 20003 in use -> exactly 20002, 20004, 20005
    n = node("a", gpus=0, ports=(20000, 20006), reserved=frozenset({20001}))
    queue = [
        job("j1", role(ports=(("http", 1), ("aux", 2)))),
        job("j2", role(), submitted_at=1),
    ]
    plan = run([n], queue, [running("a", ports=(20000, 20003))])
    task = placed(plan, "j1")[("worker", 0)]
    assert sorted(task.all_ports()) == [20002, 20004, 20005]
    assert len(task.port_list("http")) == 1 and len(task.port_list("aux")) == 2
    assert plan.reason_for("j2").code is ReasonCode.INSUFFICIENT_PORTS  # type: ignore[union-attr]


def test_ports_unique_per_node_and_inside_range() -> None:
    nodes = [node("a", gpus=0, ports=(30000, 30010)), node("b", gpus=0, ports=(40000, 40003))]
    queue = [
        job(f"j{i}", role(instances=3, ports=(("http", 1),)), submitted_at=i) for i in range(4)
    ]
    plan = run(nodes, queue)
    assert len(plan.admissions) == 4  # 12 ports needed, 13 available
    per_node: dict[str, list[int]] = {}
    for admission in plan.admissions:
        for p in admission.placements:
            per_node.setdefault(p.node, []).extend(p.all_ports())
    ranges = {n.name: n.port_range for n in nodes}
    for name, ports in per_node.items():
        low, high = ranges[name]
        assert len(ports) == len(set(ports))
        assert all(low <= port < high for port in ports)


@pytest.mark.parametrize(
    ("free", "count", "expected"),
    [
        ([1, 2, 3], 2, [2, 3]),  # the aligned pair, not the first two
        ([0, 1, 2, 3, 4, 5, 6, 7], 4, [0, 1, 2, 3]),
        ([1, 2, 3, 4, 5, 6, 7], 4, [4, 5, 6, 7]),
        ([0, 1, 3], 1, [0]),
        ([1, 2, 3, 5], 4, [1, 2, 3, 5]),  # no aligned block: the first free ones
        ([0, 1, 2, 3], 3, [0, 1, 2]),  # not a power of two
        ([0, 1], 0, []),
    ],
)
def test_choose_gpus_prefers_aligned_blocks(
    free: list[int], count: int, expected: list[int]
) -> None:
    assert choose_gpus(free, count) == expected


# --- determinism ------------------------------------------------------------------------------


def _busy_snapshot() -> ClusterSnapshot:
    nodes = (
        node("a"),
        node("b", gpus=4, gpu_type="a100"),
        node("c", gpus=0, cpus=16, ports=(100, 120)),
        node("d", schedulable=False),
    )
    queue = (
        job("j1", role("learner", 1, gpu=4), role("actor", 4, cpus=2), priority=100),
        job("j2", role(instances=2, gpu=2, gpu_type="a100"), submitted_at=1),
        job("j3", role(gpu=8), submitted_at=1),
        job("j4", role(gpu=16), submitted_at=2),
        job("j5", role(instances=6, cpus=4), submitted_at=2),
        job("j6", role(gpu=1)),
    )
    allocations = (running("a", gpus=(0,), cpus=2), running("c", cpus=4, ports=(100, 101)))
    return ClusterSnapshot(nodes, queue, allocations)


def test_same_snapshot_same_plan() -> None:
    snapshot = _busy_snapshot()
    first = schedule(snapshot, now=0.0)
    assert first.admissions and first.pending and first.infeasible  # a meaningful mix
    assert schedule(snapshot, now=0.0) == first
    assert schedule(snapshot, now=1e9) == first  # the clock plays no part today


@pytest.mark.parametrize("seed", range(5))
def test_plan_does_not_depend_on_tuple_order(seed: int) -> None:
    snapshot = _busy_snapshot()
    rnd = random.Random(seed)
    nodes, queue, allocations = (
        list(part) for part in (snapshot.nodes, snapshot.queue, snapshot.allocations)
    )
    for part in (nodes, queue, allocations):
        rnd.shuffle(part)
    shuffled = ClusterSnapshot(tuple(nodes), tuple(queue), tuple(allocations))
    assert schedule(shuffled, now=0.0) == schedule(snapshot, now=0.0)


def test_nodepool_undo_restores_everything() -> None:
    pool = NodePool([node("a", gpus=4, ports=(10, 20)), node("b", gpus=2, ports=(30, 40))])
    before = (
        pool.free_cpu[:],
        pool.free_memory[:],
        [g[:] for g in pool.free_gpus],
        [set(u) for u in pool.used_ports],
        pool.cursor[:],
        [b[:] for b in pool.buckets],
    )
    result = pool.place_job(job("j", role(instances=4, gpu=2)), commit=False)
    assert isinstance(result, PlacementFailure)  # 3 x 2 GPUs fit, the 4th does not
    assert result.placed == 3
    after = (
        pool.free_cpu,
        pool.free_memory,
        pool.free_gpus,
        pool.used_ports,
        pool.cursor,
        pool.buckets,
    )
    assert after == before
