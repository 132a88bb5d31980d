"""The one normalised job description every input format is turned into.

``JobSpec`` is what the server stores, the scheduler sizes and the agent launches. It carries no
format-specific quirks: those are resolved (with warnings) by the format readers.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# Upper bounds that catch typos (memoryMB: 50000000) before they reach the scheduler.
MAX_CPU_MILLIS = 1024 * 1000
MAX_MEMORY_MIB = 16 * 1024 * 1024
MAX_GPUS_PER_INSTANCE = 64
MAX_INSTANCES_PER_ROLE = 10_000
MAX_TASKS_PER_JOB = 20_000
MAX_PORTS_PER_LABEL = 64
MAX_RETRIES = 1_000
MAX_PIDS = 4_194_304  # the kernel's pid_max ceiling


class SourceFormat(StrEnum):
    NATIVE = "native"
    PAI_V2 = "pai"
    PAI_V1 = "pai-v1"
    MARO = "maro"


class Runtime(StrEnum):
    """How an agent runs a job's tasks (docs/containers.md)."""

    PROCESS = "process"  # child processes of the agent, held to their limits by cgroups
    CONTAINER = "container"  # OCI containers (podman) from the role's image


class PriorityClass(StrEnum):
    """OpenPAI/HiveD priority classes, highest first. ``oppo`` runs only on idle capacity."""

    CRIT = "crit"
    PROD = "prod"
    TEST = "test"
    OPPO = "oppo"

    @property
    def rank(self) -> int:
        """Numeric priority as HiveD maps it: larger runs first."""
        return {"crit": 120, "prod": 100, "test": 10, "oppo": -1}[self.value]


_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Resources(BaseModel):
    """Resources one instance of a task role needs."""

    model_config = _FROZEN

    cpu_millis: Annotated[int, Field(ge=1, le=MAX_CPU_MILLIS)] = 1000
    memory_mib: Annotated[int, Field(ge=1, le=MAX_MEMORY_MIB)] = 1024
    gpu: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_INSTANCE)] = 0
    gpu_type: str | None = None
    ports: dict[str, int] = Field(default_factory=dict)
    shm_mib: int | None = None
    pids: Annotated[int, Field(ge=8, le=MAX_PIDS)] | None = None  # None: the agent's default


class Completion(BaseModel):
    """When a role decides the job's fate.

    ``min_failed``: this many failed instances fail the job (``None``: task failures never fail it).
    ``min_succeeded``: this many succeeded instances succeed the job (``None``: the role has no
    say until every instance has finished).
    """

    model_config = _FROZEN

    min_failed: int | None = 1
    min_succeeded: int | None = None


class TaskRoleSpec(BaseModel):
    model_config = _FROZEN

    name: str
    instances: int = 1
    resources: Resources = Field(default_factory=Resources)
    command: str
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    completion: Completion = Field(default_factory=Completion)
    task_retry_count: int = 0
    data: tuple[str, ...] = ()  # data sets this role's tasks read (besides the job's)
    # Hold a failed task for debugging (docs/debug-jobs.md): its environment and resources are
    # kept for ``debug_hold_s`` seconds (None: the server's default) after its command fails.
    debug: bool = False
    debug_hold_s: int | None = None


class JobSpec(BaseModel):
    model_config = _FROZEN

    name: str
    source_format: SourceFormat = SourceFormat.NATIVE
    description: str | None = None
    virtual_cluster: str | None = None
    priority_class: PriorityClass = PriorityClass.TEST
    runtime: Runtime | None = None  # None: the server's default runtime
    gang: bool = True
    job_retry_count: int = 0
    max_runtime_s: int | None = None
    # a notebook or a TensorBoard: stopped once idle past its VC's idle timeout (docs/notebooks.md)
    interactive: bool = False
    code_dir: str | None = None
    data: tuple[str, ...] = ()  # data sets every task reads: NAME or OWNER/NAME
    env: dict[str, str] = Field(default_factory=dict)
    parameters: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict, repr=False)
    roles: tuple[TaskRoleSpec, ...]
    # a job array (``shoal.spec.arrays``: ``0-999%50``): one element per index, each a gang of
    # the roles above; None: an ordinary job
    array: str | None = None

    @property
    def total_instances(self) -> int:
        return sum(role.instances for role in self.roles)

    def role(self, name: str) -> TaskRoleSpec:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(name)

    def data_for(self, role: str) -> tuple[str, ...]:
        """The data sets the tasks of ``role`` read: the job's, then the role's own."""
        own = self.role(role).data
        return (*self.data, *(ref for ref in own if ref not in self.data))

    def all_data(self) -> tuple[str, ...]:
        """Every data set the job declares, once each, in order."""
        refs = [*self.data, *(ref for role in self.roles for ref in role.data)]
        return tuple(dict.fromkeys(refs))

    def public_dict(self) -> dict[str, object]:
        """The spec as JSON-ready data with secret values masked."""
        data = self.model_dump(mode="json")
        data["secrets"] = dict.fromkeys(self.secrets, "******")
        return data
