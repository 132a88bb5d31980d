"""Virtual clusters in the pure scheduler: guarantees, borrowing, reclaim, priorities."""

from __future__ import annotations

from shoal.core.plan import Plan, ReasonCode
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    RoleRequest,
    TaskAllocation,
    VirtualCluster,
)

CPU = 1000


def nodes(count: int = 2, gpus: int = 8) -> tuple[NodeState, ...]:
    return tuple(
        NodeState(
            f"n{i}",
            f"198.18.0.{i + 1}",
            ResourceVector(64 * CPU, 512 * 1024, gpus),
            tuple(range(gpus)),
            port_range=(20000, 21000),
        )
        for i in range(count)
    )


def vc(name: str, gpu: int, borrow: int | None = None, **kwargs: object) -> VirtualCluster:
    limit = None if borrow is None else ResourceVector(64 * CPU * 4, 4 * 512 * 1024, borrow)
    return VirtualCluster(name, ResourceVector(64 * CPU * 2, 2 * 512 * 1024, gpu), limit, **kwargs)  # type: ignore[arg-type]


def job(
    job_id: str,
    vc_name: str,
    gpu: int,
    at: float,
    priority: int = 10,
    user: str = "u",
    instances: int = 1,
) -> JobRequest:
    role = RoleRequest("w", instances, ResourceVector(CPU, 1024, gpu))
    return JobRequest(job_id, (role,), priority, at, vc_name, user)


def running(
    job_id: str,
    vc_name: str,
    node: str,
    gpus: tuple[int, ...],
    at: float,
    priority: int = 10,
    terminating: bool = False,
    user: str = "u",
) -> TaskAllocation:
    return TaskAllocation(
        job_id,
        "w",
        0,
        node,
        ResourceVector(CPU, 1024, len(gpus)),
        gpus,
        (),
        vc_name,
        priority,
        at,
        user,
        terminating,
    )


def plan_of(
    vcs: list[VirtualCluster],
    queue: list[JobRequest],
    allocations: list[TaskAllocation] | None = None,
    count: int = 2,
) -> Plan:
    snapshot = ClusterSnapshot(nodes(count), tuple(queue), tuple(allocations or ()), tuple(vcs))
    return schedule(snapshot, 0.0)


HALVES = [vc("a", 8), vc("b", 8)]


def test_a_team_borrows_the_idle_half() -> None:
    plan = plan_of(HALVES, [job(f"a{i}", "a", 4, i) for i in range(4)])
    assert sorted(plan.admitted_ids()) == ["a0", "a1", "a2", "a3"]


def test_the_owner_reclaims_borrowed_capacity_newest_first() -> None:
    # a0, a1 are inside a's guarantee on n0; a2, a3 borrow b's half on n1.
    allocations = [
        running("a0", "a", "n0", (0, 1, 2, 3), 0),
        running("a1", "a", "n0", (4, 5, 6, 7), 1),
        running("a2", "a", "n1", (0, 1, 2, 3), 2),
        running("a3", "a", "n1", (4, 5, 6, 7), 3),
    ]
    plan = plan_of(HALVES, [job("b0", "b", 8, 10)], allocations)
    assert [p.victim_job_id for p in plan.preemptions] == ["a3", "a2"]
    assert all(p.for_job_id == "b0" for p in plan.preemptions)
    assert "borrows capacity beyond virtual cluster a's guarantee" in plan.preemptions[0].message
    reason = plan.reason_for("b0")
    assert reason is not None and reason.code is ReasonCode.WAITING_FOR_PREEMPTION


def test_while_victims_stop_nobody_else_takes_their_room() -> None:
    allocations = [
        running("a0", "a", "n0", (0, 1, 2, 3), 0),
        running("a1", "a", "n0", (4, 5, 6, 7), 1),
        running("a2", "a", "n1", (0, 1, 2, 3), 2, terminating=True),
        running("a3", "a", "n1", (4, 5, 6, 7), 3, terminating=True),
    ]
    plan = plan_of(HALVES, [job("b0", "b", 8, 10), job("a4", "a", 4, 11)], allocations)
    assert plan.preemptions == ()  # no second round of victims
    assert plan.reason_for("b0").code is ReasonCode.WAITING_FOR_PREEMPTION  # type: ignore[union-attr]
    assert "a4" not in plan.admitted_ids()


def test_jobs_inside_their_guarantee_are_never_preempted_by_another_vc() -> None:
    allocations = [
        running("a0", "a", "n0", tuple(range(8)), 0),
        running("b0", "b", "n1", tuple(range(8)), 1),
    ]
    plan = plan_of(HALVES, [job("b1", "b", 8, 2)], allocations)
    assert plan.preemptions == ()  # b is past its guarantee: it may only borrow idle capacity
    assert plan.reason_for("b1").code is ReasonCode.NO_IDLE_CAPACITY  # type: ignore[union-attr]


def test_experiments_run_only_while_prod_is_idle() -> None:
    prod_exp = [vc("prod", 16), vc("exp", 0)]  # exp: no guarantee, may borrow any idle capacity
    first = plan_of(prod_exp, [job("e0", "exp", 8, 0), job("e1", "exp", 8, 1)])
    assert sorted(first.admitted_ids()) == ["e0", "e1"]
    allocations = [
        running("e0", "exp", "n0", tuple(range(8)), 0),
        running("e1", "exp", "n1", tuple(range(8)), 1),
    ]
    second = plan_of(prod_exp, [job("p0", "prod", 8, 5)], allocations)
    assert [p.victim_job_id for p in second.preemptions] == ["e1"]  # one victim is enough
    blocked = plan_of(prod_exp, [job("e2", "exp", 8, 6)], allocations)
    assert blocked.reason_for("e2").code is ReasonCode.NO_IDLE_CAPACITY  # type: ignore[union-attr]
    assert blocked.preemptions == ()


def test_oppo_jobs_use_idle_capacity_are_preempted_first_and_never_preempt() -> None:
    allocations = [
        running("o0", "a", "n0", tuple(range(8)), 0, priority=-1),
        running("a1", "a", "n1", (0, 1, 2, 3), 1),
    ]
    plan = plan_of(HALVES, [job("b0", "b", 8, 5)], allocations)
    assert [p.victim_job_id for p in plan.preemptions] == ["o0"]
    assert "oppo" in plan.preemptions[0].message
    oppo = plan_of(HALVES, [job("o1", "b", 8, 5, priority=-1)], allocations)
    assert oppo.preemptions == ()
    assert oppo.reason_for("o1").code is ReasonCode.NO_IDLE_CAPACITY  # type: ignore[union-attr]


def test_higher_class_preempts_lower_inside_its_vc_if_allowed() -> None:
    allocations = [running("t0", "a", "n0", tuple(range(8)), 0, priority=10)]
    queue = [job("p0", "a", 8, 5, priority=100)]
    one_node = [vc("a", 8, borrow=0)]
    plan = schedule(ClusterSnapshot(nodes(1), tuple(queue), tuple(allocations), tuple(one_node)), 0)
    assert [p.victim_job_id for p in plan.preemptions] == ["t0"]
    assert "lower priority" in plan.preemptions[0].message
    no_preempt = [vc("a", 8, borrow=0, preempt_within=False)]
    plan = schedule(
        ClusterSnapshot(nodes(1), tuple(queue), tuple(allocations), tuple(no_preempt)), 0
    )
    assert plan.preemptions == ()
    assert plan.reason_for("p0").code is ReasonCode.OVER_QUOTA  # type: ignore[union-attr]


def test_borrowing_limit_and_user_cap_are_explained() -> None:
    limited = [vc("a", 4, borrow=2), vc("b", 12)]
    # a0 alone would fit (guarantee 4 + limit 2 = 6 GPUs) but a1 already holds 4 of them
    plan = plan_of(limited, [job("a0", "a", 4, 1)], [running("a1", "a", "n0", (0, 1, 2, 3), 0)])
    reason = plan.reason_for("a0")
    assert reason is not None and reason.code is ReasonCode.OVER_QUOTA
    assert "virtual cluster a uses" in reason.message and "borrowing limit" in reason.message
    capped = [vc("a", 16, user_gpu_cap=2), vc("b", 0)]
    plan = plan_of(
        capped,
        [
            job("x0", "a", 2, 0, user="ann"),
            job("x1", "a", 1, 1, user="ann"),
            job("y0", "a", 2, 2, user="bob"),
        ],
    )
    assert sorted(plan.admitted_ids()) == ["x0", "y0"]
    assert plan.reason_for("x1").code is ReasonCode.USER_GPU_CAP  # type: ignore[union-attr]


def test_head_of_a_vc_keeps_a_reservation_and_smaller_jobs_backfill_around_it() -> None:
    # n0 has 2 GPUs busy, n1 has 4 busy: the 8-GPU head waits; it reserves n0 (most free);
    # a later 2-GPU job may not start on n0 (it would delay the head) but may on n1.
    allocations = [running("r0", "a", "n0", (0, 1), 0), running("r1", "a", "n1", (0, 1, 2, 3), 1)]
    queue = [job("head", "a", 8, 5), job("small", "a", 4, 6), job("tiny", "a", 2, 7)]
    plan = plan_of([vc("a", 16)], queue, allocations)
    placed = {a.job_id: a.placements[0].node for a in plan.admissions}
    assert "head" not in placed
    assert all(node == "n1" for node in placed.values())
    assert plan.reason_for("head").code is ReasonCode.INSUFFICIENT_GPU  # type: ignore[union-attr]


def test_queue_positions_are_per_vc() -> None:
    allocations = [
        running("a0", "a", "n0", tuple(range(8)), 0),
        running("b0", "b", "n1", tuple(range(8)), 0),
    ]
    queue = [job("a1", "a", 8, 1), job("b1", "b", 8, 2), job("a2", "a", 8, 3)]
    plan = plan_of(HALVES, queue, allocations)
    positions = {p.job_id: p.position for p in plan.pending}
    assert positions == {"a1": 1, "b1": 1, "a2": 2}


def test_unknown_vc_waits_with_a_reason() -> None:
    plan = plan_of(HALVES, [job("x", "nope", 1, 0)])
    assert plan.reason_for("x").code is ReasonCode.UNKNOWN_VIRTUAL_CLUSTER  # type: ignore[union-attr]


def typed_nodes() -> tuple[NodeState, ...]:
    return tuple(
        NodeState(
            name,
            f"198.18.1.{i + 1}",
            ResourceVector(64 * CPU, 512 * 1024, 8),
            tuple(range(8)),
            gpu_type,
            port_range=(20000, 21000),
        )
        for i, (name, gpu_type) in enumerate([("k0", "K80"), ("m0", "M60")])
    )


def typed_job(job_id: str, vc_name: str, gpu: int, gpu_type: str, at: float) -> JobRequest:
    role = RoleRequest("w", 1, ResourceVector(CPU, 1024, gpu), gpu_type)
    return JobRequest(job_id, (role,), 10, at, vc_name, "u")


def test_per_gpu_type_guarantees() -> None:
    # a: 2 K80s + 6 M60s guaranteed; b: 6 K80s + 2 M60s. A 4-K80 job of a is past a's K80
    # guarantee, so it only borrows idle K80s, and b may take them back (and vice versa).
    guarantee = ResourceVector(64 * CPU, 512 * 1024, 8)
    vcs = (
        VirtualCluster("a", guarantee, None, gpu_by_type=(("K80", 2), ("M60", 6))),
        VirtualCluster("b", guarantee, None, gpu_by_type=(("K80", 6), ("M60", 2))),
    )
    k80_small = typed_job("a-k2", "a", 2, "K80", 0)
    k80_big = typed_job("a-k4", "a", 4, "K80", 1)
    plan = schedule(ClusterSnapshot(typed_nodes(), (k80_small, k80_big), (), vcs), 0)
    assert sorted(plan.admitted_ids()) == ["a-k2", "a-k4"]  # the second on idle capacity
    held = [running("a-k2", "a", "k0", (0, 1), 0), running("a-k4", "a", "k0", (2, 3, 4, 5), 1)]
    b_job = typed_job("b-k6", "b", 6, "K80", 5)
    plan = schedule(ClusterSnapshot(typed_nodes(), (b_job,), tuple(held), vcs), 0)
    assert [p.victim_job_id for p in plan.preemptions] == ["a-k4"]  # a-k2 is inside a's K80s
    # b borrows a's idle M60s; a takes them back with a job inside its M60 guarantee
    running_b = running("b0", "b", "m0", tuple(range(8)), 0)
    m60 = typed_job("a-m6", "a", 6, "M60", 5)
    plan = schedule(ClusterSnapshot(typed_nodes(), (m60,), (running_b,), vcs), 0)
    assert [p.victim_job_id for p in plan.preemptions] == ["b0"]


def test_strict_fifo_vc_does_not_backfill_behind_a_waiting_head() -> None:
    """Kueue's StrictFIFO: a job that would fit still waits behind the VC's blocked head;
    another VC (best-effort FIFO) backfills as usual."""
    busy = running("big-running", "a", "n0", tuple(range(6)), 0.0)
    queue = (
        job("head", "a", 8, 1.0),  # needs a whole node: none is free
        job("small", "a", 1, 2.0),  # would fit on n0 or n1
        job("other", "b", 1, 3.0),
    )
    snapshot = ClusterSnapshot(
        nodes(2, 8),
        queue,
        (busy,),
        (vc("a", 8, borrow=0, strict_fifo=True), vc("b", 8, borrow=0)),
    )
    plan = schedule(snapshot, 10.0)
    assert plan.admitted_ids() == ["other"]
    reason = plan.reason_for("small")
    assert reason is not None and reason.code is ReasonCode.RESERVED_FOR_HEAD
    assert "strict FIFO" in reason.message and "head" in reason.message
    best_effort = ClusterSnapshot(
        nodes(2, 8), queue, (busy,), (vc("a", 8, borrow=0), vc("b", 8, borrow=0))
    )
    assert "small" in schedule(best_effort, 10.0).admitted_ids()
