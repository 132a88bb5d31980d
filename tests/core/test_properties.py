"""Properties of ``schedule`` over random clusters, running tasks and queues (see strategies.py)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.envcontract import EnvJob, EnvRole, JobEnvironment
from shoal.core.feasibility import could_fit
from shoal.core.placement import NodePool, PlacementFailure
from shoal.core.plan import Plan, ReasonCode, TaskPlacement
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot, JobRequest, NodeState, RoleRequest
from tests.core.strategies import snapshots

# ~120 examples per property keeps this file well under a minute on two cores (about 35 s).
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNBOUNDED = 10**9


def _plan(snapshot: ClusterSnapshot) -> Plan:
    return schedule(snapshot, now=0.0)


def _placements_by_node(plan: Plan) -> dict[str, list[TaskPlacement]]:
    by_node: dict[str, list[TaskPlacement]] = defaultdict(list)
    for admission in plan.admissions:
        for p in admission.placements:
            by_node[p.node].append(p)
    return by_node


def _queue_key(job: JobRequest) -> tuple[int, float, str]:
    return (-job.priority, job.submitted_at, job.job_id)


def _port_count(role: RoleRequest) -> int:
    return sum(count for _, count in role.ports)


@PROPERTY
@given(snapshots())
def test_a_no_node_is_over_allocated(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot)
    jobs = {j.job_id: j for j in snapshot.queue}
    used: dict[str, ResourceVector] = defaultdict(ResourceVector)
    for alloc in snapshot.allocations:
        used[alloc.node] = used[alloc.node] + alloc.resources
    for admission in plan.admissions:
        roles = {r.name: r for r in jobs[admission.job_id].roles}
        for p in admission.placements:
            assert p.resources == roles[p.role].per_instance
            assert len(p.gpu_indices) == p.resources.gpu
            used[p.node] = used[p.node] + p.resources
    for node in snapshot.nodes:
        assert used[node.name].fits_in(node.capacity), (node, used[node.name])


@PROPERTY
@given(snapshots())
def test_b_no_gpu_is_given_twice(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot)
    held: dict[str, set[int]] = defaultdict(set)
    for alloc in snapshot.allocations:
        held[alloc.node].update(alloc.gpu_indices)
    by_node = _placements_by_node(plan)
    for node in snapshot.nodes:
        given_gpus = [g for p in by_node[node.name] for g in p.gpu_indices]
        assert len(given_gpus) == len(set(given_gpus))
        assert set(given_gpus) <= set(node.gpu_indices) - held[node.name]


@PROPERTY
@given(snapshots())
def test_c_ports_are_unique_in_range_and_not_reserved(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot)
    jobs = {j.job_id: j for j in snapshot.queue}
    held: dict[str, set[int]] = defaultdict(set)
    for alloc in snapshot.allocations:
        held[alloc.node].update(alloc.ports)
    for admission in plan.admissions:
        roles = {r.name: r for r in jobs[admission.job_id].roles}
        for p in admission.placements:  # exactly the labels and counts the role asked for
            assert [(label, len(ports)) for label, ports in p.ports] == list(roles[p.role].ports)
    by_node = _placements_by_node(plan)
    for node in snapshot.nodes:
        low, high = node.port_range
        given_ports = [port for p in by_node[node.name] for port in p.all_ports()]
        assert len(given_ports) == len(set(given_ports))
        for port in given_ports:
            assert low <= port < high
            assert port not in node.reserved_ports
            assert port not in held[node.name]


@PROPERTY
@given(snapshots())
def test_d_gangs_are_all_or_nothing_and_every_job_is_accounted_for(
    snapshot: ClusterSnapshot,
) -> None:
    plan = _plan(snapshot)
    jobs = {j.job_id: j for j in snapshot.queue}
    outcomes = Counter(
        [a.job_id for a in plan.admissions]
        + [p.job_id for p in plan.pending]
        + [i.job_id for i in plan.infeasible]
    )
    assert outcomes == Counter(j.job_id for j in snapshot.queue)  # each job once, nothing else
    for admission in plan.admissions:
        job = jobs[admission.job_id]
        tasks = [(p.role, p.index) for p in admission.placements]
        assert len(tasks) == job.task_count
        assert set(tasks) == {(r.name, i) for r in job.roles for i in range(r.instances)}
    # every list follows queue order; pending positions count 1..n
    for listed in (plan.admitted_ids(), [p.job_id for p in plan.pending]):
        assert listed == sorted(listed, key=lambda job_id: _queue_key(jobs[job_id]))
    assert [p.position for p in plan.pending] == list(range(1, len(plan.pending) + 1))
    assert all(i.reason.code is ReasonCode.NEVER_FITS for i in plan.infeasible)
    assert all(p.reason.code is not ReasonCode.NEVER_FITS for p in plan.pending)
    if not any(n.schedulable for n in snapshot.nodes):
        assert not plan.admissions and not plan.infeasible
        assert {p.reason.code for p in plan.pending} == {ReasonCode.NO_SCHEDULABLE_NODES}


@PROPERTY
@given(snapshots(), st.randoms(use_true_random=False))
def test_e_plans_are_deterministic_and_order_free(
    snapshot: ClusterSnapshot, rnd: random.Random
) -> None:
    plan = _plan(snapshot)
    assert _plan(snapshot) == plan

    def shuffled(items: tuple) -> tuple:  # type: ignore[type-arg]
        return tuple(rnd.sample(items, len(items)))

    permuted = ClusterSnapshot(
        shuffled(snapshot.nodes), shuffled(snapshot.queue), shuffled(snapshot.allocations)
    )
    assert _plan(permuted) == plan


def _endpoint(node: NodeState, role: RoleRequest, p: TaskPlacement) -> str:
    # strategies give every role with ports an "http" label; a role without ports is reached
    # at its bare address
    return f"{node.address}:{p.port_list('http')[0]}" if role.ports else node.address


@PROPERTY
@given(snapshots())
def test_f_environment_host_lists_match_placements(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot)
    jobs = {j.job_id: j for j in snapshot.queue}
    nodes = {n.name: n for n in snapshot.nodes}
    for admission in plan.admissions:
        job = jobs[admission.job_id]
        env_roles = tuple(
            EnvRole(
                r.name,
                r.instances,
                r.per_instance.cpu_millis,
                r.per_instance.memory_mib,
                r.per_instance.gpu,
            )
            for r in job.roles
        )
        env = JobEnvironment(
            EnvJob(job.job_id, "job", "user", "default", env_roles), admission.placements
        )
        ranks = set()
        for role in job.roles:
            mine = sorted(
                (p for p in admission.placements if p.role == role.name), key=lambda p: p.index
            )
            hosts = ",".join(_endpoint(nodes[p.node], role, p) for p in mine)
            for p in mine:
                task_env = env.for_task(role.name, p.index)
                assert task_env[f"SHOAL_{role.name.upper()}_HOSTS"] == hosts
                assert task_env[f"PAI_TASK_ROLE_{role.name}_HOST_LIST"] == hosts
                assert task_env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, p.gpu_indices))
                assert task_env["WORLD_SIZE"] == str(job.task_count)
                ranks.add(int(task_env["RANK"]))
        assert ranks == set(range(job.task_count))


@PROPERTY
@given(snapshots())
def test_g_placements_respect_gpu_type_and_cordons(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot)
    jobs = {j.job_id: j for j in snapshot.queue}
    nodes = {n.name: n for n in snapshot.nodes}
    for admission in plan.admissions:
        roles = {r.name: r for r in jobs[admission.job_id].roles}
        for p in admission.placements:
            node, role = nodes[p.node], roles[p.role]
            assert node.schedulable
            assert p.address == node.address
            if role.per_instance.gpu and role.gpu_type is not None:
                assert node.gpu_type == role.gpu_type


@dataclass
class _Free:
    """What a node has free for a task shape: cpu, memory, GPU count, port count."""

    node: NodeState
    cpu: int
    memory: int
    gpus: int
    ports: int

    @classmethod
    def idle(cls, node: NodeState) -> _Free:
        low, high = node.port_range
        reserved = sum(1 for p in node.reserved_ports if low <= p < high)
        c = node.capacity
        return cls(node, c.cpu_millis, c.memory_mib, c.gpu, high - low - reserved)

    def take(self, resources: ResourceVector, ports: int) -> None:
        self.cpu -= resources.cpu_millis
        self.memory -= resources.memory_mib
        self.gpus -= resources.gpu
        self.ports -= ports

    def copies(self, role: RoleRequest) -> int:
        """How many instances of ``role`` fit here: exact, as every dimension is a plain count."""
        need = role.per_instance
        if need.gpu and role.gpu_type is not None and self.node.gpu_type != role.gpu_type:
            return 0
        wanted = (
            (self.cpu, need.cpu_millis),
            (self.memory, need.memory_mib),
            (self.gpus, need.gpu),
            (self.ports, _port_count(role)),
        )
        return min((have // want for have, want in wanted if want), default=UNBOUNDED)


@PROPERTY
@given(snapshots())
def test_h_infeasible_jobs_really_cannot_fit(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot)
    jobs = {j.job_id: j for j in snapshot.queue}
    verdicts = {i.job_id for i in plan.infeasible}
    for job_id in verdicts:
        idle = NodePool(snapshot.nodes, include_unschedulable=True)
        assert isinstance(idle.place_job(jobs[job_id], commit=False), PlacementFailure)
        # nor does any other packing: the exhaustive search must not know of a placement
        assert could_fit(snapshot.nodes, jobs[job_id]) is not True
    for pending in plan.pending:  # waiting jobs could run on the idle cluster
        if pending.reason.code is not ReasonCode.NO_SCHEDULABLE_NODES:
            idle = NodePool(snapshot.nodes, include_unschedulable=True)
            job = jobs[pending.job_id]
            if isinstance(idle.place_job(job, commit=False), PlacementFailure):
                # greedy packing is inexact for mixed roles: such a job may only wait when the
                # exhaustive search found a placement or could not decide in its budget
                assert len(job.roles) > 1
                assert could_fit(snapshot.nodes, job) is not False
    if not any(n.schedulable for n in snapshot.nodes):
        return
    # For a one-role job the verdict can be checked exactly, without NodePool: identical tasks fit
    # iff the idle nodes (cordoned ones included) hold enough copies between them.
    for job in snapshot.queue:
        if len(job.roles) == 1:
            (role,) = job.roles
            room = sum(_Free.idle(n).copies(role) for n in snapshot.nodes)
            assert (job.job_id in verdicts) == (room < role.instances), (job, room)


@PROPERTY
@given(snapshots())
def test_i_one_role_jobs_wait_only_when_they_do_not_fit(snapshot: ClusterSnapshot) -> None:
    """Best-effort FIFO, checked exactly for one-role jobs: replaying the plan in queue order, a
    one-role job waits iff the schedulable nodes, as left by the jobs before it, lack room."""
    plan = _plan(snapshot)
    if not any(n.schedulable for n in snapshot.nodes):
        return
    free = {n.name: _Free.idle(n) for n in snapshot.nodes if n.schedulable}
    for alloc in snapshot.allocations:
        if alloc.node in free:
            node = free[alloc.node].node
            low, high = node.port_range
            in_range = sum(1 for p in alloc.ports if low <= p < high)
            free[alloc.node].take(alloc.resources, in_range)
    admitted = {a.job_id: a for a in plan.admissions}
    waiting = {p.job_id for p in plan.pending}
    for job in sorted(snapshot.queue, key=_queue_key):
        if len(job.roles) == 1 and job.job_id in admitted.keys() | waiting:
            room = sum(f.copies(job.roles[0]) for f in free.values())
            assert (job.job_id in waiting) == (room < job.roles[0].instances), (job, room)
        for p in admitted[job.job_id].placements if job.job_id in admitted else ():
            free[p.node].take(p.resources, len(p.all_ports()))
