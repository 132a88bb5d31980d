"""Bridge from a user's ``JobSpec`` to what the pure core works with, plus simulated nodes.

Used by the dry-run command (``shoal job plan``) now, and by the server and simulator later, so
all of them size jobs and describe nodes the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shoal.core.envcontract import (
    PRIMARY_PORT_LABEL,
    EnvArray,
    EnvJob,
    EnvRole,
    JobEnvironment,
)
from shoal.core.plan import Admission, Plan
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import CONTAINER, ClusterSnapshot, JobRequest, NodeState, RoleRequest
from shoal.protocol import FIRST_SIMULATED_PORT, PORTS_PER_SIMULATED_NODE
from shoal.spec.model import JobSpec, Runtime, TaskRoleSpec


def role_ports(role: TaskRoleSpec) -> tuple[tuple[str, int], ...]:
    """The role's port labels in a stable order; every task gets a primary ``http`` port."""
    ports = dict(role.resources.ports)
    ports.setdefault(PRIMARY_PORT_LABEL, 1)
    return tuple(sorted(ports.items(), key=lambda item: (item[0] != PRIMARY_PORT_LABEL, item[0])))


def role_needs(spec: JobSpec) -> frozenset[str]:
    """What a node must be able to do for the job's tasks, beyond resources: the container
    runtime for a container job. (A /dev/shm size or a limit a node cannot enforce is not
    needed: the task runs there without it, and its stderr says so.)"""
    return frozenset({CONTAINER}) if spec.runtime is Runtime.CONTAINER else frozenset()


def job_request(
    spec: JobSpec, job_id: str, submitted_at: float = 0.0, virtual_cluster: str | None = None
) -> JobRequest:
    needs = role_needs(spec)
    roles = tuple(
        RoleRequest(
            name=role.name,
            instances=role.instances,
            per_instance=ResourceVector(
                role.resources.cpu_millis, role.resources.memory_mib, role.resources.gpu
            ),
            gpu_type=role.resources.gpu_type,
            ports=role_ports(role),
            needs=needs,
        )
        for role in spec.roles
    )
    return JobRequest(
        job_id=job_id,
        roles=roles,
        priority=spec.priority_class.rank,
        submitted_at=submitted_at,
        virtual_cluster=virtual_cluster or spec.virtual_cluster or "default",
    )


def env_job(
    spec: JobSpec,
    job_id: str,
    user: str,
    virtual_cluster: str | None = None,
    array: EnvArray | None = None,
) -> EnvJob:
    return EnvJob(
        job_id=job_id,
        name=spec.name,
        user=user,
        virtual_cluster=virtual_cluster or spec.virtual_cluster or "default",
        roles=tuple(
            EnvRole(
                name=r.name,
                instances=r.instances,
                cpu_millis=r.resources.cpu_millis,
                memory_mib=r.resources.memory_mib,
                gpu=r.resources.gpu,
                shm_mib=r.resources.shm_mib or 0,
                min_failed=r.completion.min_failed,
                min_succeeded=r.completion.min_succeeded,
            )
            for r in spec.roles
        ),
        array=array,
    )


def simulated_nodes(
    count: int,
    cpus: float,
    memory_mib: int,
    gpus: int,
    address: str = "127.0.0.1",
    gpu_type: str | None = None,
) -> list[NodeState]:
    """``count`` nodes sharing one machine: disjoint port ranges so their tasks never collide."""
    return [
        NodeState(
            name=f"node-{i}",
            address=address,
            capacity=ResourceVector(round(cpus * 1000), memory_mib, gpus),
            gpu_indices=tuple(range(gpus)),
            gpu_type=gpu_type if gpus else None,
            port_range=(
                FIRST_SIMULATED_PORT + i * PORTS_PER_SIMULATED_NODE,
                FIRST_SIMULATED_PORT + (i + 1) * PORTS_PER_SIMULATED_NODE,
            ),
        )
        for i in range(count)
    ]


@dataclass(frozen=True, slots=True)
class DryRun:
    plan: Plan
    admission: Admission | None
    environment: JobEnvironment | None


def dry_run(
    spec: JobSpec, nodes: Sequence[NodeState], user: str = "you", job_id: str = "dry-run"
) -> DryRun:
    """What would happen if ``spec`` were submitted to an idle cluster of ``nodes``."""
    request = job_request(spec, job_id)
    plan = schedule(ClusterSnapshot(tuple(nodes), (request,)), now=0.0)
    if not plan.admissions:
        return DryRun(plan, None, None)
    admission = plan.admissions[0]
    return DryRun(
        plan, admission, JobEnvironment(env_job(spec, job_id, user), admission.placements)
    )
