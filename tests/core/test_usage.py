"""The incremental quota-usage sums equal a recount, whatever sequence of task sets comes in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.core.quota import memo_running_jobs, running_jobs
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import NodeState, TaskAllocation
from shoal.core.usage import Usage, UsageMemo, node_gpu_types, usage_of

NODES = tuple(
    NodeState(
        f"n{i}",
        f"198.18.0.{i + 1}",
        ResourceVector(64_000, 65_536, 8),
        tuple(range(8)),
        "A100" if i % 2 else None,
    )
    for i in range(4)
)
OTHER_NODES = NODES[:2]

task = st.builds(
    lambda n, vc, user, gpu, cpu, priority, stopping: TaskAllocation(
        f"j{n}",
        "w",
        0,
        f"n{n % 4}",
        ResourceVector(cpu, 1024, gpu),
        tuple(range(gpu)),
        (),
        vc,
        priority,
        0.0,
        user,
        stopping,
    ),
    st.integers(0, 30),
    st.sampled_from(["a", "b"]),
    st.sampled_from(["u", "v"]),
    st.integers(0, 4),
    st.integers(0, 4000),
    st.sampled_from([-1, 10, 100]),
    st.booleans(),
)


def recount(nodes: tuple[NodeState, ...], tasks: tuple[TaskAllocation, ...]) -> Usage:
    usage = Usage()
    for alloc in tasks:
        usage.count(alloc, node_gpu_types(nodes), 1)
    return usage


def normal(usage: Usage) -> tuple[object, ...]:
    def nonzero(d: dict) -> dict:  # a key that went back to zero equals one never counted
        return {k: v for k, v in d.items() if v}

    return (
        {vc: sums for vc, sums in usage.by_vc.items() if any(sums)},
        nonzero(usage.user_gpus),
        nonzero(usage.typed),
        {key: sums for key, sums in usage.by_priority.items() if any(sums)},
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(task, max_size=12), st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_incremental_sums_equal_a_recount(
    steps: list[tuple[list[TaskAllocation], int, bool]],
) -> None:
    current: list[TaskAllocation] = []
    memo = UsageMemo()  # kept across the steps, as a SchedulerCache keeps it across cycles
    for new_tasks, drop, other_nodes in steps:
        current = current[drop:] + new_tasks  # some tasks stop, some start (same objects kept)
        nodes = OTHER_NODES if other_nodes else NODES
        snapshot = tuple(current)
        assert normal(usage_of(nodes, snapshot, memo)) == normal(recount(nodes, snapshot))
        assert normal(usage_of(nodes, snapshot)) == normal(recount(nodes, snapshot))
        # the running jobs regrouped from the memo equal a grouping from scratch
        kept = memo_running_jobs(memo, node_gpu_types(nodes, memo))
        fresh = running_jobs(snapshot, node_gpu_types(nodes))
        assert sorted((j.job_id, j.usage) for j in kept) == sorted(
            (j.job_id, j.usage) for j in fresh
        )
