"""shoal's own job format (``version: 1``). Reference: ``docs/job-spec.md``."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shoal.spec.arrays import ArrayError, parse_array
from shoal.spec.checks import RolePaths, check_roles
from shoal.spec.diagnostics import salvage, under, validation_problems
from shoal.spec.errors import ProblemCollector, SpecError, SpecProblem
from shoal.spec.model import (
    MAX_GPUS_PER_INSTANCE,
    MAX_INSTANCES_PER_ROLE,
    MAX_PIDS,
    MAX_PORTS_PER_LABEL,
    MAX_RETRIES,
    Completion,
    JobSpec,
    PriorityClass,
    Resources,
    Runtime,
    SourceFormat,
    TaskRoleSpec,
)
from shoal.spec.patterns import (
    DATA_REF_PATTERN,
    ENV_NAME_PATTERN,
    JOB_NAME_PATTERN,
    PORT_LABEL_PATTERN,
    ROLE_NAME_PATTERN,
)
from shoal.spec.resources import ResourceReader
from shoal.spec.templating import NATIVE_TOKEN, missing_secrets, render

_STRICT = ConfigDict(extra="forbid", strict=True, populate_by_name=False)

EnvName = Annotated[str, Field(pattern=ENV_NAME_PATTERN)]
PortLabel = Annotated[str, Field(pattern=PORT_LABEL_PATTERN)]
RoleName = Annotated[str, Field(pattern=ROLE_NAME_PATTERN)]
DataRef = Annotated[str, Field(pattern=DATA_REF_PATTERN)]
DataRefs = Annotated[list[DataRef], Field(max_length=32)]
Scalar = str | int | float | bool


class RawResources(BaseModel):
    model_config = _STRICT

    cpu: int | float | str = 1
    memory: int | str = "1Gi"
    gpu: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_INSTANCE)] = 0
    gpu_type: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    ports: dict[PortLabel, Annotated[int, Field(ge=1, le=MAX_PORTS_PER_LABEL)]] = Field(
        default_factory=dict
    )
    shm: int | str | None = None
    pids: Annotated[int, Field(ge=8, le=MAX_PIDS)] | None = None


class RawCompletion(BaseModel):
    model_config = _STRICT

    min_failed: Annotated[int, Field(ge=-1)] | None = 1
    min_succeeded: Annotated[int, Field(ge=-1)] | None = None


class RawRole(BaseModel):
    model_config = _STRICT

    instances: Annotated[int, Field(ge=1, le=MAX_INSTANCES_PER_ROLE)] = 1
    image: Annotated[str, Field(min_length=1)] | None = None
    resources: RawResources = Field(default_factory=RawResources)
    command: str | Annotated[list[str], Field(min_length=1)]
    env: dict[EnvName, Scalar] = Field(default_factory=dict)
    completion: RawCompletion = Field(default_factory=RawCompletion)
    retries: Annotated[int, Field(ge=0, le=MAX_RETRIES)] = 0
    data: DataRefs = Field(default_factory=list)
    debug: bool = False
    debug_hold: int | str | None = None


class RawNativeJob(BaseModel):
    model_config = _STRICT

    version: Literal[1]
    name: Annotated[str, Field(pattern=JOB_NAME_PATTERN)]
    description: str | None = None
    vc: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    priority: Literal["crit", "prod", "test", "oppo"] = "test"
    runtime: Literal["process", "container"] | None = None
    gang: bool = True
    retries: Annotated[int, Field(ge=0, le=MAX_RETRIES)] = 0
    max_runtime: int | str | None = None
    interactive: bool = False
    code_dir: Annotated[str, Field(min_length=1)] | None = None
    data: DataRefs = Field(default_factory=list)
    env: dict[EnvName, Scalar] = Field(default_factory=dict)
    params: dict[str, Scalar] = Field(default_factory=dict)
    secrets: dict[str, Scalar] = Field(default_factory=dict)
    roles: Annotated[dict[RoleName, RawRole], Field(min_length=1)]
    array: Annotated[str, Field(min_length=1, max_length=1000)] | int | None = None


PATHS = RolePaths(
    role="roles.{role}",
    instances="roles.{role}.instances",
    command="roles.{role}.command",
    min_failed="roles.{role}.completion.min_failed",
    min_succeeded="roles.{role}.completion.min_succeeded",
    total="roles",
)


# What a required field holds while the rest of a refused file is checked (``salvage``).
STAND_INS = {"version": 1, "name": "job", "command": "true"}


def read_native(
    data: Mapping[str, Any], params: Mapping[str, str], problems: ProblemCollector
) -> JobSpec:
    try:
        raw = RawNativeJob.model_validate(data)
    except ValidationError as exc:
        refused = validation_problems(exc, RawNativeJob)
        later = _checks_after_validation(data, params, exc)
        seen = {(p.path, p.message) for p in refused}
        later = [p for p in later if (p.path, p.message) not in seen]
        raise SpecError(problems.errors + refused + later) from None
    return _job(raw, params, problems, frozenset())


def _checks_after_validation(
    data: Mapping[str, Any], params: Mapping[str, str], exc: ValidationError
) -> list[SpecProblem]:
    """The errors the checks after validation find in the fields pydantic accepted (a unit,
    a template, a duration), reported with pydantic's: one round of errors, not two. Fields it
    refused are left out, and so are checks across fields that read one of them."""
    salvaged = salvage(RawNativeJob, data, exc, STAND_INS)
    if salvaged is None:
        return []
    raw, changed = salvaged
    found = ProblemCollector()
    with contextlib.suppress(SpecError):  # what it found is in ``found``
        _job(raw, params, found, changed)
    return [p for p in found.errors if not under(p.path, changed)]


def _job(
    raw: RawNativeJob,
    params: Mapping[str, str],
    problems: ProblemCollector,
    changed: frozenset[str],
) -> JobSpec:
    """``changed``: the paths ``salvage`` took out or stood in for (none for a valid file)."""
    parameters = {k: _text(v) for k, v in raw.params.items()} | dict(params)
    for key in params:
        if key not in raw.params:
            problems.warn(f"params.{key}", "set with --param but not declared under params")
    max_runtime = None
    if raw.max_runtime is not None:
        max_runtime = ResourceReader(problems).duration(raw.max_runtime, "max_runtime")
    secrets = {k: _text(v) for k, v in raw.secrets.items()}
    templates = not any(under(path, ("params", "secrets")) for path in changed)
    roles = [
        _role(name, role, parameters, secrets, problems, templates)
        for name, role in raw.roles.items()
    ]
    if not any(under(path, ("roles",)) for path in changed):
        check_roles(roles, PATHS, problems)
    array = _array(raw.array, problems)
    problems.raise_if_errors()
    return JobSpec(
        name=raw.name,
        source_format=SourceFormat.NATIVE,
        description=raw.description,
        virtual_cluster=raw.vc,
        priority_class=PriorityClass(raw.priority),
        runtime=None if raw.runtime is None else Runtime(raw.runtime),
        gang=raw.gang,
        job_retry_count=raw.retries,
        max_runtime_s=max_runtime,
        interactive=raw.interactive,
        code_dir=raw.code_dir,
        data=tuple(dict.fromkeys(raw.data)),
        env={k: _text(v) for k, v in raw.env.items()},
        parameters=parameters,
        secrets=secrets,
        roles=tuple(roles),
        array=array,
    )


def _array(value: str | int | None, problems: ProblemCollector) -> str | None:
    """The job array's expression (``0-999%50``) if it is valid."""
    if value is None:
        return None
    try:
        return parse_array(str(value)).expression
    except ArrayError as exc:
        problems.error("array", exc.message, exc.hint)
        return None


def _role(
    name: str,
    raw: RawRole,
    parameters: Mapping[str, str],
    secrets: Mapping[str, str],
    problems: ProblemCollector,
    templates: bool = True,
) -> TaskRoleSpec:
    """``templates``: check the command's references (not when params or secrets were refused:
    a reference to one of them would be called undefined)."""
    base = f"roles.{name}"
    reader = ResourceReader(problems)
    res = raw.resources
    resources = Resources(
        cpu_millis=reader.cpu(res.cpu, f"{base}.resources.cpu"),
        memory_mib=reader.memory(res.memory, f"{base}.resources.memory"),
        gpu=res.gpu,
        gpu_type=res.gpu_type,
        ports=dict(res.ports),
        shm_mib=None if res.shm is None else reader.memory(res.shm, f"{base}.resources.shm"),
        pids=res.pids,
    )
    command = raw.command if isinstance(raw.command, str) else "\n".join(raw.command)
    rendered = render(command, {"params": parameters}, NATIVE_TOKEN)
    for ref in missing_secrets(rendered.secret_refs, secrets) if templates else ():
        problems.error(
            f"{base}.command",
            f"{{{{ {ref} }}}} names no entry in secrets",
            "declare it under secrets: (its value is filled in when the task starts)",
        )
    for ref in rendered.unresolved if templates else ():
        problems.error(
            f"{base}.command",
            f"{{{{ {ref} }}}} refers to an undefined value",
            "declare it under params: or pass --param NAME=VALUE",
        )
    return TaskRoleSpec(
        name=name,
        instances=raw.instances,
        resources=resources,
        command=rendered.text,
        image=raw.image,
        env={k: _text(v) for k, v in raw.env.items()},
        completion=Completion(
            min_failed=_policy(
                raw.completion.min_failed, f"{base}.completion.min_failed", problems, default=1
            ),
            min_succeeded=_policy(
                raw.completion.min_succeeded,
                f"{base}.completion.min_succeeded",
                problems,
                default=None,
            ),
        ),
        task_retry_count=raw.retries,
        data=tuple(dict.fromkeys(raw.data)),
        debug=raw.debug,
        debug_hold_s=_debug_hold(raw, base, reader, problems),
    )


def _debug_hold(
    raw: RawRole, base: str, reader: ResourceReader, problems: ProblemCollector
) -> int | None:
    """How long a failed task of the role is held (None: the server's default)."""
    if raw.debug_hold is None:
        return None
    if not raw.debug:
        problems.warn(
            f"{base}.debug_hold", "has no effect without debug: true (add it to hold failed tasks)"
        )
        return None
    return reader.duration(raw.debug_hold, f"{base}.debug_hold")


def _policy(
    value: int | None, path: str, problems: ProblemCollector, default: int | None
) -> int | None:
    """-1 and null mean "no threshold"; 0 is rejected rather than silently turned into 1."""
    if value is None:
        return default
    if value == -1:
        return None
    if value == 0:
        problems.error(path, "must be -1 or >= 1, got 0", "use -1 to disable the threshold")
        return default
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
