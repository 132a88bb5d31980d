"""``job why``'s blockers (shoal.core.why): the running jobs a waiting job waits for. A job that
fits the nodes but not its VC's quota waits for jobs of its own VC, and says which (the newcomer
walk of issue 25 found ``blockers: []`` for an OverQuota job)."""

from __future__ import annotations

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import (
    ClusterSnapshot,
    JobRequest,
    NodeState,
    RoleRequest,
    TaskAllocation,
    VirtualCluster,
)
from shoal.core.why import blocking_jobs

TEAM = VirtualCluster("team", ResourceVector(8000, 16384, 2), borrow_limit=ResourceVector())
NODES = (NodeState("n1", "198.18.0.1", ResourceVector(8000, 16384, 4), gpu_indices=(0, 1, 2, 3)),)


def _job(job_id: str, gpus: int, vc: str = "team", submitted_at: float = 1.0) -> JobRequest:
    role = RoleRequest("main", 1, ResourceVector(1000, 1024, gpus))
    return JobRequest(job_id, (role,), submitted_at=submitted_at, virtual_cluster=vc)


def _running(job_id: str, gpus: int, vc: str = "team", submitted_at: float = 0.0) -> TaskAllocation:
    return TaskAllocation(
        job_id, "main", 0, "n1", ResourceVector(1000, 1024, gpus), tuple(range(gpus)),
        virtual_cluster=vc, submitted_at=submitted_at,
    )  # fmt: skip


def test_a_job_over_its_vcs_quota_waits_for_its_vcs_own_running_jobs() -> None:
    # the node has 2 GPUs free, but team's 2 GPUs (no borrowing) are taken by its job 1
    held = (_running("1", 2), _running("9", 0, vc="default"))
    snapshot = ClusterSnapshot(NODES, (), held, (TEAM,))
    assert blocking_jobs(snapshot, _job("2", 2)) == ["1"]
    assert blocking_jobs(snapshot, _job("3", 0)) == []  # no GPU: the quota is no bar


def test_the_newest_of_the_vcs_jobs_is_named_first_and_only_as_many_as_needed() -> None:
    held = (_running("1", 1, submitted_at=1.0), _running("2", 1, submitted_at=2.0))
    snapshot = ClusterSnapshot(NODES, (), held, (TEAM,))
    assert blocking_jobs(snapshot, _job("3", 1)) == ["2"]
    assert blocking_jobs(snapshot, _job("4", 2)) == ["2", "1"]
