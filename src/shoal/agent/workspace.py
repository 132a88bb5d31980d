"""Where an attempt's files live on the node, and who may reach them (docs/security.md).

The agent's home (its identity, lease, journal, code cache, the attempts' logs) is the agent's
alone: mode 0700. What a task must reach lies elsewhere when tasks run as their users:

- ``<task root>/<instance>/work/<job>/<role>-<index>/<attempt>``: the attempt's directory (its
  code, ``.shoal/hostfile``, data links), owned by the task's user, mode 0700; every directory
  above it is the agent's, mode 0711 (passable, not listable, not writable);
- ``<task root>/<instance>/data/<sha256>``: the node's data sets, the agent's, read-only to
  everyone else (files 0444, directories 0755): tasks read them through their links.

The task root is ``/var/lib/shoal/tasks`` unless ``--task-root`` (or ``SHOAL_TASK_ROOT``) says
otherwise; ``<instance>`` tells the agents of one machine apart. An agent whose tasks run as its
own user (``--task-users agent``) keeps both under its home, as before. An attempt's directory is
removed once the server has acknowledged its end, and its logs (``<home>/logs/...``) with it:
they are shipped by then.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from shoal.agent.limits import instance_name
from shoal.agent.task_users import TaskUser, TaskUsers

DEFAULT_TASK_ROOT = Path("/var/lib/shoal/tasks")
TASK_ROOT_VARIABLE = "SHOAL_TASK_ROOT"
PASSABLE = 0o711  # the agent's directories on the way to a task's own
PRIVATE = 0o700


def default_task_root() -> Path:
    return Path(os.environ.get(TASK_ROOT_VARIABLE) or DEFAULT_TASK_ROOT)


class Workspace:
    def __init__(self, home: Path, users: TaskUsers, task_root: Path | None = None) -> None:
        self.home = home
        self.users = users
        if users.separate:
            self.base: Path | None = (task_root or default_task_root()).absolute()
            self.root: Path = self.base / instance_name(home)
        else:
            self.base, self.root = None, home
        self.work = self.root / "work"
        self.data = self.root / ("data" if users.separate else "cache/data")
        self.logs = home / "logs"

    def open(self) -> None:
        """Make the agent's home private and the way to the tasks' directories passable."""
        self.home.mkdir(parents=True, exist_ok=True)
        if self.users.separate:
            os.chmod(self.home, PRIVATE)
        if self.base is not None and not self.base.exists():  # made here: passable, no more
            self.base.mkdir(parents=True, mode=PASSABLE)
            os.chmod(self.base, PASSABLE)  # an existing one (/tmp, say) keeps its own mode
        for directory in (self.root, self.work, self.data):
            directory.mkdir(parents=True, exist_ok=True)
            if self.users.separate:
                os.chown(directory, os.geteuid(), os.getegid())
                os.chmod(directory, PASSABLE)

    def attempt_paths(
        self, job_id: str, role: str, index: int, attempt_id: str
    ) -> tuple[Path, Path]:
        """(the attempt's directory, its log directory)."""
        task = f"{role}-{index}"
        return self.work / job_id / task / attempt_id, self.logs / job_id / task / attempt_id

    def make_attempt_dir(self, workdir: Path) -> None:
        """A fresh, empty directory for the attempt, and the agent's passable ones above it."""
        if workdir.exists():
            shutil.rmtree(workdir)
        for parent in reversed(workdir.relative_to(self.work).parents):
            directory = self.work / parent
            directory.mkdir(exist_ok=True)
            if self.users.separate:
                os.chmod(directory, PASSABLE)
        workdir.mkdir(mode=PRIVATE)

    def hand_over(self, path: Path, user: TaskUser | None) -> None:
        """Give ``path`` (the attempt's directory, or a file in it) and all below it to the
        task's user; the directory itself is theirs alone."""
        if user is None:
            return
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
        if path.is_dir() and not path.is_symlink():
            os.chmod(path, PRIVATE)
            for where, dirs, files in os.walk(path):
                for name in [*dirs, *files]:
                    os.chown(os.path.join(where, name), user.uid, user.gid, follow_symlinks=False)

    def remove_attempt(self, workdir: Path, log_dir: Path) -> None:
        """The attempt's directory and its logs (shipped to the server by now), and the empty
        directories above them (its job's, once the last)."""
        for path, top in ((workdir, self.work), (log_dir, self.logs)):
            shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(OSError, ValueError):
                for parent in path.relative_to(top).parents:
                    if parent != Path("."):
                        (top / parent).rmdir()

    def close(self) -> None:
        """Remove this agent's task root once nothing is left in it (its data cache goes too:
        another run fetches again)."""
        if not self.users.separate:
            return
        with contextlib.suppress(OSError):
            self.work.rmdir()
            shutil.rmtree(self.data, ignore_errors=True)
            self.root.rmdir()
