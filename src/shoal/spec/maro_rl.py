"""MARO v0.3 RL workflow configs (``job``, ``scenario_path``, ``main``, ``rollout``,
``training``), read as the processes MARO's ``ConfigParser.get_job_spec`` starts; see
``shoal.spec.maro`` for the mapping and how it differs from MARO."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from shoal.spec.checks import MappedRolePaths, check_roles
from shoal.spec.diagnostics import describe
from shoal.spec.diagnostics import validate_collecting as _validate
from shoal.spec.errors import ProblemCollector, SpecError
from shoal.spec.maro_common import (
    ASSUMED,
    ASSUMED_HINT,
    MARO_PACKAGE_HINT,
    OPEN,
    STRICT,
    Instances,
    JobName,
    LogLevel,
    NonEmpty,
    Port,
)
from shoal.spec.model import (
    Completion,
    JobSpec,
    SourceFormat,
    TaskRoleSpec,
)

# --- RL workflow configs (MARO v0.3) ---


class RawLogging(BaseModel):
    model_config = STRICT

    stdout: LogLevel
    file: LogLevel


class RawRlMain(BaseModel):
    model_config = OPEN

    num_episodes: Annotated[int, Field(ge=1)]
    num_steps: Annotated[int, Field(ge=1)] | None = None
    eval_schedule: Any = None  # a positive int or a list of them: checked by _eval_schedule
    min_n_sample: Annotated[int, Field(ge=1)] = 1
    logging: RawLogging | None = None


class RawController(BaseModel):
    model_config = OPEN

    host: str
    port: Port


class RawParallelism(BaseModel):
    model_config = OPEN

    sampling: Instances
    eval: Instances | None = None
    min_env_samples: Annotated[int, Field(ge=1)] | None = None
    grace_factor: Annotated[float, Field(ge=0)] | None = None
    controller: RawController | None = None


class RawRollout(BaseModel):
    model_config = OPEN

    parallelism: RawParallelism | None = None
    logging: RawLogging | None = None


class RawProxy(BaseModel):
    model_config = OPEN

    host: str
    frontend: Port
    backend: Port


class RawCheckpointing(BaseModel):
    model_config = OPEN

    path: NonEmpty
    interval: Annotated[int, Field(ge=1)] | None = None


class RawTraining(BaseModel):
    model_config = OPEN

    mode: Literal["simple", "parallel"]
    num_workers: Instances | None = None
    proxy: RawProxy | None = None
    load_path: NonEmpty | None = None
    load_episode: Annotated[int, Field(ge=0)] | None = None
    checkpointing: RawCheckpointing | None = None
    logging: RawLogging | None = None


class RawRlWorkflow(BaseModel):
    model_config = OPEN

    job: JobName
    scenario_path: NonEmpty
    log_path: NonEmpty
    main: RawRlMain
    rollout: RawRollout
    training: RawTraining


def read_rl_workflow(data: Mapping[str, Any], problems: ProblemCollector) -> JobSpec:
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
