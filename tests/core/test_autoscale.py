"""``core.autoscale.plan_scaling``: pools grow gang-aware for jobs that wait for room (never for
quota), machines already launching are counted, idle machines are drained after the timeout then
terminated once empty, machines that never join are terminated, and floors hold."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.core.autoscale import (
    CAPACITY_REASONS,
    Phase,
    PoolInstance,
    PoolTemplate,
    PoolWait,
    RemovalCause,
    ScalePlan,
    ScaleUp,
    Step,
    plan_scaling,
)
from shoal.core.plan import ReasonCode
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    RoleRequest,
    TaskAllocation,
)

GPU = PoolTemplate("gpu", ResourceVector(32_000, 262_144, 8), 10.0, 0, 4, 300.0, 600.0)
CAPACITY = ReasonCode.GANG_DOES_NOT_FIT


def gang(job_id: str, tasks: int, gpus: int = 8) -> JobRequest:
    shape = ResourceVector(1000, 1024, gpus)
    return JobRequest(job_id, (RoleRequest("worker", tasks, shape, None, ()),))


def machine(
    index: int,
    phase: Phase = Phase.JOINED,
    launched_at: float = 0.0,
    idle_since: float | None = None,
    pool: PoolTemplate = GPU,
) -> PoolInstance:
    return PoolInstance(f"r{index}", pool.name, f"m{index}", phase, launched_at, idle_since)


def node_of(instance: PoolInstance, template: PoolTemplate = GPU) -> NodeState:
    node = template.node(instance.node)
    return replace(node, schedulable=instance.phase is not Phase.DRAINING)


def busy(node: str, job_id: str = "running") -> TaskAllocation:
    return TaskAllocation(job_id, "worker", 0, node, ResourceVector(1000, 1024, 8), tuple(range(8)))


def plan(
    instances: list[PoolInstance],
    queue: tuple[JobRequest, ...] = (),
    reason: ReasonCode = CAPACITY,
    allocations: tuple[TaskAllocation, ...] = (),
    now: float = 1000.0,
    pools: tuple[PoolTemplate, ...] = (GPU,),
) -> ScalePlan:
    templates = {p.name: p for p in pools}
    registered = tuple(
        node_of(i, templates[i.pool]) for i in instances if i.phase is not Phase.LAUNCHING
    )
    snapshot = ClusterSnapshot(registered, queue, allocations)
    waiting = {job.job_id: reason for job in queue}
    return plan_scaling(snapshot, waiting, pools, instances, now)


def test_a_gang_of_two_grows_an_empty_pool_by_exactly_two() -> None:
    result = plan([], (gang("train", 2),), ReasonCode.NO_SCHEDULABLE_NODES)
    assert result.launches == (ScaleUp("gpu", 2, ("train",)),)
    assert result.waits == (PoolWait("train", "gpu", 2, None),)
    assert result.removals == () and result.unservable == ()


def test_machines_already_launching_are_not_launched_twice() -> None:
    launching = [machine(i, Phase.LAUNCHING, launched_at=900.0) for i in range(2)]
    result = plan(launching, (gang("train", 2),))
    assert result.launches == ()
    assert result.waits == (PoolWait("train", "gpu", 2, 900.0),)
    # a third task needs one more machine only
    result = plan(launching, (gang("train", 3),))
    assert result.launches == (ScaleUp("gpu", 1, ("train",)),)


def test_two_jobs_of_one_pass_get_machines_of_their_own() -> None:
    result = plan([], (gang("a", 2), gang("b", 1)))
    assert result.launches == (ScaleUp("gpu", 3, ("a", "b")),)


def test_a_job_placed_on_what_is_there_takes_that_room_from_later_jobs() -> None:
    idle = [machine(0, idle_since=999.0)]
    result = plan(idle, (gang("a", 1), gang("b", 1), gang("c", 1)))
    assert result.launches == (ScaleUp("gpu", 2, ("b", "c")),)
    assert [w.job_id for w in result.waits] == ["b", "c"]  # "a" fits m0: it waits for no pool


def test_a_job_waiting_for_quota_grows_nothing() -> None:
    for reason in (ReasonCode.OVER_QUOTA, ReasonCode.USER_GPU_CAP, ReasonCode.NO_IDLE_CAPACITY):
        result = plan([], (gang("train", 2),), reason)
        assert result.launches == () and result.waits == () and result.unservable == ()


def test_a_gang_larger_than_the_pool_max_launches_nothing_and_is_unservable() -> None:
    result = plan([], (gang("huge", 5), gang("small", 1)))
    assert result.launches == (ScaleUp("gpu", 1, ("small",)),)  # the small one still grows
    ((job_id, why),) = result.unservable
    assert job_id == "huge" and "pool gpu (4 more machines allowed)" in why


def test_the_cheapest_pool_that_can_hold_the_job_grows() -> None:
    cheap = replace(GPU, name="cheap", price_per_hour=1.0, max_nodes=1)
    result = plan([], (gang("one", 1),), pools=(GPU, cheap))
    assert result.launches == (ScaleUp("cheap", 1, ("one",)),)
    result = plan([], (gang("two", 2),), pools=(GPU, cheap))  # cheap's max is 1
    assert result.launches == (ScaleUp("gpu", 2, ("two",)),)


def test_an_idle_machine_is_marked_then_drained_after_the_timeout_then_terminated() -> None:
    first = plan([machine(0)], now=1000.0)
    assert first.idle_since == {"r0": 1000.0} and first.removals == ()
    early = plan([machine(0, idle_since=1000.0)], now=1299.0)
    assert early.removals == () and early.idle_since == {}
    due = plan([machine(0, idle_since=1000.0)], now=1300.0)
    ((removal),) = due.removals
    assert (removal.request_id, removal.step, removal.cause) == ("r0", Step.DRAIN, "idle")
    drained = plan([machine(0, Phase.DRAINING, idle_since=1000.0)], now=1310.0)
    assert [(r.step, r.cause) for r in drained.removals] == [(Step.TERMINATE, RemovalCause.IDLE)]


def test_a_busy_machine_is_never_idle_nor_removed() -> None:
    result = plan([machine(0, idle_since=0.0)], allocations=(busy("m0"),), now=10_000.0)
    assert result.removals == () and result.idle_since == {"r0": None}
    draining = plan([machine(0, Phase.DRAINING)], allocations=(busy("m0"),), now=10_000.0)
    assert draining.removals == ()  # terminated only once its tasks have left


def test_a_machine_that_never_joins_is_terminated_after_the_join_timeout() -> None:
    late = [machine(0, Phase.LAUNCHING, launched_at=400.0)]
    assert plan(late, now=999.0).removals == ()
    ((removal),) = plan(late, now=1000.0).removals
    assert (removal.step, removal.cause) == (Step.TERMINATE, RemovalCause.JOIN_TIMEOUT)


def test_the_minimum_is_launched_and_kept_even_when_idle() -> None:
    floor = replace(GPU, min_nodes=2)
    assert plan([], pools=(floor,)).launches == (ScaleUp("gpu", 2, ()),)
    idle = [machine(i, idle_since=0.0) for i in range(3)]
    result = plan(idle, pools=(floor,), now=10_000.0)
    assert [r.request_id for r in result.removals] == ["r0"]  # down to 2, no further
    assert result.launches == ()


def test_a_target_is_held_as_the_floor_and_a_lower_one_drains_at_once() -> None:
    target = replace(GPU, target=3)
    assert plan([], pools=(target,)).launches == (ScaleUp("gpu", 3, ()),)
    lowered = replace(GPU, target=1)
    fresh = [machine(i, idle_since=999.0) for i in range(3)]  # idle for 1 s only
    result = plan(fresh, pools=(lowered,), now=1000.0)
    assert [(r.step, r.cause) for r in result.removals] == [(Step.DRAIN, "scale-down")] * 2


def test_an_idle_machine_a_waiting_gang_counts_on_is_not_drained() -> None:
    idle = [machine(0, idle_since=0.0)]
    result = plan(idle, (gang("train", 2),), now=10_000.0)
    assert result.removals == ()
    assert result.launches == (ScaleUp("gpu", 1, ("train",)),)
    assert result.idle_since == {"r0": None}  # not idle: a job counts on it (timer restarts)
    # the same job waiting for quota does not hold the machine
    quota = plan(idle, (gang("train", 2),), ReasonCode.OVER_QUOTA, now=10_000.0)
    assert [r.step for r in quota.removals] == [Step.DRAIN]


# --- properties ------------------------------------------------------------------------------

REASONS = (*sorted(CAPACITY_REASONS), ReasonCode.OVER_QUOTA, ReasonCode.RESERVED_FOR_HEAD)
POOLS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 4), st.sampled_from((0.0, 300.0))),
    min_size=1,
    max_size=2,
).map(
    lambda bounds: tuple(
        replace(
            GPU,
            name=f"p{i}",
            min_nodes=min(low, high),
            max_nodes=high,
            idle_timeout_s=idle,
            price_per_hour=float(i + 1),
        )
        for i, (low, high, idle) in enumerate(bounds)
    )
)
MACHINES = st.lists(
    st.tuples(
        st.integers(0, 1),  # pool index
        st.sampled_from(tuple(Phase)[:3]),  # launching, joined, draining
        st.floats(0, 2000),  # launched at
        st.one_of(st.none(), st.floats(0, 2000)),  # idle since
        st.booleans(),  # holds a task
    ),
    max_size=8,
)
JOBS = st.lists(st.tuples(st.integers(1, 6), st.sampled_from(REASONS)), max_size=5)


def _world(
    pools: tuple[PoolTemplate, ...], machines: list[tuple], jobs: list[tuple]
) -> tuple[list[PoolInstance], ClusterSnapshot, dict[str, ReasonCode]]:  # type: ignore[type-arg]
    instances, allocations = [], []
    for index, (pool_index, phase, launched, idle, holds) in enumerate(machines):
        template = pools[pool_index % len(pools)]
        instance = machine(index, phase, launched, idle, template)
        instances.append(instance)
        if holds and phase is not Phase.LAUNCHING:
            allocations.append(busy(instance.node, f"run{index}"))
    nodes = tuple(
        node_of(i, next(p for p in pools if p.name == i.pool))
        for i in instances
        if i.phase is not Phase.LAUNCHING
    )
    queue = tuple(gang(f"j{i}", tasks) for i, (tasks, _) in enumerate(jobs))
    waiting = {f"j{i}": reason for i, (_, reason) in enumerate(jobs)}
    return instances, ClusterSnapshot(nodes, queue, tuple(allocations)), waiting


@settings(max_examples=300, deadline=None)
@given(POOLS, MACHINES, JOBS, st.floats(0, 5000))
def test_plans_stay_within_bounds(pools, machines, jobs, now) -> None:  # type: ignore[no-untyped-def]
    # a pool's machines never exceed its max, even while draining ones are being replaced
    machines = _within_max(pools, machines)
    instances, snapshot, waiting = _world(pools, machines, jobs)
    result = plan_scaling(snapshot, waiting, pools, instances, now)
    by_id = {i.request_id: i for i in instances}
    busy_nodes = {a.node for a in snapshot.allocations}
    removed = [r.request_id for r in result.removals]
    assert len(removed) == len(set(removed))
    for template in pools:
        mine = [i for i in instances if i.pool == template.name]
        launched = sum(u.count for u in result.launches if u.pool == template.name)
        standing = [i for i in mine if i.phase is not Phase.DRAINING]
        replacing = len(mine) - len(standing)  # draining machines a floor may replace
        assert len(mine) + launched <= max(template.max_nodes, template.floor + replacing)
        drains = [r for r in result.removals if r.pool == template.name and r.step is Step.DRAIN]
        # draining never takes a pool below its floor
        assert len(standing) - len(drains) >= min(template.floor, len(standing))
        if not any(reason in CAPACITY_REASONS for reason in waiting.values()):
            # a queue that waits for quota (or its turn) grows no pool beyond its floor
            assert launched == max(template.floor - len(standing), 0)
    for removal in result.removals:
        instance = by_id[removal.request_id]
        assert removal.node not in busy_nodes  # a node holding a task is never drained/removed
        if removal.step is Step.DRAIN:
            assert instance.phase is Phase.JOINED
        elif instance.phase is Phase.LAUNCHING:
            assert removal.cause is RemovalCause.JOIN_TIMEOUT
            assert now - instance.launched_at >= pools[0].join_timeout_s
        else:
            assert instance.phase is Phase.DRAINING


def _within_max(pools: tuple[PoolTemplate, ...], machines: list[tuple]) -> list[tuple]:  # type: ignore[type-arg]
    kept, count = [], dict.fromkeys(range(len(pools)), 0)
    for entry in machines:
        index = entry[0] % len(pools)
        if count[index] < pools[index].max_nodes:
            count[index] += 1
            kept.append((index, *entry[1:]))
    return kept
