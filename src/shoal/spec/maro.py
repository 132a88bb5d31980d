"""MARO job files: component jobs and schedules (``mode:`` + ``components:``), v0.3 RL workflows.

Component jobs (``maro process|grass|k8s job|schedule start``): each ``components.<type>`` is a
role of ``num`` instances; a schedule's ``job_names`` gives one job per name, sharing them.

- ``process``: ``{num, command}``, no resources: shoal's 1 cpu / 1 GiB default is assumed (warned).
- ``grass/*``: ``{image, resources: {cpu, memory, gpu}, num, mount, command: str}``; ``4096m`` is MB
  as docker reads it (MiB). ``allocation`` and ``tags`` are warned: shoal always packs.
- ``k8s/aks``: as grass, but ``4096M`` is a Kubernetes quantity (decimal MB, rounded up to MiB) and
  ``command`` is an argv list, joined with ``shlex.join``. ``mount`` is warned everywhere: shoal
  mounts no shared directory; data sets (``shoal data push``) reach tasks under ``$SHOAL_DATA_DIR``.

RL workflow configs (``job``, ``scenario_path``, ``log_path``, ``main``, ``rollout``, ``training``)
become the processes, and environment variables, of MARO's ``ConfigParser.get_job_spec``
(``maro/rl/workflows/config/parser.py``): ``main`` x1; ``rollout_worker`` x max(``sampling``,
``eval``) when over 1 (as MARO starts them); ``train_proxy`` x1 and ``train_worker`` x
``num_workers`` in ``parallel`` training. ``main`` succeeding succeeds the job. Differences:

- worker ``ID`` is ``$SHOAL_TASK_INDEX``; the controller/proxy host comes from shoal's peer list
  (``$SHOAL_MAIN_HOSTS``, ``$SHOAL_TRAIN_PROXY_HOSTS``) as roles may run on different nodes, so the
  configured ``host`` values are not used (warned). Ports are used as configured.
- ``MIN_ENV_SAMPLES``/``GRACE_FACTOR`` are read from ``rollout.parallelism`` (MARO looked one level
  too high) and ``LOAD_PATH``/``LOAD_EPISODE`` reach ``main`` (MARO's parser raised ``KeyError``).
- Keys shoal does not read pass through without error, as with MARO's parser.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from shoal.spec.checks import RolePaths, check_roles
from shoal.spec.diagnostics import describe
from shoal.spec.diagnostics import validate_collecting as _validate
from shoal.spec.errors import ProblemCollector, SpecError
from shoal.spec.maro_common import (
    ASSUMED,
    ASSUMED_HINT,
    GRASS_MODES,
    K8S_MODE,
    MARO_MODES,
    PROCESS_MODE,
    STRICT,
    Instances,
    JobName,
    NonEmpty,
    RoleName,
)
from shoal.spec.maro_rl import read_rl_workflow
from shoal.spec.model import (
    MAX_GPUS_PER_INSTANCE,
    JobSpec,
    Resources,
    SourceFormat,
    TaskRoleSpec,
)
from shoal.spec.resources import ResourceReader


class RawAllocation(BaseModel):
    model_config = STRICT

    mode: Literal["single-metric-balanced", "single-metric-compacted"]
    metric: Literal["cpu", "memory", "gpu"]


class RawMount(BaseModel):
    model_config = STRICT

    target: NonEmpty


class RawContainerResources(BaseModel):
    model_config = STRICT

    cpu: Any  # cores; ResourceReader checks type and bounds with a unit hint
    memory: Any
    gpu: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_INSTANCE)] = 0


class RawProcessComponent(BaseModel):
    model_config = STRICT

    num: Instances
    command: str


class _RawContainerComponent(BaseModel):
    model_config = STRICT

    image: NonEmpty
    resources: RawContainerResources
    num: Instances
    mount: RawMount | None = None


class RawGrassComponent(_RawContainerComponent):
    command: str


class RawK8sComponent(_RawContainerComponent):
    command: Annotated[list[str], Field(min_length=1)]


class _RawComponentJob(BaseModel):
    model_config = STRICT

    mode: str
    name: JobName
    job_names: Annotated[list[JobName], Field(min_length=1)] | None = None
    components: Annotated[dict[RoleName, Any], Field(min_length=1)]


class RawProcessJob(_RawComponentJob):
    mode: Literal["process"]


class RawK8sJob(_RawComponentJob):
    mode: Literal["k8s/aks"]
    tags: dict[str, Any] | None = None


class RawGrassJob(_RawComponentJob):
    mode: Literal["grass/azure", "grass/on-premises", "grass/local"]
    allocation: RawAllocation | None = None
    tags: dict[str, Any] | None = None


Component = RawProcessComponent | RawGrassComponent | RawK8sComponent
_MODELS: dict[str, tuple[type[_RawComponentJob], type[Component]]] = {
    PROCESS_MODE: (RawProcessJob, RawProcessComponent),
    K8S_MODE: (RawK8sJob, RawK8sComponent),
    **dict.fromkeys(GRASS_MODES, (RawGrassJob, RawGrassComponent)),
}

COMPONENT_PATHS = RolePaths(
    role="components.{role}",
    instances="components.{role}.num",
    command="components.{role}.command",
    min_failed="components.{role}",
    min_succeeded="components.{role}",
    total="components",
)


def read_maro(data: Mapping[str, Any], problems: ProblemCollector) -> list[JobSpec]:
    """Read a MARO job, schedule or RL workflow config; a schedule gives one job per name."""
    if "components" in data or "mode" in data:
        return _read_component_job(data, problems)
    return [read_rl_workflow(data, problems)]


# --- component jobs and schedules (MARO v0.2) ---


def _read_component_job(data: Mapping[str, Any], problems: ProblemCollector) -> list[JobSpec]:
    mode = data.get("mode")
    if not isinstance(mode, str) or mode not in _MODELS:
        problems.error(
            "mode",
            "is required" if mode is None else f"must be a MARO job mode, got {describe(mode)}",
            "allowed modes: " + ", ".join(MARO_MODES),
        )
        raise SpecError(problems.errors)
    job_model, component_model = _MODELS[mode]
    raw = _validate(job_model, data, problems)
    roles: list[TaskRoleSpec] = []
    components = data.get("components")
    for name, value in components.items() if isinstance(components, dict) else ():
        path = f"components.{name}"
        component = _validate(component_model, value, problems, path)
        if component is not None:
            roles.append(_component_role(str(name), component, path, problems))
    check_roles(roles, COMPONENT_PATHS, problems)
    if raw is None:
        raise SpecError(problems.errors)
    _warn_job(raw, problems)
    _check_job_names(raw.job_names or [], problems)
    problems.raise_if_errors()
    schedule = f"part of MARO schedule {raw.name!r}" if raw.job_names else None
    return [
        JobSpec(
            name=name, source_format=SourceFormat.MARO, description=schedule, roles=tuple(roles)
        )
        for name in raw.job_names or [raw.name]
    ]


def _component_role(
    name: str, raw: Component, path: str, problems: ProblemCollector
) -> TaskRoleSpec:
    if isinstance(raw, RawProcessComponent):
        return TaskRoleSpec(name=name, instances=raw.num, command=raw.command)
    if raw.mount is not None:
        problems.warn(
            f"{path}.mount",
            f"is not mounted: shoal has no shared directory to mount at {raw.mount.target}",
            "push the data with `shoal data push`, declare it under the role's data: in a "
            "shoal job file, and read it from $SHOAL_DATA_DIR/NAME",
        )
    reader = ResourceReader(problems)
    k8s = isinstance(raw, RawK8sComponent)
    resources = Resources(
        cpu_millis=reader.cpu(raw.resources.cpu, f"{path}.resources.cpu"),
        memory_mib=reader.memory(
            raw.resources.memory, f"{path}.resources.memory", lowercase_m_is_mib=not k8s
        ),
        gpu=raw.resources.gpu,
    )
    if isinstance(raw, RawK8sComponent):
        command = shlex.join(raw.command) if any(arg.strip() for arg in raw.command) else ""
    else:
        command = raw.command
    return TaskRoleSpec(
        name=name, instances=raw.num, resources=resources, command=command, image=raw.image
    )


def _warn_job(raw: _RawComponentJob, problems: ProblemCollector) -> None:
    if isinstance(raw, RawProcessJob):
        problems.warn("components", f"MARO process mode {ASSUMED}", ASSUMED_HINT)
    if isinstance(raw, RawGrassJob) and raw.allocation is not None:
        problems.warn(
            "allocation",
            "is accepted but not used: shoal always packs instances onto the fewest nodes",
        )
    if isinstance(raw, RawGrassJob | RawK8sJob) and raw.tags is not None:
        problems.warn("tags", "are not used by shoal")


def _check_job_names(names: list[str], problems: ProblemCollector) -> None:
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            problems.error(
                f"job_names[{index}]",
                f"duplicate job name {name!r} (also job_names[{seen[name]}])",
                "each job of a schedule needs its own name",
            )
        seen.setdefault(name, index)
