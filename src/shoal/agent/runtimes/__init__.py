"""How an agent runs a task: the runtime interface and its two runtimes (docs/containers.md).

The agent decides (what to launch, when to signal, what an exit means); a runtime only turns a
task into the command its keeper starts (``prepare``), ends what a task left behind
(``cleanup``), and runs another command in a running task's environment (``exec_argv``, for
``shoal job exec`` and the dashboard's terminal). Waiting, signalling, usage, limits and output are
the same for both: the keeper waits for and signals the command's process group, the task's
cgroup (shoal.agent.cgroups) limits, measures and finally empties it, and the command's stdout and
stderr are the task's log files.

- ``process`` (shoal.agent.runtimes.process): ``bash -c COMMAND`` as a child of the keeper.
- ``container`` (shoal.agent.runtimes.container): the same command in an OCI container from the
  role's image, run by podman with the host's network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from shoal.agent.cgroups import TaskCgroup
from shoal.protocol import LaunchOrder

if TYPE_CHECKING:
    from shoal.agent.task_users import TaskUser


@dataclass(frozen=True, slots=True)
class TaskSetup:
    """What the agent prepared for one attempt, before its runtime turns it into a command."""

    order: LaunchOrder
    workdir: Path  # the attempt's private directory (its code, .shoal/hostfile, data links)
    start_dir: Path  # where the command starts
    attempt_dir: Path  # the agent's own record of the attempt (keeper's exit.json)
    env: dict[str, str]  # the task's variables: the env contract and the job's env
    shell_argv: list[str]  # the command as the process runtime runs it (``bash -c ...``)
    cgroup: TaskCgroup | None  # None: this node cannot limit tasks (said on the task's stderr)
    data_root: Path  # the node's data set cache, which the data links point into
    user: TaskUser | None = None  # whose identity it runs under (None: the agent's own)


@dataclass(frozen=True, slots=True)
class Launch:
    """What the keeper starts: ``argv`` in ``cwd`` with ``env``, after joining ``join``."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    join: list[str] = field(default_factory=list)


class Runtime(Protocol):
    name: str

    def unavailable(self) -> str | None:
        """None when tasks can run here; else why not, and what fixes it."""

    def refused_limits(self) -> dict[str, str]:
        """Limits this runtime cannot hold here, beyond the cgroup's, with why."""

    def prepare(self, setup: TaskSetup) -> Launch:
        """The keeper's command for this attempt (raises LaunchRefused when it cannot be run)."""

    def cleanup(self, attempt_id: str) -> None:
        """End what is left of the attempt outside its process group and cgroup."""

    def exec_argv(self, setup: TaskSetup, argv: list[str], tty: bool) -> Launch:
        """``argv`` in the running task's environment (same node, directory, env, container)."""

    def exit_signal(self, exit_code: int) -> int | None:
        """The signal an exit code stands for (a container's 137 is SIGKILL), if any."""

    def launch_error(self, attempt_dir: Path) -> str | None:
        """Why the task's command never started, if it did not (read after it ended)."""


class LaunchRefused(Exception):
    """The runtime cannot start this task; the message says why and what fixes it."""
