"""The process runtime: the task's command as a child process of its keeper, in the task's cgroup.

``/dev/shm`` is the host's unless the role asks for a size (OpenPAI ``shmMB``, native
``resources.shm``): then the command gets a private mount namespace with its own tmpfs of that
size on /dev/shm (``unshare --mount``, which needs root; the node reports ``shm`` unsupported
otherwise). A task that runs as its user (shoal.agent.task_users) switches to it last, with
``setpriv`` right in front of its command.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from shoal.agent.runtimes import Launch, TaskSetup

UNSHARE = shutil.which("unshare")
SHM_SCRIPT = (
    'mount -t tmpfs -o "size=$1m,nosuid,nodev,mode=1777" shoal-shm /dev/shm && shift && exec "$@"'
)


def shm_wrapped(argv: list[str], shm_mib: int) -> list[str]:
    """``argv`` in its own mount namespace with a ``shm_mib`` MiB tmpfs on /dev/shm."""
    assert UNSHARE is not None
    return [UNSHARE, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", SHM_SCRIPT,
            "shoal-shm", str(shm_mib), *argv]  # fmt: skip


def shm_unsupported() -> str | None:
    """Why a task's /dev/shm cannot be sized here, or None (tried once, at agent start)."""
    if UNSHARE is None:
        return "unshare (util-linux) is not installed"
    try:
        done = subprocess.run(
            shm_wrapped(["true"], 1), capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"a private /dev/shm could not be mounted: {exc}"
    if done.returncode != 0:
        return f"a private /dev/shm could not be mounted: {done.stderr.strip()} (needs root)"
    return None


def _as_user(setup: TaskSetup, argv: list[str]) -> list[str]:
    """``argv`` under the task's identity (``setpriv``, after the keeper or the exec shim has
    put it in the task's cgroup, and after a private /dev/shm was mounted), if it has one."""
    return argv if setup.user is None else [*setup.user.setpriv_argv(), *argv]


class ProcessRuntime:
    name = "process"

    def __init__(self, shm_refused: str | None) -> None:
        self.shm_refused = shm_refused

    def unavailable(self) -> str | None:
        return None

    def refused_limits(self) -> dict[str, str]:
        return {"shm": self.shm_refused} if self.shm_refused is not None else {}

    def prepare(self, setup: TaskSetup) -> Launch:
        argv = _as_user(setup, setup.shell_argv)
        limits = setup.order.limits
        if limits is not None and limits.shm_mib is not None and self.shm_refused is None:
            argv = shm_wrapped(argv, limits.shm_mib)
        join = setup.cgroup.procs_files if setup.cgroup is not None else []
        return Launch(argv=argv, env=setup.env, cwd=setup.start_dir, join=join)

    def cleanup(self, attempt_id: str) -> None:
        return None  # the process group and the cgroup are all there is

    def exec_argv(self, setup: TaskSetup, argv: list[str], tty: bool) -> Launch:
        join = setup.cgroup.procs_files if setup.cgroup is not None else []
        return Launch(argv=_as_user(setup, argv), env=setup.env, cwd=setup.start_dir, join=join)

    def exit_signal(self, exit_code: int) -> int | None:
        return None  # the keeper saw the signal itself

    def launch_error(self, attempt_dir: Path) -> str | None:
        return None
