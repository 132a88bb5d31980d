"""OpenPAI job protocol v2 (``protocolVersion: 2``), as OpenPAI's REST server enforced it.

Differences from OpenPAI, on purpose (each is reported as a warning where it applies):
- ``taskRetryCount`` is honoured with gang allocation too (OpenPAI ignored it unless
  ``extras.gangAllocation: false``);
- ``minFailedInstances: 0`` is read as 1, as OpenPAI did, but said out loud;
- ``jobPriorityClass: crit`` is accepted (the published spec lists it; the server rejected it);
- runtime plugins (``extras.com.microsoft.pai.runtimeplugin``, prerequisites with a ``plugin``)
  are run as shoal.spec.openpai_plugins says; the others are warned about;
- output/script prerequisites are exposed to ``<% %>`` templates but not fetched; a data
  prerequisite whose ``uri`` is ``shoal://NAME`` (or ``shoal://OWNER/NAME``) declares that shoal
  data set for the role, and ``<% $data.uri[0] %>`` renders to ``$SHOAL_DATA_DIR/NAME``, where the
  agent puts it; other data URIs are left as they are and not fetched (a warning says so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shoal.spec.checks import RolePaths, check_roles
from shoal.spec.diagnostics import validation_problems
from shoal.spec.errors import ProblemCollector, SpecError
from shoal.spec.model import (
    MAX_CPU_MILLIS,
    MAX_GPUS_PER_INSTANCE,
    MAX_INSTANCES_PER_ROLE,
    MAX_MEMORY_MIB,
    MAX_PORTS_PER_LABEL,
    MAX_RETRIES,
    Completion,
    JobSpec,
    PriorityClass,
    Resources,
    SourceFormat,
    TaskRoleSpec,
)
from shoal.spec.openpai_plugin_script import wrap
from shoal.spec.openpai_plugins import ReadPlugin, plugins_for_role, read_prerequisite_plugin
from shoal.spec.openpai_ssh import with_ssh_plugins
from shoal.spec.openpai_v2_extras import ExtrasView, read_extras
from shoal.spec.patterns import (
    DATA_REF_RE,
    PAI_JOB_NAME_PATTERN,
    PORT_LABEL_PATTERN,
    ROLE_NAME_PATTERN,
)
from shoal.spec.templating import missing_secrets, render

_STRICT = ConfigDict(extra="forbid", strict=True)
SHOAL_DATA_SCHEME = "shoal://"
PrereqType = Literal["dockerimage", "script", "output", "data"]


class RawPrerequisite(BaseModel):
    """A prerequisite; script/output/data items may carry plugin-specific keys."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: Annotated[str, Field(min_length=1)]
    type: PrereqType
    protocolVersion: int | str | None = None
    version: str | int | float | None = None
    contributor: str | None = None
    description: str | None = None
    uri: str | list[str] | None = None
    auth: dict[str, Any] | None = None
    plugin: str | None = None
    require: list[str] | None = None


class RawCompletion(BaseModel):
    model_config = _STRICT

    minFailedInstances: Annotated[int, Field(ge=-1)] | None = None
    minSucceededInstances: Annotated[int, Field(ge=-1)] | None = None


class RawResourcePerInstance(BaseModel):
    model_config = _STRICT

    cpu: Annotated[int, Field(ge=1, le=MAX_CPU_MILLIS // 1000)]
    memoryMB: Annotated[int, Field(ge=1, le=MAX_MEMORY_MIB)]
    gpu: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_INSTANCE)]
    ports: (
        Annotated[
            dict[
                Annotated[str, Field(pattern=PORT_LABEL_PATTERN)],
                Annotated[int, Field(ge=1, le=MAX_PORTS_PER_LABEL)],
            ],
            Field(min_length=1),
        ]
        | None
    ) = None


class RawContainerOptions(BaseModel):
    model_config = _STRICT

    shmMB: Annotated[int, Field(ge=1, le=MAX_MEMORY_MIB)] | None = None
    infiniband: bool | None = None


class RawTaskRole(BaseModel):
    model_config = _STRICT

    instances: Annotated[int, Field(ge=1, le=MAX_INSTANCES_PER_ROLE)] = 1
    completion: RawCompletion = Field(default_factory=RawCompletion)
    taskRetryCount: Annotated[int, Field(ge=0, le=MAX_RETRIES)] = 0
    prerequisites: list[str] | None = None
    dockerImage: Annotated[str, Field(min_length=1)]
    data: str | None = None
    output: str | None = None
    script: str | None = None
    extraContainerOptions: RawContainerOptions | None = None
    resourcePerInstance: RawResourcePerInstance
    commands: Annotated[list[str], Field(min_length=1)]


class RawDeploymentRole(BaseModel):
    model_config = _STRICT

    preCommands: Annotated[list[str], Field(min_length=1)] | None = None
    postCommands: Annotated[list[str], Field(min_length=1)] | None = None


class RawDeployment(BaseModel):
    model_config = _STRICT

    name: Annotated[str, Field(min_length=1)]
    taskRoles: dict[str, RawDeploymentRole]


class RawDefaults(BaseModel):
    model_config = _STRICT

    virtualCluster: Annotated[str, Field(min_length=1)] | None = None
    deployment: Annotated[str, Field(min_length=1)] | None = None


class RawPaiJob(BaseModel):
    model_config = _STRICT

    protocolVersion: Literal[2, "2"]
    name: Annotated[str, Field(pattern=PAI_JOB_NAME_PATTERN)]
    type: Literal["job"]
    version: str | int | float | None = None
    contributor: str | None = None
    description: str | None = None
    prerequisites: Annotated[list[RawPrerequisite], Field(min_length=1)] | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    secrets: dict[str, Any] = Field(default_factory=dict)
    jobRetryCount: Annotated[int, Field(ge=0, le=MAX_RETRIES)] = 0
    taskRoles: Annotated[
        dict[Annotated[str, Field(pattern=ROLE_NAME_PATTERN)], RawTaskRole], Field(min_length=1)
    ]
    deployments: Annotated[list[RawDeployment], Field(min_length=1)] | None = None
    defaults: RawDefaults | None = None
    extras: dict[str, Any] | None = None


PATHS = RolePaths(
    role="taskRoles.{role}",
    instances="taskRoles.{role}.instances",
    command="taskRoles.{role}.commands",
    min_failed="taskRoles.{role}.completion.minFailedInstances",
    min_succeeded="taskRoles.{role}.completion.minSucceededInstances",
    total="taskRoles",
)


def read_pai_v2(
    data: Mapping[str, Any], params: Mapping[str, str], problems: ProblemCollector
) -> JobSpec:
    try:
        raw = RawPaiJob.model_validate(data)
    except ValidationError as exc:
        raise SpecError(problems.errors + validation_problems(exc, RawPaiJob)) from None
    prereqs = _index_prerequisites(raw, problems)
    prereq_plugins = _prerequisite_plugins(raw, problems)
    deployment = _default_deployment(raw, problems)
    extras = read_extras(raw.extras or {}, set(raw.taskRoles), problems)
    parameters = {k: _text(v) for k, v in raw.parameters.items()} | dict(params)
    for key in params:
        if key not in raw.parameters:
            problems.warn(f"parameters.{key}", "set with --param but not declared in parameters")
    roles = [
        _role(name, role, raw, prereqs, deployment, parameters, extras, problems, prereq_plugins)
        for name, role in raw.taskRoles.items()
    ]
    check_roles(roles, PATHS, problems)
    problems.raise_if_errors()
    spec = JobSpec(
        name=raw.name,
        source_format=SourceFormat.PAI_V2,
        description=raw.description,
        virtual_cluster=raw.defaults.virtualCluster if raw.defaults else None,
        priority_class=PriorityClass(extras.priority_class),
        gang=extras.gang,
        job_retry_count=raw.jobRetryCount,
        parameters=parameters,
        secrets={k: _text(v) for k, v in raw.secrets.items()},
        roles=tuple(roles),
    )
    return with_ssh_plugins(spec, extras.plugins)  # sshd first in every task (openpai_ssh)


def _index_prerequisites(
    raw: RawPaiJob, problems: ProblemCollector
) -> dict[str, dict[str, RawPrerequisite]]:
    by_type: dict[str, dict[str, RawPrerequisite]] = {}
    for index, item in enumerate(raw.prerequisites or []):
        same_type = by_type.setdefault(item.type, {})
        if item.name in same_type:
            problems.error(
                f"prerequisites[{index}].name",
                f"duplicate {item.type} prerequisite {item.name!r}",
                "give each prerequisite of a type its own name",
            )
        same_type[item.name] = item
        _check_prerequisite(index, item, problems)
    return by_type


def _prerequisite_plugins(
    raw: RawPaiJob, problems: ProblemCollector
) -> dict[str, list[ReadPlugin]]:
    """The prerequisites run by a runtime plugin, by name (a role runs those it lists)."""
    found: dict[str, list[ReadPlugin]] = {}
    for index, item in enumerate(raw.prerequisites or []):
        if item.plugin is not None and item.type != "dockerimage":
            extra = dict(item.model_extra or {})
            found[item.name] = read_prerequisite_plugin(
                index, item.name, item.plugin, extra, problems
            )
    return found


def _check_prerequisite(index: int, item: RawPrerequisite, problems: ProblemCollector) -> None:
    path = f"prerequisites[{index}]"
    if item.type == "dockerimage":
        if not isinstance(item.uri, str) or not item.uri:
            problems.error(f"{path}.uri", "a dockerimage prerequisite needs an image uri string")
        for key in item.model_extra or {}:
            problems.error(f"{path}.{key}", "unknown field for a dockerimage prerequisite")
        if item.auth is not None:
            problems.warn(
                f"{path}.auth",
                "registry credentials are not used: shoal has no registry and pulls nothing; "
                "images come from the cluster's own store",
                f"push the image once with `shoal image push {item.uri}`"
                if isinstance(item.uri, str)
                else "push the image once with `shoal image push NAME:TAG`",
            )
        return
    if item.plugin is not None:
        return  # run by its plugin (_prerequisite_plugins), when shoal has it
    if item.type == "data":
        uris = [item.uri] if isinstance(item.uri, str) else list(item.uri or [])
        foreign = [uri for uri in uris if not _is_shoal_data(uri)]
        if foreign:
            problems.warn(
                f"{path}.uri",
                f"data uri {foreign[0]!r} is not fetched by shoal; it is only available to "
                "<% $data %> templates",
                "push the data with `shoal data push` and name it as shoal://NAME",
            )
    else:
        problems.warn(
            path,
            f"{item.type} prerequisite {item.name!r} is not fetched; it is only available to "
            f"<% ${item.type} %> templates",
        )


def _default_deployment(raw: RawPaiJob, problems: ProblemCollector) -> RawDeployment | None:
    names: dict[str, RawDeployment] = {}
    for index, deployment in enumerate(raw.deployments or []):
        if deployment.name in names:
            problems.error(
                f"deployments[{index}].name", f"duplicate deployment {deployment.name!r}"
            )
        names[deployment.name] = deployment
        for role in deployment.taskRoles:
            if role not in raw.taskRoles:
                problems.error(
                    f"deployments[{index}].taskRoles.{role}",
                    f"task role {role!r} does not exist",
                    "known task roles: " + ", ".join(raw.taskRoles),
                )
    wanted = raw.defaults.deployment if raw.defaults else None
    if wanted is None:
        if names:
            problems.warn("deployments", "no defaults.deployment is set, so no deployment is used")
        return None
    if wanted not in names:
        problems.error(
            "defaults.deployment",
            f"deployment {wanted!r} does not exist",
            "known deployments: " + (", ".join(names) or "none (add a deployments: list)"),
        )
        return None
    return names[wanted]


def _role(
    name: str,
    raw: RawTaskRole,
    job: RawPaiJob,
    prereqs: dict[str, dict[str, RawPrerequisite]],
    deployment: RawDeployment | None,
    parameters: dict[str, str],
    extras: ExtrasView,
    problems: ProblemCollector,
    prereq_plugins: dict[str, list[ReadPlugin]] | None = None,
) -> TaskRoleSpec:
    base = f"taskRoles.{name}"
    image = _reference(prereqs, "dockerimage", raw.dockerImage, f"{base}.dockerImage", problems)
    context: dict[str, Any] = {"parameters": parameters}
    data_sets: tuple[str, ...] = ()
    for kind in ("data", "output", "script"):
        ref = getattr(raw, kind)
        if ref is not None:
            found = _reference(prereqs, kind, ref, f"{base}.{kind}", problems)
            if found is not None:
                context[kind] = found.model_dump(exclude_none=True)
                if kind == "data":
                    data_sets = _shoal_data(context[kind])
    all_names = {n for group in prereqs.values() for n in group}
    for index, ref in enumerate(raw.prerequisites or []):
        if ref not in all_names:
            problems.error(f"{base}.prerequisites[{index}]", f"prerequisite {ref!r} does not exist")
    command = _entrypoint(name, raw, deployment)
    rendered = render(command, context)
    for ref in sorted(set(rendered.unresolved)):
        problems.warn(f"{base}.commands", f"<% ${ref} %> is not defined and is left as it is")
    for ref in missing_secrets(rendered.secret_refs, job.secrets):
        problems.error(
            f"{base}.commands",
            f"<% ${ref} %> names no entry in secrets",
            "declare it under secrets: (its value is filled in when the task starts)",
        )
    plugins = [p for ref in raw.prerequisites or [] for p in (prereq_plugins or {}).get(ref, [])]
    steps = plugins_for_role(
        name, next(iter(job.taskRoles)), plugins + extras.plugins, context, job.secrets, problems
    )
    if raw.taskRetryCount and extras.gang:
        problems.warn(
            f"{base}.taskRetryCount",
            "OpenPAI ignored taskRetryCount for gang-allocated jobs; shoal honours it",
        )
    return TaskRoleSpec(
        name=name,
        instances=raw.instances,
        resources=_resources(raw, extras.sku_types.get(name), base, problems, steps.ports),
        command=wrap(rendered.text, steps.pre, steps.post),
        image=image.uri if image is not None and isinstance(image.uri, str) else None,
        completion=_completion(raw, base, problems),
        task_retry_count=raw.taskRetryCount,
        data=data_sets,
        debug=extras.debug,
    )


def _is_shoal_data(uri: str) -> bool:
    return uri.startswith(SHOAL_DATA_SCHEME) and bool(
        DATA_REF_RE.match(uri.removeprefix(SHOAL_DATA_SCHEME))
    )


def _shoal_data(item: dict[str, Any]) -> tuple[str, ...]:
    """The shoal data sets a data prerequisite names (``uri: shoal://[OWNER/]NAME``); its uris
    are rewritten in place to where the task finds them (``$SHOAL_DATA_DIR/[OWNER/]NAME``)."""
    uris = item.get("uri")
    listed = [uris] if isinstance(uris, str) else list(uris or [])
    refs: list[str] = []
    rewritten: list[str] = []
    for uri in listed:
        if _is_shoal_data(uri):
            ref = uri.removeprefix(SHOAL_DATA_SCHEME)
            refs.append(ref)
            rewritten.append(f"$SHOAL_DATA_DIR/{ref}")
        else:
            rewritten.append(uri)  # warned with its prerequisite: not fetched
    item["uri"] = rewritten if not isinstance(uris, str) else rewritten[0]
    return tuple(dict.fromkeys(refs))


def _reference(
    prereqs: dict[str, dict[str, RawPrerequisite]],
    kind: str,
    name: str,
    path: str,
    problems: ProblemCollector,
) -> RawPrerequisite | None:
    found = prereqs.get(kind, {}).get(name)
    if found is None:
        known = ", ".join(prereqs.get(kind, {})) or "none"
        problems.error(
            path,
            f"{kind} prerequisite {name!r} does not exist",
            f"declare it under prerequisites with type: {kind} (known: {known})",
        )
    return found


def _entrypoint(name: str, raw: RawTaskRole, deployment: RawDeployment | None) -> str:
    lines = list(raw.commands)
    if deployment is not None and name in deployment.taskRoles:
        hooks = deployment.taskRoles[name]
        lines = (hooks.preCommands or []) + lines + (hooks.postCommands or [])
    return "\n".join(line.rstrip("\n") for line in lines)


def _resources(
    raw: RawTaskRole,
    gpu_type: str | None,
    base: str,
    problems: ProblemCollector,
    plugin_ports: Mapping[str, int] | None = None,
) -> Resources:
    res = raw.resourcePerInstance
    ports = dict(plugin_ports or {}) | dict(res.ports or {})
    ports.setdefault("http", 1)  # OpenPAI adds ssh and http; the host lists use http.
    ports.setdefault("ssh", 1)
    options = raw.extraContainerOptions
    if options is not None and options.infiniband:
        problems.warn(f"{base}.extraContainerOptions.infiniband", "InfiniBand is not managed yet")
    return Resources(
        cpu_millis=res.cpu * 1000,
        memory_mib=res.memoryMB,
        gpu=res.gpu,
        gpu_type=gpu_type,
        ports=ports,
        shm_mib=options.shmMB if options is not None else None,
    )


def _completion(raw: RawTaskRole, base: str, problems: ProblemCollector) -> Completion:
    min_failed: int | None = raw.completion.minFailedInstances
    if min_failed == 0:
        problems.warn(
            f"{base}.completion.minFailedInstances",
            "0 is read as 1 (as OpenPAI did); use -1 if failures should never fail the job",
        )
    if min_failed is None or min_failed == 0:
        min_failed = 1
    elif min_failed == -1:
        min_failed = None
    min_succeeded: int | None = raw.completion.minSucceededInstances
    if min_succeeded is None or min_succeeded == 0:
        min_succeeded = raw.instances
    elif min_succeeded == -1:
        min_succeeded = None
    return Completion(min_failed=min_failed, min_succeeded=min_succeeded)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return "" if value is None else str(value)
