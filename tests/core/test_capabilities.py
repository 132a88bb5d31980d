"""What a node reported it cannot do is a placement filter: a role that needs the container runtime
is never placed on a node whose agent said it cannot run containers; the pending reason says which
nodes cannot and why; and when no node of the cluster can, the job is infeasible (``NeverFits``),
as a job larger than the cluster is (issue #24 item 4)."""

from __future__ import annotations

from shoal.core.feasibility import could_fit
from shoal.core.placement import NodePool, PlacementFailure
from shoal.core.plan import ReasonCode
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import (
    CONTAINER,
    ClusterSnapshot,
    JobRequest,
    NodeState,
    RoleRequest,
    TaskAllocation,
)

NO_PODMAN = ((CONTAINER, "podman is not installed on this node"),)


def node(name: str, cpus: int = 4, unsupported: tuple[tuple[str, str], ...] = ()) -> NodeState:
    return NodeState(
        name=name,
        address=f"198.18.0.{name[-1]}",
        capacity=ResourceVector(cpus * 1000, 8192, 0),
        unsupported=unsupported,
    )


def job(job_id: str, instances: int = 1, cpus: int = 1, container: bool = True) -> JobRequest:
    needs = frozenset({CONTAINER}) if container else frozenset()
    role = RoleRequest("main", instances, ResourceVector(cpus * 1000, 256, 0), needs=needs)
    return JobRequest(job_id, (role,), submitted_at=float(job_id[-1]))


def test_container_tasks_go_only_to_nodes_that_can_run_containers() -> None:
    # n1 sorts first and is otherwise the better fit (best fit, then name): without the filter,
    # every task below would go there
    nodes = (node("n1", unsupported=NO_PODMAN), node("n2"))
    plan = schedule(ClusterSnapshot(nodes, (job("j1", instances=3),)), now=0.0)
    (admission,) = plan.admissions
    assert {p.node for p in admission.placements} == {"n2"}
    # a process job still uses the node that cannot run containers
    plan = schedule(ClusterSnapshot(nodes, (job("j2", container=False),)), now=0.0)
    assert [p.node for p in plan.admissions[0].placements] == ["n1"]


def test_a_node_that_cannot_run_containers_adds_no_room_for_them() -> None:
    nodes = (node("n1", unsupported=NO_PODMAN), node("n2", cpus=2))
    pool = NodePool(nodes)
    role = job("j1").roles[0]
    assert pool.capacity_count(role) == 2  # n2's 2 cpus; n1's 4 do not count
    assert isinstance(pool.place_job(job("j1", instances=3), commit=False), PlacementFailure)
    two_roles = JobRequest(
        "j3",
        (
            RoleRequest("a", 1, ResourceVector(1000, 64, 0), needs=frozenset({CONTAINER})),
            RoleRequest("b", 2, ResourceVector(1000, 64, 0), needs=frozenset({CONTAINER})),
        ),
    )
    assert could_fit(nodes, two_roles) is False
    assert could_fit((*nodes, node("n3")), two_roles) is True


def test_why_a_container_job_waits_names_the_nodes_that_cannot_run_it() -> None:
    nodes = (
        node("n1", unsupported=NO_PODMAN),
        node("n2", unsupported=NO_PODMAN),
        node("n3", cpus=1),
    )
    busy = TaskAllocation("other", "main", 0, "n3", ResourceVector(1000, 256, 0))
    plan = schedule(ClusterSnapshot(nodes, (job("j1"),), (busy,)), now=0.0)
    assert not plan.admissions and not plan.infeasible
    reason = plan.pending[0].reason
    assert reason.code is ReasonCode.INSUFFICIENT_CPU
    assert "main[0] needs 1 cpu; the most free is 0 on n3" in reason.message
    assert "2 nodes cannot run containers: podman is not installed on this node (n1, n2)" in (
        reason.message
    )


def test_container_job_waits_with_its_own_code_while_only_cordoned_nodes_can_run_it() -> None:
    cordoned = NodeState("n3", "198.18.0.3", ResourceVector(4000, 8192, 0), schedulable=False)
    nodes = (node("n1", unsupported=NO_PODMAN), node("n2", unsupported=NO_PODMAN), cordoned)
    plan = schedule(ClusterSnapshot(nodes, (job("j1"),)), now=0.0)
    assert not plan.infeasible  # n3 may come back
    reason = plan.pending[0].reason
    assert reason.code is ReasonCode.UNSUPPORTED_BY_NODES
    assert reason.message == (
        "main[0] runs in a container; no schedulable node can run it: 2 nodes cannot run "
        "containers: podman is not installed on this node (n1, n2)"
    )


def test_a_container_job_no_node_can_ever_run_is_infeasible() -> None:
    nodes = (node("n1", unsupported=NO_PODMAN), node("n2", unsupported=NO_PODMAN))
    plan = schedule(ClusterSnapshot(nodes, (job("j1"), job("j2", container=False))), now=0.0)
    assert plan.admitted_ids() == ["j2"]
    (infeasible,) = plan.infeasible
    assert infeasible.job_id == "j1"
    assert infeasible.reason.code is ReasonCode.NEVER_FITS
    assert "2 nodes cannot run containers: podman is not installed" in infeasible.reason.message


def test_a_gang_that_fits_only_partly_says_which_nodes_cannot_run_it() -> None:
    nodes = (node("n1", unsupported=NO_PODMAN), node("n2", cpus=2), node("n3", cpus=2))
    busy = TaskAllocation("other", "main", 0, "n3", ResourceVector(1000, 256, 0))
    plan = schedule(ClusterSnapshot(nodes, (job("j1", instances=4),), (busy,)), now=0.0)
    reason = plan.pending[0].reason
    assert reason.code is ReasonCode.GANG_DOES_NOT_FIT
    assert "1 node cannot run containers: podman is not installed on this node (n1)" in (
        reason.message
    )
