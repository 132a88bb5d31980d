"""Whose identity a task runs under on its node (docs/security.md): never the agent's, where the
agent can switch users.

Three modes, chosen per agent (``--task-users``):

- ``pool`` (the default when the agent runs as root): each shoal user gets uid and gid
  ``uid_base + N``, where N is the user's number in the server's store, the same on every node of
  a cluster. No account is created: the uid has no name in ``/etc/passwd``; the task gets
  ``HOME`` (its own directory), ``USER`` and ``LOGNAME`` (the shoal user's name) in its
  environment. No supplementary groups.
- ``accounts``: the node's account of the same name as the shoal user (``getpwnam``) with its
  groups, as Slurm runs jobs; a user without an account on the node, or whose account is root or
  below 1000 (a system account), is refused at launch with the reason.
- ``agent``: the agent's own user, as before (the only choice of an agent that is not root, which
  cannot switch users). Every task can then reach the agent's home: see docs/security.md.

The switch itself is ``setpriv`` (util-linux) in front of the task's command, after the keeper
has put it in its cgroup: real, effective and saved uid and gid, supplementary groups, and no
capabilities kept.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shoal.agent.runtimes import LaunchRefused
from shoal.protocol import LaunchOrder

Mode = Literal["pool", "accounts", "agent"]
MODES: tuple[Mode, ...] = ("pool", "accounts", "agent")
DEFAULT_UID_BASE = 2_000_000_000  # clear of /etc/subuid ranges (useradd's SUB_UID_MAX is 600100000)
UID_MAX = 4_294_967_294  # (uid_t)-1 means "no change" to setresuid
DEFAULT_MIN_UID = 1000  # `accounts`: system accounts (and root) are never used
MODE_VARIABLE = "SHOAL_TASK_USERS"  # what --task-users defaults to
UID_BASE_VARIABLE = "SHOAL_UID_BASE"
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


@dataclass(frozen=True, slots=True)
class TaskUser:
    """A task's Unix identity on its node."""

    name: str  # the shoal user's name (USER and LOGNAME in the task's environment)
    uid: int
    gid: int
    groups: tuple[int, ...] = ()  # supplementary groups (``accounts`` only)
    home: str | None = None  # the account's home (``accounts``); None: the task's directory

    def can_enter(self, directory: Path) -> bool:
        """Whether this identity may list and enter ``directory`` (and pass every directory
        above it), by the mode bits."""
        try:
            if not self._may(directory, stat.S_IRUSR | stat.S_IXUSR):
                return False
            return all(self._may(parent, stat.S_IXUSR) for parent in directory.parents)
        except OSError:
            return False

    def _may(self, path: Path, wanted: int) -> bool:
        """``wanted`` in owner bits (S_IRUSR, S_IXUSR), for this uid, its groups or others."""
        found = path.stat()
        mode = stat.S_IMODE(found.st_mode)
        if found.st_uid == self.uid:
            bits = wanted
        elif found.st_gid == self.gid or found.st_gid in self.groups:
            bits = wanted >> 3
        else:
            bits = wanted >> 6
        return mode & bits == bits

    def setpriv_argv(self) -> list[str]:
        """What switches to this identity, in front of the task's command."""
        groups = ",".join(str(g) for g in self.groups)
        return [
            SETPRIV,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            f"--groups={groups}" if groups else "--clear-groups",
            "--inh-caps=-all",
            "--",
        ]


class TaskUsers:
    """The agent's policy: which identity each order's task gets."""

    def __init__(
        self, mode: Mode, uid_base: int = DEFAULT_UID_BASE, min_uid: int = DEFAULT_MIN_UID
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"--task-users must be one of {', '.join(MODES)}, not {mode!r}")
        if mode != "agent" and os.geteuid() != 0:
            raise ValueError(
                f"--task-users {mode} needs the agent to run as root (it switches each task to "
                "its user's uid); run the agent as root, or use --task-users agent"
            )
        if mode == "pool" and not 1000 <= uid_base < UID_MAX - 1_000_000:
            raise ValueError(f"--uid-base must be from 1000 to {UID_MAX - 1_000_000}")
        if mode != "agent" and not os.access(SETPRIV, os.X_OK):
            raise ValueError(f"{SETPRIV} is missing: install util-linux, or use --task-users agent")
        self.mode = mode
        self.uid_base = uid_base
        self.min_uid = max(1, min_uid)

    @classmethod
    def default(cls) -> TaskUsers:
        """As ``SHOAL_TASK_USERS`` and ``SHOAL_UID_BASE`` say; else ``pool`` as root (tasks
        never run as the agent), ``agent`` otherwise. ValueError with the fix when they are
        wrong."""
        mode = os.environ.get(MODE_VARIABLE) or ("pool" if os.geteuid() == 0 else "agent")
        base = os.environ.get(UID_BASE_VARIABLE) or str(DEFAULT_UID_BASE)
        if mode not in MODES:
            raise ValueError(f"{MODE_VARIABLE} must be one of {', '.join(MODES)}, not {mode!r}")
        if not base.isdigit():
            raise ValueError(f"{UID_BASE_VARIABLE} must be a number, not {base!r}")
        return cls(mode, int(base))  # type: ignore[arg-type,unused-ignore]  # a Mode: checked

    @property
    def separate(self) -> bool:
        """Whether tasks run under identities other than the agent's."""
        return self.mode != "agent"

    def describe(self) -> str:
        chosen = f"SHOAL_TASK_USERS={self.mode} or --task-users {self.mode}"
        if self.mode == "pool":
            return f"tasks run as uid {self.uid_base} + the user's number ({chosen})"
        if self.mode == "accounts":
            return f"tasks run as the node's account of their user's name ({chosen})"
        return f"tasks run as the agent's own user ({chosen}): they can reach its home"

    def for_order(self, order: LaunchOrder) -> TaskUser | None:
        """The task's identity (None: the agent's own); LaunchRefused with why when it has none."""
        if self.mode == "agent":
            return None
        if order.owner is None:
            raise LaunchRefused(
                "the server did not say whose job this is (an older server): upgrade it, or run "
                "this agent with --task-users agent"
            )
        if self.mode == "pool":
            if order.owner_number is None:
                raise LaunchRefused(f"the server sent no number for user {order.owner!r}")
            uid = self.uid_base + order.owner_number
            return TaskUser(order.owner, uid, uid)
        return self._account(order.owner, order.node)

    def _account(self, name: str, node: str) -> TaskUser:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise LaunchRefused(
                f"user {name!r} has no account on node {node} (this agent runs tasks as their "
                "user's account, --task-users accounts): create it, or run the agent with "
                "--task-users pool"
            ) from None
        if entry.pw_uid < self.min_uid:
            raise LaunchRefused(
                f"the account {name!r} on node {node} has uid {entry.pw_uid}, below "
                f"{self.min_uid}: tasks never run as root or a system account"
            )
        groups = tuple(g for g in os.getgrouplist(name, entry.pw_gid) if g != 0)
        return TaskUser(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


def interpreter_reachable() -> bool:
    """Whether a task under another uid could run this interpreter and its packages (a Python
    under root's home, pyenv's say, is out of its reach)."""
    import sys  # noqa: PLC0415

    other = TaskUser("nobody", 65534, 65534)
    places = [Path(sys.executable).resolve().parent, Path(sys.prefix)]
    return all(other.can_enter(place) for place in places)
