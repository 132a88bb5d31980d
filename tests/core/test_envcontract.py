"""The env contract for a 2-role job (learner x1 with 1 GPU, actor x3) across two nodes.

Layout, derived from the placement rules: two simulated nodes with 4 cpu and 1 GPU each. The
learner (the largest role) goes first, to node-0 (both nodes have one free GPU; the name breaks the
tie). Actors are CPU-only and prefer nodes with no free GPU: node-0 until its 4 cpu are used up
(learner 2 + actor 2), then node-1. So node-0 runs learner[0] and actor[0], node-1 actor[1] and
actor[2]. Ranks follow role order then index: learner[0]=0, actor[0]=1, actor[1]=2, actor[2]=3.
"""

from __future__ import annotations

import dataclasses

import pytest

from shoal.core.envcontract import EnvJob, EnvRole, JobEnvironment
from shoal.core.plan import ReasonCode, TaskPlacement
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot, JobRequest, NodeState, RoleRequest, TaskAllocation
from shoal.planning import dry_run, simulated_nodes
from shoal.spec.model import JobSpec, Resources, TaskRoleSpec

ADDRESSES = {"node-0": "10.1.0.1", "node-1": "10.1.0.2"}
TASKS = [("learner", 0), ("actor", 0), ("actor", 1), ("actor", 2)]
EXPECTED_NODE = {
    ("learner", 0): "node-0",
    ("actor", 0): "node-0",
    ("actor", 1): "node-1",
    ("actor", 2): "node-1",
}
# the job's environment, its placements by (role, index), and the learner's extra port labels
Placed = tuple[JobEnvironment, dict[tuple[str, int], TaskPlacement], dict[str, int]]


def _spec(learner_ports: dict[str, int]) -> JobSpec:
    learner = Resources(cpu_millis=2000, memory_mib=4096, gpu=1, ports=learner_ports, shm_mib=64)
    actor = Resources(cpu_millis=2000, memory_mib=2048, ports={"ssh": 1})
    return JobSpec(
        name="rl-demo",
        roles=(
            TaskRoleSpec(name="learner", instances=1, resources=learner, command="learn"),
            TaskRoleSpec(name="actor", instances=3, resources=actor, command="act"),
        ),
    )


def _nodes() -> list[NodeState]:
    nodes = simulated_nodes(2, cpus=4, memory_mib=16384, gpus=1)
    return [dataclasses.replace(n, address=ADDRESSES[n.name]) for n in nodes]


@pytest.fixture(params=[{}, {"master": 1}], ids=["no-master-port", "master-port"])
def placed(request: pytest.FixtureRequest) -> Placed:
    """The job's environment, its placements by task, and the learner's extra port labels."""
    result = dry_run(_spec(request.param), _nodes(), user="alice", job_id="job-7")
    assert result.environment is not None and result.admission is not None
    by_task = {(p.role, p.index): p for p in result.admission.placements}
    return result.environment, by_task, request.param


def _http(p: TaskPlacement) -> int:
    (port,) = p.port_list("http")
    return port


def test_layout_follows_placement_rules(placed: Placed) -> None:
    _, by_task, _ = placed
    assert {task: p.node for task, p in by_task.items()} == EXPECTED_NODE
    assert by_task[("learner", 0)].gpu_indices == (0,)
    ranges = {n.name: n.port_range for n in _nodes()}
    for p in by_task.values():
        assert p.address == ADDRESSES[p.node]
        low, high = ranges[p.node]
        assert all(low <= port < high for port in p.all_ports())


def test_host_lists(placed: Placed) -> None:
    env_of, by_task, _ = placed
    learner_hosts = f"10.1.0.1:{_http(by_task[('learner', 0)])}"
    actor_hosts = ",".join(
        f"{by_task[('actor', i)].address}:{_http(by_task[('actor', i)])}" for i in range(3)
    )
    assert actor_hosts.startswith("10.1.0.1:") and actor_hosts.count("10.1.0.2:") == 2
    for task in TASKS:
        env = env_of.for_task(*task)
        assert env["SHOAL_LEARNER_HOSTS"] == learner_hosts
        assert env["SHOAL_ACTOR_HOSTS"] == actor_hosts
        assert env["PAI_TASK_ROLE_learner_HOST_LIST"] == learner_hosts
        assert env["PAI_TASK_ROLE_actor_HOST_LIST"] == actor_hosts
        assert env["SHOAL_ACTOR_ADDRESSES"] == "10.1.0.1,10.1.0.2,10.1.0.2"
        assert env["SHOAL_ACTOR_NUM"] == env["PAI_TASK_ROLE_TASK_COUNT_actor"] == "3"
        assert env["SHOAL_LEARNER_NUM"] == env["PAI_TASK_ROLE_TASK_COUNT_learner"] == "1"
        assert env["PAI_TASK_ROLE_LIST"] == env["SHOAL_TASK_ROLES"] == "learner,actor"
        assert env["PAI_TASK_ROLE_COUNT"] == "2"
        assert env["PAI_RESOURCE_learner"] == "1,2,4096,64"
        assert env["PAI_RESOURCE_actor"] == "0,2,2048,0"


def test_per_task_identity(placed: Placed) -> None:
    env_of, by_task, _ = placed
    for role, index in TASKS:
        env = env_of.for_task(role, index)
        me = by_task[(role, index)]
        assert env["PAI_CURRENT_TASK_ROLE_NAME"] == env["SHOAL_TASK_ROLE"] == role
        assert env["PAI_TASK_ROLE_NAME"] == role  # the legacy alias older OpenPAI jobs read
        assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == str(index)
        assert env["PAI_TASK_INDEX"] == env["SHOAL_TASK_INDEX"] == str(index)
        assert env["JOB_NAME"] == env["SHOAL_JOB_NAME"] == "rl-demo"
        assert env["PAI_JOB_NAME"] == "alice~rl-demo"
        assert env["SHOAL_JOB_ID"] == "job-7"
        assert env["COMPONENT_TYPE"] == role
        assert env["COMPONENT_INDEX"] == str(index)
        assert env["SHOAL_NODE_NAME"] == env["NODE_NAME"] == EXPECTED_NODE[(role, index)]
        assert env["SHOAL_HOST_IP"] == env["PAI_CURRENT_CONTAINER_IP"] == me.address
        assert env["SHOAL_PORT"] == env["PAI_CONTAINER_HOST_PORT"] == str(_http(me))


def test_per_task_host_ips_and_port_lists(placed: Placed) -> None:
    env_of, by_task, learner_ports = placed
    env = env_of.for_task("actor", 2)  # any task sees every peer
    for (role, index), p in by_task.items():
        assert env[f"PAI_HOST_IP_{role}_{index}"] == ADDRESSES[EXPECTED_NODE[(role, index)]]
        labels = {"learner": {"http", *learner_ports}, "actor": {"http", "ssh"}}[role]
        assert {label for label, _ in p.ports} == labels
        for label in labels:
            (port,) = p.port_list(label)
            assert env[f"PAI_PORT_LIST_{role}_{index}_{label}"] == str(port)
            assert env[f"PAI_{role}_{index}_{label}_PORT"] == str(port)
    all_ports = [(p.node, port) for p in by_task.values() for port in p.all_ports()]
    assert len(all_ports) == len(set(all_ports))  # no port twice on a node
    own = env_of.for_task("actor", 1)
    assert own["PAI_CONTAINER_SSH_PORT"] == str(by_task[("actor", 1)].port_list("ssh")[0])
    assert own["PAI_CONTAINER_HOST_PORT_LIST"] == (
        f"http:{_http(by_task[('actor', 1)])};ssh:{by_task[('actor', 1)].port_list('ssh')[0]}"
    )


def test_torchrun_variables(placed: Placed) -> None:
    env_of, by_task, learner_ports = placed
    rank0 = by_task[("learner", 0)]
    master_port = rank0.port_list("master")[0] if "master" in learner_ports else _http(rank0)
    envs = {task: env_of.for_task(*task) for task in TASKS}
    for env in envs.values():
        assert env["MASTER_ADDR"] == "10.1.0.1"
        assert env["MASTER_PORT"] == str(master_port)
        assert env["WORLD_SIZE"] == "4"
        assert env["NODE_COUNT"] == "2"
    assert [envs[t]["RANK"] for t in TASKS] == ["0", "1", "2", "3"]
    assert envs[("learner", 0)]["RANK"] == "0"
    for env in envs.values():  # each task is its own torchrun "node"
        assert env["LOCAL_RANK"] == "0" and env["LOCAL_WORLD_SIZE"] == "1"
        assert env["NODE_RANK"] == env["GROUP_RANK"] == env["RANK"]
        assert env["GROUP_WORLD_SIZE"] == env["WORLD_SIZE"]


def _two_gpu_tasks_on_one_node(gpus_per_task: int) -> dict[int, dict[str, str]]:
    node = NodeState("n", "10.3.0.1", ResourceVector(8000, 8192, 4), tuple(range(4)))
    roles = (RoleRequest("worker", 2, ResourceVector(1000, 1024, gpus_per_task)),)
    plan = schedule(ClusterSnapshot((node,), (JobRequest("j", roles),)), now=0.0)
    (admission,) = plan.admissions
    role = EnvRole("worker", 2, 1000, 1024, gpus_per_task)
    job = EnvJob("j", "ddp", "bob", "default", (role,))
    environment = JobEnvironment(job, admission.placements)
    return {i: environment.for_task("worker", i) for i in (0, 1)}


@pytest.mark.parametrize(
    ("gpus_per_task", "visible", "ranks"),
    [
        (1, {0: "0", 1: "1"}, {0: "0", 1: "1"}),
        (2, {0: "0,1", 1: "2,3"}, {0: "0", 1: "1"}),
        (0, {0: "", 1: ""}, {0: "0", 1: "1"}),
    ],
    ids=["1-gpu-each", "2-gpus-each", "cpu-only"],
)
def test_local_rank_is_valid_in_each_tasks_visible_set(
    gpus_per_task: int, visible: dict[int, str], ranks: dict[int, str]
) -> None:
    # two tasks on one node: GPU isolation renumbers each task's devices from 0, so
    # torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) must name an index < its GPU count
    envs = _two_gpu_tasks_on_one_node(gpus_per_task)
    for index, env in envs.items():
        assert env["CUDA_VISIBLE_DEVICES"] == visible[index]
        assert env["RANK"] == env["NODE_RANK"] == ranks[index]
        assert env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "1"
        local_rank = int(env["LOCAL_RANK"])
        assert local_rank == 0
        if gpus_per_task:
            assert local_rank < len(env["CUDA_VISIBLE_DEVICES"].split(","))


def test_visible_devices(placed: Placed) -> None:
    env_of, _, _ = placed
    learner = env_of.for_task("learner", 0)
    assert learner["CUDA_VISIBLE_DEVICES"] == learner["NVIDIA_VISIBLE_DEVICES"] == "0"
    assert learner["SHOAL_GPU_COUNT"] == "1"
    for index in range(3):
        actor = env_of.for_task("actor", index)
        assert actor["CUDA_VISIBLE_DEVICES"] == ""
        assert actor["NVIDIA_VISIBLE_DEVICES"] == "none"
        assert actor["SHOAL_GPU_COUNT"] == "0"


def test_hostfile(placed: Placed) -> None:
    env_of, _, _ = placed
    assert env_of.hostfile() == "10.1.0.1 slots=2\n10.1.0.2 slots=2\n"


def test_visible_devices_are_exactly_the_granted_gpus() -> None:
    # GPUs 0, 1, 3 and 5 are busy: a 2-GPU learner can only get 2 and 4 (listed in that order)
    node = NodeState("n", "10.2.0.1", ResourceVector(8000, 8192, 6), tuple(range(6)))
    busy = TaskAllocation("other", "w", 0, "n", ResourceVector(0, 0, 4), (0, 1, 3, 5))
    roles = (RoleRequest("learner", 1, ResourceVector(1000, 1024, 2)),)
    plan = schedule(ClusterSnapshot((node,), (JobRequest("j", roles),), (busy,)), now=0.0)
    (admission,) = plan.admissions
    env_job = EnvJob("j", "gpus", "bob", "default", (EnvRole("learner", 1, 1000, 1024, 2),))
    env = JobEnvironment(env_job, admission.placements).for_task("learner", 0)
    assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"] == "2,4"


def test_simulated_nodes_on_one_machine_give_distinct_endpoints() -> None:
    # all simulated nodes share 127.0.0.1; their disjoint port ranges keep endpoints apart
    result = dry_run(_spec({}), simulated_nodes(2, cpus=4, memory_mib=16384, gpus=1), job_id="j")
    assert result.environment is not None
    hosts = result.environment.for_task("actor", 0)["SHOAL_ACTOR_HOSTS"].split(",")
    assert len(hosts) == len(set(hosts)) == 3
    assert all(h.startswith("127.0.0.1:") for h in hosts)
    assert result.environment.hostfile() == "127.0.0.1 slots=4\n"  # one line per host address


def test_dry_run_without_room_has_no_environment() -> None:
    result = dry_run(_spec({}), simulated_nodes(1, cpus=4, memory_mib=16384, gpus=0), job_id="j")
    assert result.admission is None and result.environment is None
    reason = result.plan.reason_for("j")
    assert reason is not None and reason.code is ReasonCode.NEVER_FITS
