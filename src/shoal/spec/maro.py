"""MARO job files: component jobs/schedules (``mode:`` + ``components:``) and v0.3 RL workflows.

Component jobs (MARO CLI v0.2, ``maro process|grass|k8s job start`` / ``schedule start``): each
``components.<type>`` becomes a role of ``num`` instances. A schedule's ``job_names`` yields one job
per name, all sharing the components. Per mode:

- ``process``: ``{num, command}``; MARO declares no resources, so each instance gets shoal's default
  of 1 cpu and 1 GiB (warned once).
- ``grass/azure|grass/on-premises|grass/local``: ``{image, resources: {cpu, memory: "4096m", gpu},
  num, mount, command: str}``; ``4096m`` is MB as docker reads it, i.e. MiB. ``allocation`` and
  ``tags`` are accepted and warned (shoal always packs; it has no tags).
- ``k8s/aks``: as grass, but ``memory: "4096M"`` is a Kubernetes quantity (decimal megabytes,
  rounded up to MiB) and ``command`` is an argv list, joined with ``shlex.join``.

``mount`` is warned as not acted on: shoal has no shared data directory yet.

RL workflow configs (MARO v0.3, ``maro local run`` / ``maro aks job add``; keys ``job``,
``scenario_path``, ``log_path``, ``main``, ``rollout``, ``training``) become the processes that
MARO's own ``ConfigParser.get_job_spec`` (``maro/rl/workflows/config/parser.py``) starts, with the
same environment variables: ``main`` x1; ``rollout_worker`` x max(``sampling``, ``eval``) when that
is over 1 (MARO starts that many, so evaluation-only workers are not left missing); ``train_proxy``
x1 and ``train_worker`` x ``num_workers`` when ``training.mode`` is ``parallel``. Differences:

- worker ``ID`` comes from ``$SHOAL_TASK_INDEX`` and the controller/proxy host from shoal's peer
  list (``$SHOAL_MAIN_HOSTS``, ``$SHOAL_TRAIN_PROXY_HOSTS``), because roles may run on different
  nodes; the configured ``host`` values are not used (warned). Ports are used as configured.
- ``MIN_ENV_SAMPLES``/``GRACE_FACTOR`` are read from ``rollout.parallelism`` (MARO looked them up
  one level too high, so never passed them) and ``LOAD_PATH``/``LOAD_EPISODE`` go to ``main``
  (MARO's parser raised ``KeyError`` on them).
- ``main`` succeeding succeeds the job; any failing instance fails it. Other keys of the config are
  passed over without error, as MARO's parser does.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shoal.spec.checks import RolePaths, check_roles
from shoal.spec.diagnostics import describe, validation_problems
from shoal.spec.errors import ProblemCollector, SpecError
from shoal.spec.model import (
    JOB_NAME_PATTERN,
    MAX_GPUS_PER_INSTANCE,
    MAX_INSTANCES_PER_ROLE,
    ROLE_NAME_PATTERN,
    Completion,
    JobSpec,
    Resources,
    SourceFormat,
    TaskRoleSpec,
)
from shoal.spec.openpai_v1 import MappedRolePaths
from shoal.spec.resources import ResourceReader

_STRICT = ConfigDict(extra="forbid", strict=True)
_OPEN = ConfigDict(extra="allow", strict=True)  # RL configs: unread keys pass through

PROCESS_MODE = "process"
GRASS_MODES = ("grass/azure", "grass/on-premises", "grass/local")
K8S_MODE = "k8s/aks"
MARO_MODES = (PROCESS_MODE, *GRASS_MODES, K8S_MODE)
MARO_PACKAGE_HINT = "install MARO in the task's environment (pip install pymaro) or its image"

JobName = Annotated[str, Field(pattern=JOB_NAME_PATTERN)]
RoleName = Annotated[str, Field(pattern=ROLE_NAME_PATTERN)]
Instances = Annotated[int, Field(ge=1, le=MAX_INSTANCES_PER_ROLE)]
Port = Annotated[int, Field(ge=1, le=65535)]
NonEmpty = Annotated[str, Field(min_length=1)]
LogLevel = Literal["DEBUG", "INFO", "WARN", "ERROR", "CRITICAL", "PROGRESS"]


class RawAllocation(BaseModel):
    model_config = _STRICT

    mode: Literal["single-metric-balanced", "single-metric-compacted"]
    metric: Literal["cpu", "memory", "gpu"]


class RawMount(BaseModel):
    model_config = _STRICT

    target: NonEmpty


class RawContainerResources(BaseModel):
    model_config = _STRICT

    cpu: Any  # cores; ResourceReader checks type and bounds with a unit hint
    memory: Any
    gpu: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_INSTANCE)] = 0


class RawProcessComponent(BaseModel):
    model_config = _STRICT

    num: Instances
    command: str


class _RawContainerComponent(BaseModel):
    model_config = _STRICT

    image: NonEmpty
    resources: RawContainerResources
    num: Instances
    mount: RawMount | None = None


class RawGrassComponent(_RawContainerComponent):
    command: str


class RawK8sComponent(_RawContainerComponent):
    command: Annotated[list[str], Field(min_length=1)]


class _RawComponentJob(BaseModel):
    model_config = _STRICT

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

Model = TypeVar("Model", bound=BaseModel)


def read_maro(data: Mapping[str, Any], problems: ProblemCollector) -> list[JobSpec]:
    """Read a MARO job, schedule or RL workflow config; a schedule gives one job per name."""
    if "components" in data or "mode" in data:
        return _read_component_job(data, problems)
    return [_read_rl_workflow(data, problems)]


def _validate(
    model: type[Model], data: Any, problems: ProblemCollector, prefix: str = ""
) -> Model | None:
    """Validate, recording problems instead of raising, so every part of a file gets checked."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems.errors.extend(validation_problems(exc, model, prefix))
        return None


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
    if raw is None:
        raise SpecError(problems.errors)
    _warn_job(raw, problems)
    check_roles(roles, COMPONENT_PATHS, problems)
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
            "is not acted on yet: shoal has no shared data directory",
            "ship data with the job's code directory, or fetch it in the command",
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
        problems.warn(
            "components",
            "MARO process mode declares no resources, so shoal assumes 1 cpu / 1 GiB per instance",
            "convert to a shoal job to declare resources per role",
        )
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


# --- RL workflow configs (MARO v0.3) ---


class RawLogging(BaseModel):
    model_config = _STRICT

    stdout: LogLevel
    file: LogLevel


class RawRlMain(BaseModel):
    model_config = _OPEN

    num_episodes: Annotated[int, Field(ge=1)]
    num_steps: Annotated[int, Field(ge=1)] | None = None
    eval_schedule: Any = None  # a positive int or a list of them: checked by _eval_schedule
    min_n_sample: Annotated[int, Field(ge=1)] = 1
    logging: RawLogging | None = None


class RawController(BaseModel):
    model_config = _OPEN

    host: str
    port: Port


class RawParallelism(BaseModel):
    model_config = _OPEN

    sampling: Instances
    eval: Instances | None = None
    min_env_samples: Annotated[int, Field(ge=1)] | None = None
    grace_factor: Annotated[float, Field(ge=0)] | None = None
    controller: RawController | None = None


class RawRollout(BaseModel):
    model_config = _OPEN

    parallelism: RawParallelism | None = None
    logging: RawLogging | None = None


class RawProxy(BaseModel):
    model_config = _OPEN

    host: str
    frontend: Port
    backend: Port


class RawCheckpointing(BaseModel):
    model_config = _OPEN

    path: NonEmpty
    interval: Annotated[int, Field(ge=1)] | None = None


class RawTraining(BaseModel):
    model_config = _OPEN

    mode: Literal["simple", "parallel"]
    num_workers: Instances | None = None
    proxy: RawProxy | None = None
    load_path: NonEmpty | None = None
    load_episode: Annotated[int, Field(ge=0)] | None = None
    checkpointing: RawCheckpointing | None = None
    logging: RawLogging | None = None


class RawRlWorkflow(BaseModel):
    model_config = _OPEN

    job: JobName
    scenario_path: NonEmpty
    log_path: NonEmpty
    main: RawRlMain
    rollout: RawRollout
    training: RawTraining


def _read_rl_workflow(data: Mapping[str, Any], problems: ProblemCollector) -> JobSpec:
    raw = _validate(RawRlWorkflow, data, problems)
    if raw is None:
        raise SpecError(problems.errors)
    roles = [_rl_main(raw, problems)]
    workers = _rollout_workers(raw.rollout.parallelism, problems)
    if workers > 1:
        roles.append(_rl_rollout_workers(raw, workers))
    if raw.training.mode == "parallel":
        roles.extend(_rl_training_roles(raw, problems))
    where = {
        "main": "main",
        "rollout_worker": "rollout.parallelism",
        "train_proxy": "training.proxy",
        "train_worker": "training.num_workers",
    }
    paths = MappedRolePaths("{role}", "{role}", "{role}", "{role}", "{role}", "", where)
    check_roles(roles, paths, problems)
    problems.raise_if_errors()
    problems.warn(
        "",
        "roles run `python -m maro.rl.workflows.*`, which needs the `maro` package and the "
        "scenario at scenario_path inside every task",
        MARO_PACKAGE_HINT,
    )
    problems.warn(
        "",
        "the RL workflow config declares no resources, so shoal assumes 1 cpu / 1 GiB per instance",
        "convert to a shoal job to declare resources per role",
    )
    return JobSpec(name=raw.job, source_format=SourceFormat.MARO, roles=tuple(roles))


def _peer_host(role: str) -> str:
    """Shell text for the host of a role's first instance, from shoal's peer list."""
    return f'"${{SHOAL_{role.upper()}_HOSTS%%:*}}"'


def _levels(logging: RawLogging | None) -> dict[str, str]:
    if logging is None:
        return {}
    return {"LOG_LEVEL_STDOUT": logging.stdout, "LOG_LEVEL_FILE": logging.file}


def _rl_main(raw: RawRlWorkflow, problems: ProblemCollector) -> TaskRoleSpec:
    main, training = raw.main, raw.training
    env = {
        "JOB": raw.job,
        "NUM_EPISODES": str(main.num_episodes),
        "MIN_N_SAMPLE": str(main.min_n_sample),
        "TRAIN_MODE": training.mode,
        "SCENARIO_PATH": raw.scenario_path,
        "LOG_PATH": raw.log_path,
    }
    schedule = _eval_schedule(main.eval_schedule, main.num_episodes, problems)
    optional = {
        "EVAL_SCHEDULE": schedule,
        "NUM_STEPS": main.num_steps,
        "LOAD_PATH": training.load_path,
        "LOAD_EPISODE": training.load_episode,
        "CHECKPOINT_PATH": training.checkpointing.path if training.checkpointing else None,
        "CHECKPOINT_INTERVAL": training.checkpointing.interval if training.checkpointing else None,
    }
    env |= {key: str(value) for key, value in optional.items() if value is not None}
    env |= _levels(main.logging)
    env |= _rollout_env(raw.rollout.parallelism)
    command = "python -m maro.rl.workflows.main"
    if training.mode == "parallel" and training.proxy is not None:
        env["TRAIN_PROXY_FRONTEND_PORT"] = str(training.proxy.frontend)
        command = f"TRAIN_PROXY_HOST={_peer_host('train_proxy')} {command}"
    return TaskRoleSpec(
        name="main", command=command, env=env, completion=Completion(min_failed=1, min_succeeded=1)
    )


def _eval_schedule(value: Any, num_episodes: int, problems: ProblemCollector) -> str | None:
    """MARO's EVAL_SCHEDULE: every n-th episode for an int, the sorted episodes for a list."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return " ".join(str(value * i) for i in range(1, num_episodes // value + 1))
    if isinstance(value, list) and value and all(_positive_int(v) for v in value):
        return " ".join(str(v) for v in sorted(value))
    problems.error(
        "main.eval_schedule",
        f"must be a positive integer or a list of positive integers, got {describe(value)}",
        "e.g. 10 (every 10th episode) or [5, 50, 100]",
    )
    return None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _rollout_workers(parallelism: RawParallelism | None, problems: ProblemCollector) -> int:
    if parallelism is None:
        return 1
    path = "rollout.parallelism"
    workers = max(parallelism.sampling, parallelism.eval or 1)
    if workers > 1 and parallelism.controller is None:
        problems.error(
            f"{path}.controller",
            "is required when more than one roll-out worker runs",
            "add controller: {host: 127.0.0.1, port: 20000}",
        )
    if parallelism.min_env_samples is not None and (
        parallelism.min_env_samples > parallelism.sampling
    ):
        problems.error(
            f"{path}.min_env_samples",
            f"is {parallelism.min_env_samples}, more than sampling ({parallelism.sampling})",
            "it may not exceed the number of parallel roll-outs",
        )
    if workers > 1 and parallelism.controller is not None:
        problems.warn(
            f"{path}.controller.host",
            "is not used: roll-out workers find main through $SHOAL_MAIN_HOSTS",
        )
    return workers


def _rollout_env(parallelism: RawParallelism | None) -> dict[str, str]:
    """What main needs to know about parallel roll-outs (nothing when there is one roll-out)."""
    if parallelism is None or parallelism.controller is None:
        return {}
    eval_workers = parallelism.eval or 1
    if max(parallelism.sampling, eval_workers) == 1:
        return {}
    env = {
        "ENV_SAMPLE_PARALLELISM": str(parallelism.sampling),
        "ENV_EVAL_PARALLELISM": str(eval_workers),
        "ROLLOUT_CONTROLLER_PORT": str(parallelism.controller.port),
    }
    if parallelism.min_env_samples is not None:
        env["MIN_ENV_SAMPLES"] = str(parallelism.min_env_samples)
    if parallelism.grace_factor is not None:
        env["GRACE_FACTOR"] = str(parallelism.grace_factor)
    return env


def _rl_rollout_workers(raw: RawRlWorkflow, workers: int) -> TaskRoleSpec:
    parallelism = raw.rollout.parallelism
    port = parallelism.controller.port if parallelism and parallelism.controller else 20000
    env = {
        "ROLLOUT_CONTROLLER_PORT": str(port),
        "SCENARIO_PATH": raw.scenario_path,
        "LOG_PATH": raw.log_path,
    } | _levels(raw.rollout.logging)
    command = (
        f'ID="$SHOAL_TASK_INDEX" ROLLOUT_CONTROLLER_HOST={_peer_host("main")} '
        "python -m maro.rl.workflows.rollout_worker"
    )
    return TaskRoleSpec(name="rollout_worker", instances=workers, command=command, env=env)


def _rl_training_roles(raw: RawRlWorkflow, problems: ProblemCollector) -> list[TaskRoleSpec]:
    training = raw.training
    for key, value in (("num_workers", training.num_workers), ("proxy", training.proxy)):
        if value is None:
            problems.error(f"training.{key}", "is required when training.mode is parallel")
    if training.num_workers is None or training.proxy is None:
        return []
    problems.warn(
        "training.proxy.host",
        "is not used: workers find the proxy through $SHOAL_TRAIN_PROXY_HOSTS",
    )
    proxy = training.proxy
    proxy_env = {
        "TRAIN_PROXY_FRONTEND_PORT": str(proxy.frontend),
        "TRAIN_PROXY_BACKEND_PORT": str(proxy.backend),
        "LOG_PATH": raw.log_path,
    }
    worker_env = {
        "TRAIN_PROXY_BACKEND_PORT": str(proxy.backend),
        "SCENARIO_PATH": raw.scenario_path,
        "LOG_PATH": raw.log_path,
    } | _levels(training.logging)
    worker_command = (
        f'ID="$SHOAL_TASK_INDEX" TRAIN_PROXY_HOST={_peer_host("train_proxy")} '
        "python -m maro.rl.workflows.train_worker"
    )
    return [
        TaskRoleSpec(
            name="train_proxy", command="python -m maro.rl.workflows.train_proxy", env=proxy_env
        ),
        TaskRoleSpec(
            name="train_worker",
            instances=training.num_workers,
            command=worker_command,
            env=worker_env,
        ),
    ]
