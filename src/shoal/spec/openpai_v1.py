"""OpenPAI's legacy job config v1 (YARN era): JSON with ``jobName`` and a ``taskRoles`` list.

Fields and defaults follow OpenPAI's REST server schema (``src/rest-server/src/config/job.js``,
v0.14): only ``jobName``, ``image``, ``taskRoles[].name`` and ``taskRoles[].command`` are required;
``taskNumber``/``cpuNumber`` default to 1, ``memoryMB`` to 100 (and must be >= 100), ``shmMB`` to 64
(at most ``memoryMB``), ``gpuNumber`` to 0, ``portList[].portNumber`` to 1.

Completion policy, as FrameworkLauncher read it (``null`` is a value, not "use the default"):

- ``minFailedTaskCount`` absent: 1, i.e. one failed task fails the job (OpenPAI's default).
  ``null``: ``Completion.min_failed = None``, task failures never fail the job ("always succeed").
- ``minSucceededTaskCount`` absent or ``null``: ``Completion.min_succeeded = None``, the role has
  no say until all of its tasks have completed ("all complete").
- Numbers must be from 1 to ``taskNumber``; v2's ``-1`` and ``0`` are rejected with a hint.

Differences from OpenPAI, each reported as a warning where it applies: HDFS directories
(``codeDir``/``dataDir``/``outputDir``) are not fetched, only exported as ``$PAI_CODE_DIR``,
``$PAI_DATA_DIR``, ``$PAI_OUTPUT_DIR`` as OpenPAI did; ``portList[].beginAt`` is ignored because
shoal allocates ports; ``authFile``, ``extras``, ``killAllOnCompletedTaskNumber`` and the
``paiAzRDMA`` job env are not acted on; ``isDebug`` holds failed tasks (docs/debug-jobs.md).
Job names may not contain ``~``, which separates user and job in OpenPAI v2 job ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from shoal.spec.checks import MappedRolePaths, check_roles
from shoal.spec.diagnostics import PATTERN_WORDS, describe, validate_collecting
from shoal.spec.errors import ProblemCollector, SpecError
from shoal.spec.model import (
    MAX_GPUS_PER_INSTANCE,
    MAX_INSTANCES_PER_ROLE,
    MAX_PORTS_PER_LABEL,
    MAX_RETRIES,
    Completion,
    JobSpec,
    Resources,
    SourceFormat,
    TaskRoleSpec,
)
from shoal.spec.patterns import (
    ENV_NAME_PATTERN,
    JOB_NAME_PATTERN,
    JOB_NAME_RE,
    PORT_LABEL_PATTERN,
    ROLE_NAME_PATTERN,
)
from shoal.spec.resources import ResourceReader

_STRICT = ConfigDict(extra="forbid", strict=True)

Scalar = str | int | float | bool
IGNORED_JOB_ENVS = ("isDebug", "paiAzRDMA")
HDFS_PREFIXES = ("hdfs://", "$PAI_DEFAULT_FS_URI", "${PAI_DEFAULT_FS_URI}")


class RawPort(BaseModel):
    model_config = _STRICT

    label: Annotated[str, Field(pattern=PORT_LABEL_PATTERN)]
    beginAt: Annotated[int, Field(ge=0, le=65535)] = 0
    portNumber: Annotated[int, Field(ge=1, le=MAX_PORTS_PER_LABEL)] = 1


class RawTaskRole(BaseModel):
    model_config = _STRICT

    name: Annotated[str, Field(pattern=ROLE_NAME_PATTERN)]
    taskNumber: Annotated[int, Field(ge=1, le=MAX_INSTANCES_PER_ROLE)] = 1
    cpuNumber: Annotated[int, Field(ge=1)] = 1
    memoryMB: Annotated[int, Field(ge=100)] = 100
    shmMB: Annotated[int, Field(ge=1)] = 64
    gpuNumber: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_INSTANCE)] = 0
    portList: list[RawPort] = Field(default_factory=list)
    command: str
    minFailedTaskCount: int | None = None
    minSucceededTaskCount: int | None = None


class RawPaiV1Job(BaseModel):
    model_config = _STRICT

    jobName: Annotated[str, Field(min_length=1)]
    image: Annotated[str, Field(min_length=1)]
    authFile: str = ""
    dataDir: str = ""
    outputDir: str = ""
    codeDir: str = ""
    virtualCluster: Annotated[str, Field(max_length=64)] = ""
    gpuType: Annotated[str, Field(max_length=64)] = ""
    retryCount: Annotated[int, Field(ge=-2, le=MAX_RETRIES)] = 0
    killAllOnCompletedTaskNumber: int | None = None
    jobEnvs: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], Any] = Field(
        default_factory=dict
    )  # values: strings, numbers or booleans, checked by _job_env
    extras: dict[str, Any] | None = None
    taskRoles: Annotated[list[Any], Field(min_length=1)]  # each checked as a RawTaskRole


def role_paths(index_of: Mapping[str, int]) -> MappedRolePaths:
    return MappedRolePaths(
        role="taskRoles[{role}].name",
        instances="taskRoles[{role}].taskNumber",
        command="taskRoles[{role}].command",
        min_failed="taskRoles[{role}].minFailedTaskCount",
        min_succeeded="taskRoles[{role}].minSucceededTaskCount",
        total="taskRoles",
        key_of=index_of,
        disable_word="null",
    )


def read_pai_v1(data: Mapping[str, Any], problems: ProblemCollector) -> JobSpec:
    _check_job_name(data.get("jobName"), problems)
    raw = validate_collecting(RawPaiV1Job, data, problems)
    roles = _roles(data.get("taskRoles"), raw, problems)  # checked even if the top level failed
    if raw is None:
        raise SpecError(problems.errors)
    if raw.retryCount < 0:
        problems.error(
            "retryCount",
            f"{raw.retryCount} (retry without limit) is not supported",
            "give the number of times to retry the job, e.g. 3",
        )
    _warn_unused(raw, problems)
    env, code_dir = _job_env(raw, problems)
    problems.raise_if_errors()
    return JobSpec(
        name=raw.jobName,
        source_format=SourceFormat.PAI_V1,
        virtual_cluster=raw.virtualCluster or None,
        job_retry_count=max(raw.retryCount, 0),
        code_dir=code_dir,
        env=env,
        roles=tuple(roles),
    )


def _roles(items: Any, job: RawPaiV1Job | None, problems: ProblemCollector) -> list[TaskRoleSpec]:
    index_of: dict[str, int] = {}
    roles: list[TaskRoleSpec] = []
    for index, item in enumerate(items if isinstance(items, list) else []):
        raw = validate_collecting(RawTaskRole, item, problems, f"taskRoles[{index}]")
        if raw is None:
            continue
        role = _role(index, raw, job, problems)
        first = index_of.get(raw.name)
        if first is not None:
            problems.error(
                f"taskRoles[{index}].name",
                f"duplicate role name {raw.name!r} (also taskRoles[{first}])",
                "give each task role its own name",
            )
            continue
        index_of[raw.name] = index
        roles.append(role)
    check_roles(roles, role_paths(index_of), problems)
    return roles


def _check_job_name(name: object, problems: ProblemCollector) -> None:
    if not isinstance(name, str) or not name:
        return  # missing, empty or not a string: the model reports it
    if "~" in name:
        problems.error(
            "jobName",
            f"must not contain '~', got {describe(name)}",
            "'~' separates user and job in OpenPAI v2 job ids (alice~mnist); use '-' or '_'",
        )
    elif not JOB_NAME_RE.match(name):
        words, hint = PATTERN_WORDS[JOB_NAME_PATTERN]
        problems.error("jobName", f"{words}, got {describe(name)}", hint)


def _warn_unused(raw: RawPaiV1Job, problems: ProblemCollector) -> None:
    if raw.authFile:
        problems.warn(
            "authFile",
            "registry auth files are not read: shoal has no registry and pulls nothing",
            f"push the image once with `shoal image push {raw.image}`",
        )
    if raw.killAllOnCompletedTaskNumber is not None:
        problems.warn(
            "killAllOnCompletedTaskNumber",
            "is deprecated in OpenPAI and not acted on",
            "use taskRoles[].minSucceededTaskCount",
        )
    if raw.extras is not None:
        problems.warn("extras", "OpenPAI v1 extras are not acted on")
    for key in IGNORED_JOB_ENVS:
        if key in raw.jobEnvs and key != "isDebug":
            problems.warn(
                f"jobEnvs.{key}", f"{key} is an OpenPAI switch that shoal does not act on"
            )


def _job_env(raw: RawPaiV1Job, problems: ProblemCollector) -> tuple[dict[str, str], str | None]:
    """The job's env (``jobEnvs`` plus OpenPAI's directory variables) and its code directory."""
    env: dict[str, str] = {}
    for key, value in raw.jobEnvs.items():
        if not isinstance(value, str | int | float):
            problems.error(
                f"jobEnvs.{key}", f"must be a string, number or boolean, got {describe(value)}"
            )
        elif key not in IGNORED_JOB_ENVS:
            env[key] = _text(value)
    code_dir: str | None = None
    for key, var, value in (
        ("codeDir", "PAI_CODE_DIR", raw.codeDir),
        ("dataDir", "PAI_DATA_DIR", raw.dataDir),
        ("outputDir", "PAI_OUTPUT_DIR", raw.outputDir),
    ):
        if not value:
            continue
        if value.startswith(HDFS_PREFIXES):
            env.setdefault(var, value)
            problems.warn(
                key,
                f"HDFS paths are not fetched or mounted; the path is only exported as ${var}",
                "copy what the job needs into a local code directory, or fetch it in the command",
            )
        elif key == "codeDir":
            code_dir = value
        else:
            env.setdefault(var, value)
    return env, code_dir


def _role(
    index: int, raw: RawTaskRole, job: RawPaiV1Job | None, problems: ProblemCollector
) -> TaskRoleSpec:
    base = f"taskRoles[{index}]"
    reader = ResourceReader(problems)
    if raw.shmMB > raw.memoryMB:
        problems.error(
            f"{base}.shmMB",
            f"is {raw.shmMB} MB, more than the task's memoryMB ({raw.memoryMB})",
            "shared memory counts against the task's memory; lower shmMB or raise memoryMB",
        )
    resources = Resources(
        cpu_millis=reader.cpu(raw.cpuNumber, f"{base}.cpuNumber"),
        memory_mib=reader.memory(raw.memoryMB, f"{base}.memoryMB"),
        gpu=raw.gpuNumber,
        gpu_type=(job.gpuType or None) if job else None,
        ports=_ports(base, raw.portList, problems),
        shm_mib=raw.shmMB,
    )
    return TaskRoleSpec(
        name=raw.name,
        instances=raw.taskNumber,
        resources=resources,
        command=raw.command,
        image=job.image if job else None,
        completion=_completion(base, raw, problems),
        debug=job is not None and job.jobEnvs.get("isDebug") in (True, "true"),
    )


def _ports(base: str, ports: list[RawPort], problems: ProblemCollector) -> dict[str, int]:
    found: dict[str, int] = {}
    for index, port in enumerate(ports):
        path = f"{base}.portList[{index}]"
        if port.label in found:
            problems.error(f"{path}.label", f"duplicate port label {port.label!r}")
        found[port.label] = port.portNumber
        if port.beginAt:
            problems.warn(
                f"{path}.beginAt",
                f"is ignored: shoal allocates the {port.portNumber} {port.label!r} port(s)",
                f"read them from $PAI_PORT_LIST_<role>_<index>_{port.label}",
            )
    return found


def _completion(base: str, raw: RawTaskRole, problems: ProblemCollector) -> Completion:
    given = raw.model_fields_set
    min_failed = raw.minFailedTaskCount if "minFailedTaskCount" in given else 1
    min_succeeded = raw.minSucceededTaskCount
    for key, value, meaning in (
        ("minFailedTaskCount", min_failed, "task failures should never fail the job"),
        ("minSucceededTaskCount", min_succeeded, "the job should wait for all tasks"),
    ):
        if value is not None and value < 1:
            problems.error(
                f"{base}.{key}",
                f"must be null or an integer >= 1, got {value}",
                f"use null if {meaning}",
            )
    return Completion(
        min_failed=min_failed if min_failed is None or min_failed >= 1 else 1,
        min_succeeded=min_succeeded if min_succeeded is None or min_succeeded >= 1 else None,
    )


def _text(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
