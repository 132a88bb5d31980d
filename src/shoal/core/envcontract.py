"""The environment every task starts with: where its peers are, who it is, which GPUs are its own.

Four sets of variables, built from the gang's placements (so host lists are complete before any
task starts): shoal's own ``SHOAL_*``, OpenPAI's ``PAI_*``, MARO's (``JOB_NAME``,
``COMPONENT_TYPE``, ...) and torchrun's (``MASTER_ADDR``, ``WORLD_SIZE``, ``RANK``, ...), plus
``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` for exactly the GPUs the task was given.
Reference: docs/architecture.md, "The env contract".

GPU ranks: every task is its own torchrun "node". A task sees only its own GPUs
(``CUDA_VISIBLE_DEVICES``), renumbered from 0 by CUDA, so the only local rank that is valid in
every task is 0: ``LOCAL_RANK=0``, ``LOCAL_WORLD_SIZE=1``, ``NODE_RANK = GROUP_RANK = RANK`` (the
task's rank among all tasks) and ``WORLD_SIZE = GROUP_WORLD_SIZE`` = the number of tasks. A task
with several GPUs runs ``torchrun --nproc-per-node=$SHOAL_GPU_COUNT --nnodes=$WORLD_SIZE
--node-rank=$NODE_RANK``, which then sets the per-process ranks itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shoal.core.plan import TaskPlacement

PRIMARY_PORT_LABEL = "http"
MASTER_PORT_LABEL = "master"


@dataclass(frozen=True, slots=True)
class EnvRole:
    name: str
    instances: int
    cpu_millis: int
    memory_mib: int
    gpu: int
    shm_mib: int = 0
    min_failed: int | None = 1
    min_succeeded: int | None = None


@dataclass(frozen=True, slots=True)
class EnvArray:
    """The element of a job array a job is (docs/arrays.md)."""

    parent_id: str
    index: int
    size: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class EnvJob:
    job_id: str
    name: str
    user: str
    virtual_cluster: str
    roles: tuple[EnvRole, ...]
    array: EnvArray | None = None


def primary_port(placement: TaskPlacement) -> int | None:
    ports = placement.port_list(PRIMARY_PORT_LABEL)
    if not ports and placement.ports:
        ports = placement.ports[0][1]
    return ports[0] if ports else None


def endpoint(placement: TaskPlacement) -> str:
    port = primary_port(placement)
    return placement.address if port is None else f"{placement.address}:{port}"


class JobEnvironment:
    """Builds each task's environment; the parts all tasks share are computed once."""

    def __init__(self, job: EnvJob, placements: Sequence[TaskPlacement]) -> None:
        self.job = job
        order = {role.name: i for i, role in enumerate(job.roles)}
        self.placements = sorted(placements, key=lambda p: (order[p.role], p.index))
        self._by_task = {(p.role, p.index): p for p in self.placements}
        self._rank = {(p.role, p.index): rank for rank, p in enumerate(self.placements)}
        self._node_count = len({p.node for p in self.placements})
        self._shared = self._shared_env()

    def hostfile(self) -> str:
        """MPI-style hostfile: one line per host address, ``address slots=N``, in node-rank
        order (simulated nodes that share one address share one line)."""
        slots: dict[str, int] = {}
        for p in self.placements:
            slots[p.address] = slots.get(p.address, 0) + 1
        return "".join(f"{address} slots={count}\n" for address, count in slots.items())

    def for_task(self, role: str, index: int) -> dict[str, str]:
        me = self._by_task[(role, index)]
        env = dict(self._shared)
        env.update(self._own_env(me))
        return env

    def _shared_env(self) -> dict[str, str]:
        job = self.job
        env: dict[str, str] = {}
        pai_name = f"{job.user}~{job.name}"
        total = len(self.placements)
        role_names = ",".join(r.name for r in job.roles)
        env.update(
            SHOAL_JOB_ID=job.job_id,
            SHOAL_JOB_NAME=job.name,
            SHOAL_USER=job.user,
            SHOAL_VIRTUAL_CLUSTER=job.virtual_cluster,
            SHOAL_TASK_ROLES=role_names,
            SHOAL_TASK_COUNT=str(total),
            PAI_JOB_NAME=pai_name,
            PAI_FRAMEWORK_NAME=pai_name,
            PAI_USER_NAME=job.user,
            PAI_USERNAME=job.user,
            PAI_DEFAULT_FS_URI="",
            PAI_VIRTUAL_CLUSTER=job.virtual_cluster,
            PAI_TASK_ROLE_COUNT=str(len(job.roles)),
            PAI_TASK_ROLES_NUM=str(len(job.roles)),
            PAI_JOB_TASK_ROLE_COUNT=str(len(job.roles)),
            PAI_TASK_ROLE_LIST=role_names,
            PAI_JOB_TASK_ROLE_LIST=role_names,
            PAI_TASKS_NUM=str(total),
            PAI_JOB_TASK_COUNT=str(total),
            PAI_TASK_ROLE_INSTANCES=",".join(f"{p.role}:{p.index}" for p in self.placements),
            JOB_NAME=job.name,
            JOB_ID=job.job_id,
            CLUSTER_NAME="shoal",
            PYTHONUNBUFFERED="1",
            WORLD_SIZE=str(total),
            GROUP_WORLD_SIZE=str(total),
            LOCAL_WORLD_SIZE="1",
            LOCAL_RANK="0",
            NODE_COUNT=str(self._node_count),
        )
        for role in job.roles:
            env.update(self._role_env(role))
        if job.array is not None:
            env.update(_array_env(job.array))
        if self.placements:
            master = self.placements[0]
            env["MASTER_ADDR"] = master.address
            port = (master.port_list(MASTER_PORT_LABEL) or (primary_port(master),))[0]
            if port is not None:
                env["MASTER_PORT"] = str(port)
        return env

    def _role_env(self, role: EnvRole) -> dict[str, str]:
        tasks = [p for p in self.placements if p.role == role.name]
        upper = role.name.upper()
        env = {
            f"SHOAL_{upper}_HOSTS": ",".join(endpoint(p) for p in tasks),
            f"SHOAL_{upper}_ADDRESSES": ",".join(p.address for p in tasks),
            f"SHOAL_{upper}_NUM": str(role.instances),
            f"PAI_TASK_ROLE_{role.name}_HOST_LIST": ",".join(endpoint(p) for p in tasks),
            f"PAI_TASK_ROLE_TASK_COUNT_{role.name}": str(role.instances),
            f"PAI_RESOURCE_{role.name}": (
                f"{role.gpu},{role.cpu_millis // 1000 or 1},{role.memory_mib},{role.shm_mib}"
            ),
            f"PAI_MIN_FAILED_TASK_COUNT_{role.name}": _policy(role.min_failed),
            f"PAI_MIN_SUCCEEDED_TASK_COUNT_{role.name}": _policy(role.min_succeeded),
        }
        for p in tasks:
            env[f"PAI_HOST_IP_{role.name}_{p.index}"] = p.address
            for label, ports in p.ports:
                joined = ",".join(str(port) for port in ports)
                env[f"PAI_PORT_LIST_{role.name}_{p.index}_{label}"] = joined
                env[f"PAI_{role.name}_{p.index}_{label}_PORT"] = joined
        return env

    def _own_env(self, me: TaskPlacement) -> dict[str, str]:
        key = (me.role, me.index)
        gpus = ",".join(str(g) for g in me.gpu_indices)
        port = primary_port(me)
        env = {
            "SHOAL_TASK_ROLE": me.role,
            "SHOAL_TASK_INDEX": str(me.index),
            "SHOAL_NODE_NAME": me.node,
            "SHOAL_HOST_IP": me.address,
            "SHOAL_GPU_COUNT": str(len(me.gpu_indices)),
            "PAI_CURRENT_TASK_ROLE_NAME": me.role,
            "PAI_TASK_ROLE_NAME": me.role,  # OpenPAI's older name for it (a legacy alias)
            "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(me.index),
            "PAI_TASK_INDEX": str(me.index),
            "PAI_CURRENT_CONTAINER_IP": me.address,
            "PAI_CONTAINER_HOST_IP": me.address,
            "PAI_CONTAINER_HOST_PORT_LIST": ";".join(
                f"{label}:{','.join(str(p) for p in ports)}" for label, ports in me.ports
            ),
            "COMPONENT_TYPE": me.role,
            "COMPONENT_INDEX": str(me.index),
            "COMPONENT_ID": f"{self.job.job_id}-{me.role}",
            "COMPONENT_NAME": f"{me.role}.{me.index}",
            "CONTAINER_NAME": f"{self.job.name}-{me.role}-{me.index}",
            "NODE_NAME": me.node,
            # each task is its own torchrun "node" (see the module docstring)
            "RANK": str(self._rank[key]),
            "NODE_RANK": str(self._rank[key]),
            "GROUP_RANK": str(self._rank[key]),
            "CUDA_VISIBLE_DEVICES": gpus,
            "NVIDIA_VISIBLE_DEVICES": gpus or "none",
        }
        if port is not None:
            env["SHOAL_PORT"] = str(port)
            env["PAI_CURRENT_CONTAINER_PORT"] = str(port)
            env["PAI_CONTAINER_HOST_PORT"] = str(port)
        for label, ports in me.ports:
            env[f"SHOAL_PORT_{label}"] = str(ports[0]) if ports else ""
            env[f"SHOAL_PORTS_{label}"] = ",".join(str(p) for p in ports)
            env[f"PAI_CONTAINER_HOST_{label}_PORT_LIST"] = ",".join(str(p) for p in ports)
        ssh = me.port_list("ssh")
        if ssh:
            env["PAI_CONTAINER_SSH_PORT"] = str(ssh[0])
        return env


def _array_env(array: EnvArray) -> dict[str, str]:
    """shoal's array variables, and Slurm's for scripts ported from ``sbatch --array``."""
    return {
        "SHOAL_ARRAY_JOB_ID": array.parent_id,
        "SHOAL_ARRAY_INDEX": str(array.index),
        "SHOAL_ARRAY_SIZE": str(array.size),
        "SLURM_ARRAY_JOB_ID": array.parent_id,
        "SLURM_ARRAY_TASK_ID": str(array.index),
        "SLURM_ARRAY_TASK_COUNT": str(array.size),
        "SLURM_ARRAY_TASK_MIN": str(array.first),
        "SLURM_ARRAY_TASK_MAX": str(array.last),
    }


def _policy(value: int | None) -> str:
    return "-1" if value is None else str(value)
