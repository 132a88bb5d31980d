"""A task's variables, command line and starting directory, as the agent prepares them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import BinaryIO

from shoal.agent.cache import DATA_DIR
from shoal.agent.task_users import TaskUser
from shoal.protocol import LaunchOrder, fill_in

SHELL = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"
PASSED_THROUGH = ("HOME", "LANG", "LC_ALL", "TERM", "USER", "LOGNAME", "TMPDIR", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
COMMAND_VARIABLE = "SHOAL_COMMAND_WITH_SECRETS"


def fit_to_this_machine(inherited: dict[str, str]) -> dict[str, str]:
    """The submitter's variables, as far as they hold on this machine: PATH keeps only the
    directories that exist here (then this machine's PATH after them), and a HOME that does not
    exist here is dropped (the task's directory stands in). On the submitter's own machine, or on
    a shared filesystem, nothing changes; on another machine the task gets a working PATH."""
    env = dict(inherited)
    if "PATH" in env:
        kept = [d for d in env["PATH"].split(":") if d and os.path.isdir(d)]
        local = os.environ.get("PATH", DEFAULT_PATH).split(":")
        env["PATH"] = ":".join(dict.fromkeys([*kept, *local]))
    if "HOME" in env and not os.path.isdir(env["HOME"]):
        del env["HOME"]
    return env


def contract_environment(
    order: LaunchOrder, workdir: Path, user: TaskUser | None = None
) -> dict[str, str]:
    """The job's env and the env contract, with the paths of this attempt: what a task gets in
    either runtime (a container's image supplies the rest, such as PATH). A task that runs as
    its user gets that user's HOME (its own directory, or its account's), USER and LOGNAME."""
    env = dict(order.env)
    env["SHOAL_HOSTFILE"] = str(workdir / ".shoal" / "hostfile")
    env["SHOAL_WORKDIR"] = str(workdir)
    env["SHOAL_DATA_DIR"] = str(workdir / ".shoal" / DATA_DIR)
    if user is not None:
        env["HOME"] = user.home if user.home and os.path.isdir(user.home) else str(workdir)
        env["USER"] = env["LOGNAME"] = user.name
    return env


def process_environment(
    order: LaunchOrder, workdir: Path, user: TaskUser | None = None
) -> dict[str, str]:
    """The submitter's variables if the job carries them, else the agent's minimal set with
    its own Python first on PATH; then the job's env and the env contract over them."""
    if order.inherited_env is not None:
        env = fit_to_this_machine(order.inherited_env)
        env.setdefault("PATH", os.environ.get("PATH", DEFAULT_PATH))
    else:
        env = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
        own_bin = str(Path(sys.executable).parent)
        env["PATH"] = f"{own_bin}:{os.environ.get('PATH', DEFAULT_PATH)}"
    env.update(contract_environment(order, workdir, user))
    env.setdefault("HOME", str(workdir))
    return env


def shell_argv(order: LaunchOrder, env: dict[str, str]) -> list[str]:
    """``bash -c COMMAND``. A command with secrets is filled in here and handed to the shell
    through the environment (readable only by the task's own user, unlike the command line that
    ``ps`` shows to everyone) and unset before it runs; it is never stored or logged."""
    if not order.secrets:
        return [SHELL, "-c", order.command]
    env[COMMAND_VARIABLE] = fill_in(order.command, order.secrets)
    return [SHELL, "-c", f'eval "unset {COMMAND_VARIABLE}; ${COMMAND_VARIABLE}"']


def start_dir(
    order: LaunchOrder, private: Path, stderr: BinaryIO, user: TaskUser | None = None
) -> Path:
    """The directory the job was submitted from, for a job without code, if it exists here
    (and the task's user may enter it); otherwise the task's private directory (said on the
    task's stderr)."""
    if order.workdir is None or order.has_code:
        return private
    wanted = Path(order.workdir)
    if wanted.is_dir() and (user is None or user.can_enter(wanted)):
        return wanted
    why = "does not exist on this node"
    if wanted.is_dir():
        why = f"may not be entered by the task's user (uid {user.uid if user else '?'})"
    stderr.write(
        f"shoal: {wanted}, where the job was submitted from, {why}; "
        f"the task starts in {private}\n".encode()
    )
    stderr.flush()
    return private
