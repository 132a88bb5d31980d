"""MARO job files: component jobs and schedules (``mode:`` + ``components:``), v0.3 RL workflows.

Component jobs (``maro process|grass|k8s job|schedule start``): each ``components.<type>`` is a
role of ``num`` instances; a schedule's ``job_names`` gives one job per name, sharing them.

- ``process``: ``{num, command}``, no resources: shoal's 1 cpu / 1 GiB default is assumed (warned).
- ``grass/*``: ``{image, resources: {cpu, memory, gpu}, num, mount, command: str}``; ``4096m`` is MB
  as docker reads it (MiB). ``allocation`` and ``tags`` are warned: shoal always packs.
- ``k8s/aks``: as grass, but ``4096M`` is a Kubernetes quantity (decimal MB, rounded up to MiB) and
  ``command`` is an argv list, joined with ``shlex.join``. ``mount`` is warned everywhere: shoal has
  no shared data directory yet.

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

from pydantic import BaseModel, ConfigDict, Field

from shoal.spec.checks import MappedRolePaths, RolePaths, check_roles
from shoal.spec.diagnostics import describe
from shoal.spec.diagnostics import validate_collecting as _validate
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
from shoal.spec.resources import ResourceReader

_STRICT = ConfigDict(extra="forbid", strict=True)
_OPEN = ConfigDict(extra="allow", strict=True)  # RL configs: unread keys pass through

PROCESS_MODE = "process"
GRASS_MODES = ("grass/azure", "grass/on-premises", "grass/local")
K8S_MODE = "k8s/aks"
MARO_MODES = (PROCESS_MODE, *GRASS_MODES, K8S_MODE)
MARO_PACKAGE_HINT = "install MARO in the task's environment (pip install pymaro) or its image"
ASSUMED = "declares no resources, so shoal assumes 1 cpu / 1 GiB per instance"
ASSUMED_HINT = "convert to a shoal job to declare resources per role"

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


def read_maro(data: Mapping[str, Any], problems: ProblemCollector) -> list[JobSpec]:
    """Read a MARO job, schedule or RL workflow config; a schedule gives one job per name."""
    if "components" in data or "mode" in data:
        return _read_component_job(data, problems)
    return [_read_rl_workflow(data, problems)]


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
    rollout_env, rollout_roles = _rollout(raw, problems)
    training_env, training_roles = _training(raw, problems)
    roles = [_rl_main(raw, rollout_env | training_env, problems), *rollout_roles, *training_roles]
    where = {
        "main": "main",
        "rollout_worker": "rollout.parallelism",
        "train_proxy": "training.proxy",
        "train_worker": "training.num_workers",
    }
    paths = MappedRolePaths("{role}", "{role}", "{role}", "{role}", "{role}", "", key_of=where)
    check_roles(roles, paths, problems)
    problems.raise_if_errors()
    problems.warn(
        "",
        "roles run `python -m maro.rl.workflows.*`, which needs the `maro` package and the "
        "scenario at scenario_path inside every task",
        MARO_PACKAGE_HINT,
    )
    problems.warn("", f"the RL workflow config {ASSUMED}", ASSUMED_HINT)
    return JobSpec(name=raw.job, source_format=SourceFormat.MARO, roles=tuple(roles))


def _present(**values: object) -> dict[str, str]:
    """Environment entries for the values that are set."""
    return {key: str(value) for key, value in values.items() if value is not None}


def _common_env(raw: RawRlWorkflow, logging: RawLogging | None) -> dict[str, str]:
    env = {"SCENARIO_PATH": raw.scenario_path, "LOG_PATH": raw.log_path}
    if logging is not None:
        env |= {"LOG_LEVEL_STDOUT": logging.stdout, "LOG_LEVEL_FILE": logging.file}
    return env


def _peer_host(role: str) -> str:
    """Shell text for the host of a role's first instance, from shoal's peer list."""
    return f'"${{SHOAL_{role.upper()}_HOSTS%%:*}}"'


def _worker_command(module: str, host_variable: str, peer: str) -> str:
    return (
        f'ID="$SHOAL_TASK_INDEX" {host_variable}={_peer_host(peer)} '
        f"python -m maro.rl.workflows.{module}"
    )


def _rl_main(
    raw: RawRlWorkflow, extra_env: dict[str, str], problems: ProblemCollector
) -> TaskRoleSpec:
    main, training = raw.main, raw.training
    checkpointing = training.checkpointing
    env = _common_env(raw, main.logging) | _present(
        JOB=raw.job,
        NUM_EPISODES=main.num_episodes,
        MIN_N_SAMPLE=main.min_n_sample,
        TRAIN_MODE=training.mode,
        EVAL_SCHEDULE=_eval_schedule(main.eval_schedule, main.num_episodes, problems),
        NUM_STEPS=main.num_steps,
        LOAD_PATH=training.load_path,
        LOAD_EPISODE=training.load_episode,
        CHECKPOINT_PATH=checkpointing.path if checkpointing else None,
        CHECKPOINT_INTERVAL=checkpointing.interval if checkpointing else None,
    )
    command = "python -m maro.rl.workflows.main"
    if "TRAIN_PROXY_FRONTEND_PORT" in extra_env:
        command = f"TRAIN_PROXY_HOST={_peer_host('train_proxy')} {command}"
    return TaskRoleSpec(
        name="main",
        command=command,
        env=env | extra_env,
        completion=Completion(min_failed=1, min_succeeded=1),
    )


def _eval_schedule(value: Any, num_episodes: int, problems: ProblemCollector) -> str | None:
    """MARO's EVAL_SCHEDULE: every n-th episode for an int, the sorted episodes for a list."""
    if value is None:
        return None
    if _positive_int(value):
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


def _rollout(
    raw: RawRlWorkflow, problems: ProblemCollector
) -> tuple[dict[str, str], list[TaskRoleSpec]]:
    """main's parallel roll-out settings and the roll-out worker role (none for one roll-out)."""
    parallelism, path = raw.rollout.parallelism, "rollout.parallelism"
    if parallelism is None:
        return {}, []
    sampling, evaluation = parallelism.sampling, parallelism.eval or 1
    if parallelism.min_env_samples is not None and parallelism.min_env_samples > sampling:
        problems.error(
            f"{path}.min_env_samples",
            f"is {parallelism.min_env_samples}, more than sampling ({sampling})",
            "it may not exceed the number of parallel roll-outs",
        )
    workers = max(sampling, evaluation)
    if workers == 1:
        return {}, []
    if parallelism.controller is None:
        problems.error(
            f"{path}.controller",
            "is required when more than one roll-out worker runs",
            "add controller: {host: 127.0.0.1, port: 20000}",
        )
        return {}, []
    problems.warn(
        f"{path}.controller.host",
        "is not used: roll-out workers find main through $SHOAL_MAIN_HOSTS",
    )
    port = parallelism.controller.port
    main_env = _present(
        ENV_SAMPLE_PARALLELISM=sampling,
        ENV_EVAL_PARALLELISM=evaluation,
        ROLLOUT_CONTROLLER_PORT=port,
        MIN_ENV_SAMPLES=parallelism.min_env_samples,
        GRACE_FACTOR=parallelism.grace_factor,
    )
    worker = TaskRoleSpec(
        name="rollout_worker",
        instances=workers,
        command=_worker_command("rollout_worker", "ROLLOUT_CONTROLLER_HOST", "main"),
        env=_common_env(raw, raw.rollout.logging) | {"ROLLOUT_CONTROLLER_PORT": str(port)},
    )
    return main_env, [worker]


def _training(
    raw: RawRlWorkflow, problems: ProblemCollector
) -> tuple[dict[str, str], list[TaskRoleSpec]]:
    """main's parallel training settings and the proxy and worker roles (none in simple mode)."""
    training = raw.training
    if training.mode != "parallel":
        return {}, []
    for key, value in (("num_workers", training.num_workers), ("proxy", training.proxy)):
        if value is None:
            problems.error(f"training.{key}", "is required when training.mode is parallel")
    if training.num_workers is None or training.proxy is None:
        return {}, []
    problems.warn(
        "training.proxy.host",
        "is not used: workers find the proxy through $SHOAL_TRAIN_PROXY_HOSTS",
    )
    ports = _present(
        TRAIN_PROXY_FRONTEND_PORT=training.proxy.frontend,
        TRAIN_PROXY_BACKEND_PORT=training.proxy.backend,
    )
    proxy = TaskRoleSpec(
        name="train_proxy",
        command="python -m maro.rl.workflows.train_proxy",
        env={"LOG_PATH": raw.log_path} | ports,
    )
    worker = TaskRoleSpec(
        name="train_worker",
        instances=training.num_workers,
        command=_worker_command("train_worker", "TRAIN_PROXY_HOST", "train_proxy"),
        env=_common_env(raw, training.logging)
        | {"TRAIN_PROXY_BACKEND_PORT": ports["TRAIN_PROXY_BACKEND_PORT"]},
    )
    return {"TRAIN_PROXY_FRONTEND_PORT": ports["TRAIN_PROXY_FRONTEND_PORT"]}, [proxy, worker]
