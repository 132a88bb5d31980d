"""The bounded exhaustive search behind "can this multi-role gang ever fit?"."""

from __future__ import annotations

from shoal.core.feasibility import could_fit
from shoal.core.plan import ReasonCode
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot, JobRequest, NodeState, RoleRequest


def node(name: str, cpu: int, memory: int, gpus: int = 0, ports: int = 100) -> NodeState:
    return NodeState(
        name,
        name,
        ResourceVector(cpu, memory, gpus),
        tuple(range(gpus)),
        port_range=(20000, 20000 + ports),
    )


def role(name: str, instances: int, cpu: int, memory: int, gpu: int = 0) -> RoleRequest:
    return RoleRequest(name, instances, ResourceVector(cpu, memory, gpu))


def test_mixed_roles_that_pack_only_one_way_are_found() -> None:
    # 2 learners (1 cpu, 4 GiB) and 2 actors (3 cpu, 1 GiB) on nodes of (4 cpu, 5 GiB):
    # only learner+actor pairs fit; learners together or actors together do not.
    nodes = [node("a", 4000, 5120), node("b", 4000, 5120)]
    job = JobRequest("j", (role("learner", 2, 1000, 4096), role("actor", 2, 3000, 1024)))
    assert could_fit(nodes, job) is True
    plan = schedule(ClusterSnapshot(tuple(nodes), (job,)), 0.0)
    assert plan.admitted_ids() == ["j"]


def test_a_gang_that_passes_every_total_but_cannot_pack_is_infeasible() -> None:
    # Totals fit (7 tasks, 42 ports, 10 cpu), each role alone fits, yet no packing holds all 7:
    # node a takes at most 2 tasks (2 ports), node aa at most 4 (2 cpu, 2 GiB).
    nodes = [node("a", 8000, 32768, ports=2), node("aa", 2000, 2048, ports=40)]
    job = JobRequest("j", (role("learner", 5, 500, 512), role("actor", 2, 1000, 1024)))
    assert could_fit(nodes, job) is False
    plan = schedule(ClusterSnapshot(tuple(nodes), (job,)), 0.0)
    assert [i.job_id for i in plan.infeasible] == ["j"]
    assert plan.infeasible[0].reason.code is ReasonCode.NEVER_FITS


def test_the_search_says_unknown_when_out_of_budget() -> None:
    nodes = [node(f"n{i}", 1000 + i, 1000 + i) for i in range(12)]
    job = JobRequest("j", (role("a", 6, 500, 500), role("b", 7, 700, 700)))
    assert could_fit(nodes, job, budget=5) is None
