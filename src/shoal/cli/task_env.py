"""The environment and directory a submission hands its tasks (local mode).

Three levels of the submitting shell's variables, sent with the job:

- default: the variables that pick the interpreter and its libraries (``INHERITED``, ``LC_*``),
  so ``python`` in a task is the user's ``python``;
- ``--env-from-shell``: every variable, except shoal's own (``SHOAL_*``, credentials included)
  and the shell's bookkeeping (``SHELL_NOISE``);
- ``--no-inherit-env``: none (the agent's minimal environment, as a submission through the API
  without ``environment`` gets).

``--env K=V`` adds variables over the job file's ``env:``. The env contract is applied last.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from shoal.spec.patterns import ENV_NAME_RE

if TYPE_CHECKING:  # pydantic loads only when a job file is read
    from shoal.spec.model import JobSpec

INHERITED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "CONDA_EXE",
    "CONDA_PYTHON_EXE",
    "CONDA_SHLVL",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "LD_LIBRARY_PATH",
    "LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
)
INHERITED_PREFIXES = ("LC_",)
SHELL_NOISE = frozenset(
    {"PWD", "OLDPWD", "SHLVL", "_", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND"}
    | {"COLUMNS", "LINES", "HISTFILE", "HISTSIZE", "HISTFILESIZE", "HISTCONTROL"}
)
RESERVED_PREFIX = "SHOAL_"

ENV_OPTION = typer.Option(
    None, "--env", "-e", help="A variable for every task: NAME=VALUE (repeatable)."
)
FROM_SHELL_OPTION = typer.Option(
    False, "--env-from-shell", help="Tasks get this shell's whole environment (not SHOAL_*)."
)
NO_INHERIT_OPTION = typer.Option(
    False, "--no-inherit-env", help="Tasks get none of this shell's variables (PATH included)."
)


@dataclass(frozen=True)
class TaskEnvironment:
    env: dict[str, str]
    inherited: dict[str, str] | None

    def submit_fields(self, code: str | None) -> dict[str, Any]:
        """The submission's environment fields; a job with no code (``code``: its archive's
        sha256) starts in this directory."""
        return {
            "env": self.env,
            "environment": self.inherited,
            "workdir": str(Path.cwd()) if code is None else None,
        }


def parse_env(values: list[str] | None) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME_RE.match(name):
            raise typer.BadParameter(
                f"{item!r} is not NAME=VALUE with NAME made of letters, digits and '_' "
                "(not starting with a digit)",
                param_hint="--env",
            )
        env[name] = value
    return env


def shell_variables(environ: Mapping[str, str], whole_shell: bool) -> dict[str, str]:
    """The variables of ``environ`` a task inherits at the default level or (``whole_shell``)
    with ``--env-from-shell``."""
    chosen: dict[str, str] = {}
    for name, value in environ.items():
        if name.startswith(RESERVED_PREFIX) or not ENV_NAME_RE.match(name) or "\0" in value:
            continue
        if whole_shell:
            keep = name not in SHELL_NOISE
        else:
            keep = name in INHERITED or name.startswith(INHERITED_PREFIXES)
        if keep:
            chosen[name] = value
    return chosen


def task_environment(env: list[str] | None, from_shell: bool, no_inherit: bool) -> TaskEnvironment:
    """What the flags ask for, read from this process's environment."""
    if from_shell and no_inherit:
        raise typer.BadParameter(
            "--env-from-shell and --no-inherit-env contradict each other; choose one",
            param_hint="--no-inherit-env",
        )
    inherited = None if no_inherit else shell_variables(os.environ, from_shell)
    return TaskEnvironment(parse_env(env), inherited)


def uploaded_code_dir(job: JobSpec, job_file: Path) -> Path | None:
    """The local directory ``job submit`` uploads as the job's code (None: no code directory;
    HDFS and ``$VARIABLE`` paths are not uploaded)."""
    if job.code_dir is None or job.code_dir.startswith(("hdfs://", "$")):
        return None
    path = Path(job.code_dir)
    return path if path.is_absolute() else (job_file.parent / path).resolve()


def start_dir_note(job: JobSpec, job_file: Path, here: Path) -> str | None:
    """Where the tasks of a job without a code directory start, when submitted from ``here``."""
    if uploaded_code_dir(job, job_file) is not None:
        return None
    return (
        f"job {job.name} has no code directory: when submitted from here, its tasks start in "
        f"{here} (in local mode; an empty directory on a node where it does not exist)"
    )
