"""OpenPAI runtime plugins (``extras.com.microsoft.pai.runtimeplugin``, and prerequisites with
``plugin: com.microsoft.pai.runtimeplugin.cmd``), turned into what each task runs.

OpenPAI's runtime (``openpai-runtime:src/init.d/initializer.py``, ``src/plugins/*``) wrote each
plugin's commands into a script of its own, run before the task's commands (``precommands``) or
after them (``postcommands``, only once the commands succeeded), under ``set -o errexit`` unless
the plugin's ``failurePolicy`` is ``ignore``. shoal builds the same into the role's command (see
``shoal.spec.openpai_plugin_script``), so it runs alike in processes, containers and Pods:

- ``cmd``: ``preCommands`` / ``postCommands``, or ``callbacks`` (``taskStarts`` /
  ``taskSucceeds``; the runtime's older ``containerStarts`` / ``containerEnds`` too);
- ``git``: ``git clone [options] repo_uri`` (or ``repo``) into ``clone_dir`` before the commands;
- ``tensorboard``: TensorBoard on the first task of the first role, reading ``logdir``, on a port
  labelled ``tensorboard``.

Plugins run in order on a task's start (prerequisites first, in the role's order, then the extras
list), and in reverse order after its commands. A plugin's ``taskroles`` (``taskRoles``) limits it
to those roles. Any other plugin is warned about, by name. Each plugin is one function in
``PLUGINS``: a new one is a function and a line there.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from shoal.spec.diagnostics import describe
from shoal.spec.errors import ProblemCollector
from shoal.spec.openpai_plugin_script import Action, Step
from shoal.spec.openpai_ssh import PORT_LABEL as SSH_PORT_LABEL
from shoal.spec.openpai_ssh import read_settings as read_ssh_settings
from shoal.spec.templating import PAI_TOKEN, missing_secrets, render

EXTRAS_KEY = "com.microsoft.pai.runtimeplugin"
PREREQUISITE_PLUGIN_PREFIX = EXTRAS_KEY + "."
FAILURE_POLICIES = ("fail", "ignore")
PRE_EVENTS = ("taskStarts", "containerStarts")
POST_EVENTS = ("taskSucceeds", "containerEnds")
TENSORBOARD_PORT_LABEL = "tensorboard"
DEFAULT_CLONE_DIR = "$SHOAL_WORKDIR/code"
_CONFIG_KEYS = {"plugin", "parameters", "failurePolicy", "taskroles", "taskRoles"}


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """One plugin as the job file gives it."""

    name: str  # cmd, git, tensorboard, ssh, ...
    path: str  # where it is in the job file
    label: str  # how messages name it: "runtime plugin cmd", "prerequisite setup (cmd)"
    parameters: Mapping[str, Any]
    roles: frozenset[str] | None = None  # None: every role
    ignore_failures: bool = False


@dataclass(frozen=True, slots=True)
class PluginWork:
    """What a plugin adds to the tasks of the roles it applies to."""

    pre: tuple[Action, ...] = ()
    post: tuple[Action, ...] = ()
    ports: Mapping[str, int] = field(default_factory=dict)
    first_role_only: bool = False  # tensorboard: the job's first role ...
    first_task_only: bool = False  # ... and in it, the first task only


@dataclass(frozen=True, slots=True)
class ReadPlugin:
    config: PluginConfig
    work: PluginWork


@dataclass(slots=True)
class RolePlugins:
    """What the plugins of one role run around its commands, and the ports they need."""

    pre: list[Step] = field(default_factory=list)
    post: list[Step] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)


Handler = Callable[[PluginConfig, ProblemCollector], PluginWork | None]


# ---- reading the plugin lists ----


def read_plugin_list(
    value: Any, role_names: set[str], problems: ProblemCollector
) -> list[ReadPlugin]:
    """``extras.com.microsoft.pai.runtimeplugin``: the plugins shoal runs, in order."""
    base = f"extras.{EXTRAS_KEY}"
    if not isinstance(value, list):
        problems.error(base, f"must be a list of plugins, got {describe(value)}")
        return []
    found: list[ReadPlugin] = []
    for index, item in enumerate(value):
        path = f"{base}[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("plugin"), str):
            problems.error(path, "must be a mapping with a plugin name", "e.g. plugin: cmd")
            continue
        for key in item:
            if key not in _CONFIG_KEYS:
                problems.warn(f"{path}.{key}", "is not a runtime plugin setting; ignored")
        parameters = item.get("parameters") or {}
        if not isinstance(parameters, dict):
            problems.error(f"{path}.parameters", f"must be a mapping, got {describe(parameters)}")
            continue
        config = PluginConfig(
            name=item["plugin"],
            path=path,
            label=f"runtime plugin {item['plugin']}",
            parameters=parameters,
            roles=_roles(item, path, role_names, problems),
            ignore_failures=_ignores_failures(item.get("failurePolicy"), path, problems),
        )
        found.extend(_read(config, problems))
    return found


def read_prerequisite_plugin(
    index: int, name: str, plugin: str, fields: Mapping[str, Any], problems: ProblemCollector
) -> list[ReadPlugin]:
    """A prerequisite run by a plugin (``plugin: com.microsoft.pai.runtimeplugin.cmd``): its
    other keys (``callbacks``, ...) are the plugin's parameters, as OpenPAI's runtime read them."""
    path = f"prerequisites[{index}]"
    if not plugin.startswith(PREREQUISITE_PLUGIN_PREFIX):
        problems.warn(
            f"{path}.plugin",
            f"prerequisite plugin {plugin!r} is not run by shoal",
            f"OpenPAI ran only {PREREQUISITE_PLUGIN_PREFIX}<name> plugins here, such as "
            f"{PREREQUISITE_PLUGIN_PREFIX}cmd",
        )
        return []
    short = plugin.removeprefix(PREREQUISITE_PLUGIN_PREFIX)
    parameters = {k: v for k, v in fields.items() if k != "failurePolicy"}
    config = PluginConfig(
        name=short,
        path=path,
        label=f"prerequisite {name} ({short})",
        parameters=parameters,
        ignore_failures=_ignores_failures(fields.get("failurePolicy"), path, problems),
    )
    return _read(config, problems)


def _read(config: PluginConfig, problems: ProblemCollector) -> list[ReadPlugin]:
    handler = PLUGINS.get(config.name)
    if handler is None:
        problems.warn(config.path, f"runtime plugin {config.name!r} is not run by shoal")
        return []
    work = handler(config, problems)
    return [] if work is None else [ReadPlugin(config, work)]


def _roles(
    item: Mapping[str, Any], path: str, role_names: set[str], problems: ProblemCollector
) -> frozenset[str] | None:
    key = "taskroles" if "taskroles" in item else "taskRoles"
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
        problems.error(f"{path}.{key}", f"must be a list of task role names, got {describe(value)}")
        return None
    for position, role in enumerate(value):
        if role not in role_names:
            problems.error(
                f"{path}.{key}[{position}]",
                f"task role {role!r} does not exist",
                "known: " + ", ".join(sorted(role_names)),
            )
    return frozenset(value)


def _ignores_failures(value: Any, path: str, problems: ProblemCollector) -> bool:
    if value is None:
        return False
    if value not in FAILURE_POLICIES:
        problems.error(
            f"{path}.failurePolicy",
            f"must be one of {', '.join(FAILURE_POLICIES)}, got {describe(value)}",
        )
        return False
    return bool(value == "ignore")


def _commands(value: Any, path: str, problems: ProblemCollector) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(c, (str, int, float)) for c in value):
        # YAML reads an unquoted `true` or `false` command as a boolean: it is the command
        return [str(c).lower() if isinstance(c, bool) else str(c) for c in value]
    problems.error(path, f"must be a list of shell commands, got {describe(value)}")
    return None


def _unknown_parameters(
    config: PluginConfig, known: tuple[str, ...], problems: ProblemCollector
) -> None:
    for key in config.parameters:
        if key not in known:
            problems.warn(
                f"{config.path}.parameters.{key}",
                f"is not a parameter of the {config.name} plugin; ignored",
                "known: " + ", ".join(known),
            )


# ---- the plugins ----


def _cmd(config: PluginConfig, problems: ProblemCollector) -> PluginWork | None:
    params = config.parameters
    where = f"{config.path}.parameters" if config.path.startswith("extras") else config.path
    if "callbacks" in params:
        for key in ("preCommands", "postCommands"):
            if key in params:
                problems.error(
                    f"{where}.{key}",
                    "cannot be given with callbacks (OpenPAI's runtime refused both)",
                    "move the commands into a callback with event taskStarts or taskSucceeds",
                )
        return _callbacks(params["callbacks"], f"{where}.callbacks", problems)
    pre: list[Action] = []
    post: list[Action] = []
    for key, into in (("preCommands", pre), ("postCommands", post)):
        if key in params:
            commands = _commands(params[key], f"{where}.{key}", problems) or []
            into.extend(Action.command(text, f"{key}[{i}]") for i, text in enumerate(commands))
    if config.path.startswith("extras"):
        _unknown_parameters(config, ("preCommands", "postCommands", "callbacks"), problems)
    if not pre and not post:
        problems.warn(where, "the cmd plugin has no preCommands, postCommands or callbacks")
    return PluginWork(pre=tuple(pre), post=tuple(post))


def _callbacks(value: Any, path: str, problems: ProblemCollector) -> PluginWork | None:
    if not isinstance(value, list):
        problems.error(path, f"must be a list of {{event, commands}}, got {describe(value)}")
        return None
    pre: list[Action] = []
    post: list[Action] = []
    for index, callback in enumerate(value):
        at = f"{path}[{index}]"
        if not isinstance(callback, dict):
            problems.error(
                at, f"must be a mapping with event and commands, got {describe(callback)}"
            )
            continue
        event = callback.get("event")
        commands = _commands(callback.get("commands", []), f"{at}.commands", problems) or []
        if event in PRE_EVENTS:
            into = pre
        elif event in POST_EVENTS:
            into = post
        else:
            problems.error(
                f"{at}.event",
                f"must be one of {', '.join(PRE_EVENTS + POST_EVENTS)}, got {describe(event)}",
            )
            continue
        name = f"callbacks[{index}] ({event}) commands"
        into.extend(Action.command(text, f"{name}[{i}]") for i, text in enumerate(commands))
    return PluginWork(pre=tuple(pre), post=tuple(post))


def _git(config: PluginConfig, problems: ProblemCollector) -> PluginWork | None:
    params = config.parameters
    where = f"{config.path}.parameters"
    _unknown_parameters(config, ("repo_uri", "repo", "options", "clone_dir", "commit"), problems)
    repo = params.get("repo_uri", params.get("repo"))
    if not isinstance(repo, str) or not repo:
        problems.error(
            f"{where}.repo_uri", "the git plugin needs the repository to clone", "repo_uri: URL"
        )
        return None
    options = _commands(params.get("options", []), f"{where}.options", problems) or []
    try:
        words = [shlex.quote(w) for w in shlex.split(" ".join(options))]
    except ValueError as exc:
        problems.error(f"{where}.options", f"cannot be split into words: {exc}")
        return None
    target = params.get("clone_dir")
    if target is not None and (not isinstance(target, str) or not target):
        problems.error(f"{where}.clone_dir", f"must be a directory path, got {describe(target)}")
        return None
    quoted = DEFAULT_CLONE_DIR if target is None else _path_word(target)
    shown = target or DEFAULT_CLONE_DIR
    clone = " ".join(["git clone", *words, "--", shlex.quote(repo), quoted])
    actions = [
        Action.needs("git", "git"),
        Action.generated(clone, f"`git clone {repo}` into {shown}"),
    ]
    commit = params.get("commit")
    if commit is not None:
        if not isinstance(commit, str) or not commit or commit.startswith("-"):
            problems.error(f"{where}.commit", f"must be a commit or ref, got {describe(commit)}")
            return None
        checkout = f"git -C {quoted} checkout --quiet --detach {shlex.quote(commit)} --"
        actions.append(Action.generated(checkout, f"`git checkout {commit}` in {shown}"))
    return PluginWork(pre=tuple(actions))


def _path_word(path: str) -> str:
    """A path as one shell word, keeping a leading ``$VAR/`` or ``~/`` expandable."""
    for prefix in ("$SHOAL_WORKDIR/", "$HOME/", "~/"):
        if path.startswith(prefix):
            head = '"$HOME"/' if prefix == "~/" else f'"{prefix[:-1]}"/'
            return head + shlex.quote(path.removeprefix(prefix))
    return shlex.quote(path)


def _tensorboard(config: PluginConfig, problems: ProblemCollector) -> PluginWork | None:
    params = config.parameters
    where = f"{config.path}.parameters"
    _unknown_parameters(config, ("logdir", "port"), problems)
    logdir = params.get("logdir")
    if (
        not isinstance(logdir, dict)
        or not logdir
        or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in logdir.items())
    ):
        problems.error(
            f"{where}.logdir",
            f"must map names to log directories, got {describe(logdir)}",
            "e.g. logdir: {train: /mnt/tensorboard}",
        )
        return None
    if "port" in params:
        problems.warn(
            f"{where}.port",
            f"port {describe(params['port'])} is not used: TensorBoard listens on the task's "
            f"port labelled {TENSORBOARD_PORT_LABEL!r} ($SHOAL_PORT_{TENSORBOARD_PORT_LABEL}), "
            "which shoal chooses",
        )
    if len(logdir) == 1:
        source = "--logdir " + _path_word(next(iter(logdir.values())))
    else:
        spec = ",".join(f"{name}:{path}" for name, path in logdir.items())
        source = "--logdir_spec " + shlex.quote(spec)
    start = (
        f'tensorboard {source} --port "$SHOAL_PORT_{TENSORBOARD_PORT_LABEL}" --bind_all '
        "</dev/null &"
    )
    shown = ", ".join(logdir.values())
    return PluginWork(
        pre=(
            Action.needs("tensorboard", "tensorboard"),
            Action.generated(start, f"TensorBoard start (reading {shown})"),
        ),
        ports={TENSORBOARD_PORT_LABEL: 1},
        first_role_only=True,
        first_task_only=True,
    )


# One function per plugin: it checks the plugin's parameters and says what the plugin runs.
def _ssh(config: PluginConfig, problems: ProblemCollector) -> PluginWork | None:
    """The ssh plugin's own work is done on the whole job (``openpai_ssh.with_ssh_plugins``):
    here its parameters are checked, and its port asked for."""
    read_ssh_settings(config.parameters, config.path, problems)
    return PluginWork(ports={SSH_PORT_LABEL: 1})


PLUGINS: dict[str, Handler] = {
    "cmd": _cmd,
    "git": _git,
    "tensorboard": _tensorboard,
    "ssh": _ssh,
}


# ---- per role ----


def plugins_for_role(
    role: str,
    first_role: str,
    plugins: list[ReadPlugin],
    context: Mapping[str, Any],
    secrets: Mapping[str, Any],
    problems: ProblemCollector,
) -> RolePlugins:
    """The steps the plugins that apply to ``role`` run, with the role's ``<% %>`` context
    filled in (as OpenPAI's runtime rendered plugin parameters per task role)."""
    found = RolePlugins()
    for plugin in plugins:
        config, work = plugin.config, plugin.work
        if config.roles is not None and role not in config.roles:
            continue
        if work.first_role_only and role != first_role:
            continue
        found.ports.update(work.ports)
        for actions, into in ((work.pre, found.pre), (work.post, found.post)):
            if actions:
                rendered = tuple(
                    _render(a, config.path, context, secrets, problems) for a in actions
                )
                step = Step(config.label, rendered, config.ignore_failures, work.first_task_only)
                into.append(step)
    found.post.reverse()  # after the commands, the last plugin's run first (OpenPAI's order)
    return found


def _render(
    action: Action,
    path: str,
    context: Mapping[str, Any],
    secrets: Mapping[str, Any],
    problems: ProblemCollector,
) -> Action:
    text = render(action.text, context)
    for ref in sorted(set(text.unresolved)):
        _warn_once(problems, path, f"<% ${ref} %> is not defined and is left as it is")
    for ref in missing_secrets(text.secret_refs, secrets):
        if not any(p.path == path and ref in p.message for p in problems.errors):
            problems.error(
                path,
                f"<% ${ref} %> names no entry in secrets",
                "declare it under secrets: (its value is filled in when the task starts)",
            )
    shown = render(action.describe, context).text
    return replace(action, text=text.text, describe=_masked(shown))


def _warn_once(problems: ProblemCollector, path: str, message: str) -> None:
    """A warning about a plugin, said once however many roles the plugin applies to."""
    if not any(p.path == path and p.message == message for p in problems.warnings):
        problems.warn(path, message)


def _masked(text: str) -> str:
    """``text`` with every secret reference hidden, so a failure never shows a secret."""
    return PAI_TOKEN.sub(lambda m: "<secret>" if m.group(1) == "secrets" else m.group(0), text)
