"""Pools built from shared states (core/poolstate.py) equal pools built from scratch, whatever
the sequence of allocation sets: appended, removed, re-added, overlapping or duplicated."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core import poolstate
from shoal.core.placement import NodePool
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import JobRequest, NodeState, RoleRequest, TaskAllocation

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ("a", "b", "c", "d", "e", "f", "g", "gone")  # "gone": allocations on a node that has left


def _nodes(count: int) -> tuple[NodeState, ...]:
    return tuple(
        NodeState(
            name=NAMES[i],
            address=f"10.0.0.{i}",
            capacity=ResourceVector(8000, 8192, 8 if i % 2 == 0 else 4),
            gpu_indices=tuple(range(8)) if i % 2 == 0 else (1, 3, 5, 7),
            gpu_type="a100",
            port_range=(100, 116),
            reserved_ports=frozenset({101}) if i == 1 else frozenset(),
            schedulable=i != 2,
        )
        for i in range(count)
    )


ALLOCATION = st.builds(
    lambda job, node, gpus, ports, cpu: TaskAllocation(
        f"j{job}", "r", 0, node, ResourceVector(cpu, 512, len(gpus)), gpus, ports
    ),
    st.integers(0, 14),
    st.sampled_from(NAMES),
    st.sampled_from(((), (0,), (1,), (2, 3), (4, 5, 6, 7), (6,), (1, 1), (9,))),  # last 2: bad
    st.sampled_from(((), (100,), (101,), (102, 103), (104,), (105, 106), (200,))),
    st.sampled_from((1000, 2000, 4000)),
)


def _fields(pool: NodePool) -> tuple[object, ...]:
    return (
        pool.free_cpu,
        pool.free_memory,
        pool.free_gpus,
        pool.used_ports,
        [pool.free_ports(i) for i in range(len(pool.nodes))],
        pool.buckets,
        pool.cursor,
    )


@pytest.mark.parametrize("rebase_after", [poolstate.REBASE_AFTER, 0])
def test_pools_from_shared_states_equal_pools_built_from_scratch(rebase_after: int) -> None:
    default = poolstate.REBASE_AFTER
    poolstate.REBASE_AFTER = rebase_after  # 0: every difference becomes the next base
    try:
        _compare_sequences()
    finally:
        poolstate.REBASE_AFTER = default


@PROPERTY
@given(st.integers(1, 7), st.lists(ALLOCATION, max_size=20), st.data())
def _compare_sequences(node_count: int, first: list[TaskAllocation], data: st.DataObject) -> None:
    nodes = _nodes(node_count)
    current = list(first)
    for _ in range(6):
        shared = NodePool(nodes, current)  # a tuple of nodes: states are shared
        scratch = NodePool(list(nodes), current)  # a list: always built from scratch
        assert _fields(shared) == _fields(scratch)
        step = data.draw(st.sampled_from(("append", "remove", "both", "same", "shuffle")))
        if step in ("remove", "both") and current:
            drop = data.draw(st.sets(st.integers(0, len(current) - 1), max_size=3))
            current = [a for k, a in enumerate(current) if k not in drop]
        if step in ("append", "both"):
            current = current + data.draw(st.lists(ALLOCATION, max_size=4))
        if step == "shuffle":
            current = data.draw(st.permutations(current))


@PROPERTY
@given(st.lists(ALLOCATION, max_size=10), st.integers(1, 3), st.integers(0, 2))
def test_remembered_trial_placements_equal_fresh_ones(
    allocations: list[TaskAllocation], instances: int, gpus: int
) -> None:
    nodes = _nodes(4)
    job = JobRequest("x", (RoleRequest("w", instances, ResourceVector(2000, 1024, gpus)),))
    first = NodePool(nodes, allocations).place_job(job, commit=False)
    again = NodePool(nodes, allocations).place_job(job, commit=False)  # remembered
    fresh = NodePool(list(nodes), allocations).place_job(job, commit=False)
    assert first == again == fresh
    pool = NodePool(nodes, allocations)
    committed = pool.place_job(job)
    assert committed == fresh
    if isinstance(committed, list):  # once a pool has changed, trials are its own again
        after = pool.place_job(job, commit=False)
        scratch = NodePool(list(nodes), allocations)
        scratch.place_job(job)
        assert after == scratch.place_job(job, commit=False)


@PROPERTY
@given(st.integers(1, 7), st.lists(ALLOCATION, min_size=12, max_size=30), st.data())
def test_small_differences_from_a_base_equal_builds_from_scratch(
    node_count: int, base: list[TaskAllocation], data: st.DataObject
) -> None:
    nodes = _nodes(node_count)
    NodePool(nodes, base)  # the base of the differences below
    for _ in range(5):
        drop = data.draw(st.sets(st.integers(0, len(base) - 1), min_size=1, max_size=3))
        kept = [a for k, a in enumerate(base) if k not in drop]
        wanted = kept + data.draw(st.lists(ALLOCATION, max_size=2))
        assert _fields(NodePool(nodes, wanted)) == _fields(NodePool(list(nodes), wanted))
