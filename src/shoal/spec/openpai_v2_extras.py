"""OpenPAI ``extras``: the keys shoal acts on, and a warning for every key it does not.

Runtime plugins (``com.microsoft.pai.runtimeplugin``) are read by shoal.spec.openpai_plugins."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shoal.spec.diagnostics import describe
from shoal.spec.errors import ProblemCollector
from shoal.spec.openpai_plugins import ReadPlugin, read_plugin_list

PRIORITY_CLASSES = ("crit", "prod", "test", "oppo")
_HIVED_PASSTHROUGH = ("gangReleaseEnable", "lazyPreemptionEnable", "ignoreK8sSuggestedNodes")
_ROLE_KEYS = ("skuType", "pinnedCellId", "affinityGroupName", "skuNumber", "skuNum")


@dataclass(slots=True)
class ExtrasView:
    gang: bool = True
    priority_class: str = "test"
    sku_types: dict[str, str] = field(default_factory=dict)
    debug: bool = False  # ``jobEnvs.isDebug``: failed tasks are held (docs/debug-jobs.md)
    plugins: list[ReadPlugin] = field(default_factory=list)  # the runtime plugins shoal runs


def read_extras(
    extras: Mapping[str, Any], role_names: set[str], problems: ProblemCollector
) -> ExtrasView:
    view = ExtrasView()
    for key, value in extras.items():
        path = f"extras.{key}"
        if key == "gangAllocation":
            if isinstance(value, bool):
                view.gang = value
            else:
                problems.error(path, f"must be true or false, got {describe(value)}")
        elif key == "hivedScheduler":
            _read_hived(value, role_names, view, problems)
        elif key == "com.microsoft.pai.runtimeplugin":
            view.plugins = read_plugin_list(value, role_names, problems)
        elif key == "jobEnvs":
            view.debug = _read_job_envs(value, problems)
        else:
            problems.warn(path, "is not acted on by shoal")
    return view


def _read_job_envs(value: Any, problems: ProblemCollector) -> bool:
    """OpenPAI's job switches: ``isDebug`` holds failed tasks for debugging; the others are
    warned about. Returns whether the job is a debug job."""
    base = "extras.jobEnvs"
    if not isinstance(value, dict):
        problems.error(base, f"must be a mapping, got {describe(value)}")
        return False
    debug = False
    for key, item in value.items():
        if key == "isDebug":
            if isinstance(item, bool):
                debug = item
            else:
                problems.error(f"{base}.isDebug", f"must be true or false, got {describe(item)}")
        else:
            problems.warn(f"{base}.{key}", "is not acted on by shoal")
    return debug


def _read_hived(
    value: Any, role_names: set[str], view: ExtrasView, problems: ProblemCollector
) -> None:
    base = "extras.hivedScheduler"
    if not isinstance(value, dict):
        problems.error(base, f"must be a mapping, got {describe(value)}")
        return
    for key, item in value.items():
        path = f"{base}.{key}"
        if key == "jobPriorityClass":
            if item in PRIORITY_CLASSES:
                view.priority_class = item
            else:
                problems.error(
                    path, f"must be one of {', '.join(PRIORITY_CLASSES)}, got {describe(item)}"
                )
        elif key == "taskRoles":
            _read_hived_roles(item, role_names, view, problems)
        elif key in _HIVED_PASSTHROUGH:
            problems.warn(path, "is a HiveD tuning knob that shoal does not use")
        else:
            problems.warn(path, "is not acted on by shoal")


def _read_hived_roles(
    value: Any, role_names: set[str], view: ExtrasView, problems: ProblemCollector
) -> None:
    base = "extras.hivedScheduler.taskRoles"
    if not isinstance(value, dict):
        problems.error(base, f"must be a mapping, got {describe(value)}")
        return
    for role, settings in value.items():
        path = f"{base}.{role}"
        if role not in role_names:
            problems.error(
                path,
                f"task role {role!r} does not exist",
                "known: " + ", ".join(sorted(role_names)),
            )
            continue
        if not isinstance(settings, dict):
            problems.error(path, f"must be a mapping, got {describe(settings)}")
            continue
        if settings.get("skuType") is not None and settings.get("pinnedCellId") is not None:
            problems.error(path, "sets both skuType and pinnedCellId", "keep only one of them")
        for key, item in settings.items():
            _read_hived_role_key(role, key, item, f"{path}.{key}", view, problems)


def _read_hived_role_key(
    role: str, key: str, item: Any, path: str, view: ExtrasView, problems: ProblemCollector
) -> None:
    if key == "skuType":
        if isinstance(item, str) and item:
            view.sku_types[role] = item
        elif item is not None:
            problems.error(path, f"must be a GPU type name, got {describe(item)}")
    elif key in ("skuNumber", "skuNum"):
        problems.warn(path, "is not read: the number of GPUs comes from resourcePerInstance.gpu")
    elif key == "pinnedCellId":
        problems.warn(path, "pinned cells are not supported; the task may run on any node")
    elif key == "affinityGroupName":
        problems.warn(
            path, "role-level affinity groups are not supported; the whole job is one gang"
        )
    elif key not in _ROLE_KEYS:
        problems.warn(path, "is not acted on by shoal")
