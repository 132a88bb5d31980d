"""The bounded cycle (core/budget.py) against the unbounded one, on small random clusters.

- With a budget that is not spent, a bounded cycle decides exactly what the unbounded one does.
- With a tiny budget, cycles never over-allocate a node, never admit a job its VC's guarantee
  and borrowing limit forbid, and examine every waiting job within the stated bound of cycles.
- A kept ``SchedulerCache`` changes no decision, and two caches do not see each other.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.budget import UNBOUNDED, Budget
from shoal.core.cache import SchedulerCache
from shoal.core.plan import Plan
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot, allocation_for
from tests.core.strategies import snapshots
from tests.core.test_quota_properties import assert_within_guarantee_and_borrowing, quota_snapshots
from tests.core.test_scheduler_table import job, node, role

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TINY = Budget(head_depth=1, backfill_jobs=2, placements=1, what_ifs=1, min_backfill=1)


def any_snapshots() -> st.SearchStrategy[ClusterSnapshot]:
    return st.one_of(snapshots(), quota_snapshots())


def _examined(plan: Plan) -> set[str]:
    ids = {a.job_id for a in plan.admissions} | {p.job_id for p in plan.pending}
    return ids | {i.job_id for i in plan.infeasible}


@PROPERTY
@given(any_snapshots(), st.integers(1, 4), st.integers(0, 3))
def test_a_budget_not_spent_decides_exactly_what_the_unbounded_cycle_does(
    snapshot: ClusterSnapshot, head_depth: int, extra: int
) -> None:
    big = len(snapshot.queue) + extra  # the window covers the whole queue
    budget = Budget(head_depth=head_depth, backfill_jobs=max(big, 1), placements=big + 1)
    bounded = schedule(snapshot, 0.0, budget=dataclasses.replace(budget, what_ifs=10**6))
    unbounded = schedule(snapshot, 0.0)
    assert bounded.stopped_by is None
    assert bounded.admissions == unbounded.admissions
    assert bounded.pending == unbounded.pending  # reasons and queue positions too
    assert bounded.infeasible == unbounded.infeasible
    assert bounded.preemptions == unbounded.preemptions


@PROPERTY
@given(any_snapshots())
def test_a_kept_cache_changes_no_decision(snapshot: ClusterSnapshot) -> None:
    cache, other = SchedulerCache(), SchedulerCache()
    fresh = schedule(snapshot, 0.0)
    assert schedule(snapshot, 0.0, cache=cache) == fresh
    assert schedule(snapshot, 0.0, cache=cache) == fresh  # again, everything kept
    # a different cluster through another cache in between leaves this one's answers alone
    emptier = dataclasses.replace(snapshot, allocations=(), queue=snapshot.queue[:1])
    schedule(emptier, 0.0, cache=other)
    assert schedule(snapshot, 0.0, cache=cache) == fresh


def _run_cycles(
    snapshot: ClusterSnapshot, budget: Budget, cycles: int, compare: bool = False
) -> list[Plan]:
    """Bounded cycles on a cluster where admitted jobs start, victims stop and some jobs end
    (``compare``: each plan must equal a fresh, cache-less call's)."""
    cache = SchedulerCache()
    plans: list[Plan] = []
    resume = None
    for cycle in range(cycles):
        plan = schedule(snapshot, 0.0, cache=cache, budget=budget, resume_from=resume)
        if compare:
            assert plan == schedule(snapshot, 0.0, budget=budget, resume_from=resume)
        plans.append(plan)
        resume = plan.resume_from
        started = {a.job_id for a in plan.admissions} | {i.job_id for i in plan.infeasible}
        queued = {j.job_id: j for j in snapshot.queue}
        held = [allocation_for(queued[a.job_id], p) for a in plan.admissions for p in a.placements]
        victims = {p.victim_job_id for p in plan.preemptions}
        allocations = tuple(
            dataclasses.replace(a, terminating=True) if a.job_id in victims else a
            for a in snapshot.allocations
            if (sum(map(ord, a.job_id)) + cycle) % 4  # about a quarter of the running jobs end
        )
        snapshot = dataclasses.replace(
            snapshot,
            queue=tuple(j for j in snapshot.queue if j.job_id not in started),
            allocations=allocations + tuple(held),
        )
        _check_capacity(snapshot)
    return plans


def _check_capacity(snapshot: ClusterSnapshot) -> None:
    used: dict[str, ResourceVector] = {}
    gpus: dict[str, list[int]] = {}
    for alloc in snapshot.allocations:
        used[alloc.node] = used.get(alloc.node, ResourceVector()) + alloc.resources
        gpus.setdefault(alloc.node, []).extend(alloc.gpu_indices)
    for each in snapshot.nodes:
        assert used.get(each.name, ResourceVector()).fits_in(each.capacity), each.name
        held = gpus.get(each.name, [])
        assert len(held) == len(set(held)), f"a GPU of {each.name} handed out twice"


@PROPERTY
@given(any_snapshots())
def test_tiny_budgets_never_over_allocate(snapshot: ClusterSnapshot) -> None:
    _run_cycles(snapshot, TINY, cycles=6)


@PROPERTY
@given(any_snapshots())
def test_a_cache_kept_across_changing_cycles_changes_no_decision(
    snapshot: ClusterSnapshot,
) -> None:
    _run_cycles(snapshot, UNBOUNDED, cycles=4, compare=True)
    _run_cycles(snapshot, TINY, cycles=4, compare=True)


@PROPERTY
@given(quota_snapshots())
def test_tiny_budgets_never_admit_what_a_guarantee_forbids(snapshot: ClusterSnapshot) -> None:
    plan = schedule(snapshot, 0.0, cache=SchedulerCache(), budget=TINY)
    assert_within_guarantee_and_borrowing(snapshot, plan)


@PROPERTY
@given(any_snapshots(), st.integers(1, 3), st.integers(1, 3))
def test_every_waiting_job_is_examined_within_the_stated_bound(
    snapshot: ClusterSnapshot, backfill: int, min_backfill: int
) -> None:
    """Bound (core/budget.py): ceil(Q / min_backfill) + 1 consecutive cycles, Q the queue."""
    budget = Budget(
        head_depth=1,
        backfill_jobs=max(backfill, min_backfill),
        placements=1,  # spent at once: every cycle stops early
        what_ifs=1,
        min_backfill=min_backfill,
    )
    queue = {j.job_id for j in snapshot.queue}
    bound = math.ceil(len(queue) / min_backfill) + 1
    cache = SchedulerCache()
    resume = None
    plans = []
    for _ in range(2 * bound):  # the queue does not change: nothing is applied
        plan = schedule(snapshot, 0.0, cache=cache, budget=budget, resume_from=resume)
        plans.append(plan)
        resume = plan.resume_from
    for start in range(len(plans) - bound + 1):
        seen = set().union(*(_examined(p) for p in plans[start : start + bound]))
        assert seen == queue, f"cycles {start}..{start + bound - 1} missed {queue - seen}"


def test_an_early_stop_says_why_and_resumes_after_what_it_examined() -> None:
    nodes = tuple(node(f"n{i}", gpus=1) for i in range(3))
    queue = tuple(job(f"j{i}", role(gpu=1), submitted_at=float(i)) for i in range(10))
    snapshot = ClusterSnapshot(nodes, queue)
    budget = Budget(head_depth=1, backfill_jobs=4, placements=2, min_backfill=1)
    plan = schedule(snapshot, 0.0, budget=budget)
    assert plan.stopped_by == "placements"
    assert plan.admitted_ids() == ["j0", "j1"]
    # j0 (head) and j1 (mandatory) examined; the backfill resumes at j2
    assert plan.resume_from == (-10, 2.0, "j2")
    assert plan.examined == 2
    full = schedule(snapshot, 0.0, budget=UNBOUNDED)
    assert full.admitted_ids() == ["j0", "j1", "j2"]


def test_deadline_stops_a_cycle_but_not_before_the_mandatory_jobs() -> None:
    nodes = tuple(node(f"n{i}", gpus=8) for i in range(4))
    queue = tuple(job(f"j{i}", role(gpu=1), submitted_at=float(i)) for i in range(100))
    calls: list[int] = []

    def time_is_up() -> bool:
        calls.append(1)
        return True

    budget = Budget(head_depth=2, backfill_jobs=50, min_backfill=10, deadline=time_is_up)
    plan = schedule(ClusterSnapshot(nodes, queue), 0.0, budget=budget)
    assert plan.stopped_by == "deadline"
    assert plan.examined == 2 + 10  # the heads of the one queue and min_backfill more
    assert len(plan.admissions) == 12
    assert calls == [1]


@pytest.mark.parametrize("bad", ["head_depth", "backfill_jobs", "placements", "min_backfill"])
def test_a_budget_must_allow_some_work(bad: str) -> None:
    with pytest.raises(ValueError, match=bad):
        Budget(**{bad: 0})  # type: ignore[arg-type]
