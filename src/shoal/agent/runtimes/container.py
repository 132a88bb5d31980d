"""The container runtime: the task's command in an OCI container from the role's image (podman).

What stays as in the process runtime (docs/containers.md): the env contract (passed with
``--env``), the attempt's directory (its code, ``.shoal/hostfile``) mounted at the same path and
the command started in the same directory, the data sets (their links point into the node's
cache, mounted read-only), the host's network and hostname (so host lists, ports and
``$SHOAL_*_HOSTS`` stay valid), the GPUs by index (their device nodes, or CDI devices when the node
has a CDI spec for them), and the cgroup: podman runs with ``--cgroups disabled`` from inside the
task's cgroup, so the same limits, usage and OOM accounting apply. Where the node cannot make
cgroups, podman's own ``--cpus/--memory/--pids-limit`` hold the task instead.

A task that runs as its user (shoal.agent.task_users) runs as that uid and gid in the container
(``--user``), with no capabilities and ``no-new-privileges``; ``shoal job exec`` into it too.

podman never pulls (``--pull never``): images come from ``shoal image push`` (the agent loads
them, shoal.agent.images), so no registry is reached at run time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Protocol

from shoal.agent.debug_hold import wrap_if_debug
from shoal.agent.keeper import CLEANUP_FILE
from shoal.agent.runtimes import Launch, LaunchRefused, TaskSetup, container_shim
from shoal.protocol import LaunchOrder, TaskLimits, fill_in

DEFAULT_SHM_MIB = 512  # OpenPAI's default shmMB for a task's container (podman's own is 64)
INSTALL_HINT = "run scripts/containers-setup.sh (make containers) on the node"
SHIM = [sys.executable, "-I", "-S", container_shim.__file__]
GPU_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
GUARD_WAIT_S = 90.0  # the guard's own limit (container_shim.ABANDON_S) and its removal


class ImageSource(Protocol):
    def ensure(self, order: LaunchOrder) -> str:
        """The local image id to run for ``order`` (loaded into podman's store if need be)."""


def container_name(instance: str, attempt_id: str) -> str:
    """``instance`` tells this agent's containers from another's on the same machine (attempt
    ids are unique only within one server)."""
    return f"{instance}-{attempt_id}"


def podman_problem(podman: str | None) -> str | None:
    """Why podman cannot run containers here, or None."""
    if podman is None:
        return f"podman is not installed on this node: {INSTALL_HINT}"
    try:
        done = subprocess.run(
            [podman, "info", "--format", "{{.Host.OCIRuntime.Name}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"podman does not answer ({exc}): {INSTALL_HINT}"
    if done.returncode != 0:
        return f"podman does not work here ({done.stderr.strip()[-300:]}): {INSTALL_HINT}"
    return None


class ContainerRuntime:
    name = "container"

    def __init__(
        self, images: ImageSource, scratch: Path, instance: str, podman: str | None = None
    ) -> None:
        self.images = images
        self.instance = instance
        self.scratch = scratch  # podman's working directory for its own calls
        self.podman = podman or shutil.which("podman")
        self.label = f"shoal.agent={instance}"  # on each of this agent's containers
        self._problem: str | None = None
        self._checked = False

    def unavailable(self) -> str | None:
        if not self._checked:
            self._problem, self._checked = podman_problem(self.podman), True
        return self._problem

    def refused_limits(self) -> dict[str, str]:
        return {}  # --shm-size always holds; the cgroup holds the rest

    def prepare(self, setup: TaskSetup) -> Launch:
        problem = self.unavailable()
        if problem is not None:
            raise LaunchRefused(f"{problem}, or submit the job with --runtime process")
        order = setup.order
        if order.image is None:
            raise LaunchRefused("a container task needs an image: give the role an image")
        image_id = self.images.ensure(order)
        assert self.podman is not None
        name = container_name(self.instance, order.attempt_id)
        run = [self.podman, "run", "--detach", "--name", name, *self._options(setup)]
        command = ["/bin/sh", "-c", _command(setup)]
        run += [image_id, *wrap_if_debug(order, setup.workdir, command)]  # held in the container
        join = setup.cgroup.procs_files if setup.cgroup is not None else []
        argv = [*SHIM, name, ":".join(join) or "-", str(self._guard_file(name)), "--", *run]
        # what the keeper runs if its lease lapses (no agent to call ``cleanup``): a container
        # created, perhaps never started, is removed even then
        cleanup = setup.attempt_dir / CLEANUP_FILE
        cleanup.write_text(json.dumps(self._remove_argv(name)))
        return Launch(argv=argv, env=_podman_env(), cwd=setup.attempt_dir)

    def _remove_argv(self, name: str) -> list[str]:
        assert self.podman is not None
        return [self.podman, "rm", "--force", "--ignore", "--time", "0", name]

    def _guard_file(self, name: str) -> Path:
        """Locked by the shim's guard while it may still start or remove the container."""
        return self.scratch / f"{name}.guard"

    def _options(self, setup: TaskSetup) -> list[str]:
        order = setup.order
        options = ["--pull", "never", "--log-driver", "passthrough", "--network", "host"]
        options += ["--uts", "host", "--label", f"shoal.attempt={order.attempt_id}"]
        options += [
            "--label",
            f"shoal.job={order.job_id}",
            "--label",
            self.label,
        ]
        limits = order.limits
        shm = limits.shm_mib if limits is not None and limits.shm_mib else DEFAULT_SHM_MIB
        options += ["--shm-size", f"{shm}m"]
        if setup.cgroup is not None:
            options += ["--cgroups", "disabled"]  # the task's own cgroup holds it
        elif limits is not None:
            options += _podman_limits(limits)
        for path, mode in _mounts(setup):
            options += ["--volume", f"{path}:{path}:{mode}"]
        options += ["--workdir", str(setup.start_dir), *_identity(setup)]
        for key, value in setup.env.items():
            options += ["--env", f"{key}={value}"]
        if limits is not None:
            options += _gpu_devices(limits.gpu_indices)
        return options

    def cleanup(self, attempt_id: str) -> None:
        """Remove the container, once the shim's guard is done: a ``podman run`` still under
        way when the keeper's group was killed (it is the guard's child, in a group of its own)
        would otherwise create the container after this removal. Once its monitor was killed
        with the rest of the cgroup, podman's first ``rm --force`` may fail ("kill container: No
        such process") and leave it "Stopping"; a second one removes it."""
        if self.podman is None:
            return
        name = container_name(self.instance, attempt_id)
        self._await_guard(name)
        remove = self._remove_argv(name)
        error = ""
        for _ in range(3):
            done = subprocess.run(
                remove, cwd=self.scratch, capture_output=True, text=True, check=False, timeout=60
            )
            if done.returncode == 0:
                return
            error = done.stderr.strip()[-300:]
        raise RuntimeError(f"podman rm {name} failed: {error}")

    def _await_guard(self, name: str) -> None:
        """Wait (up to GUARD_WAIT_S) for the guard of ``name``'s start, if one is still there
        (the shim is gone by now: the guard removes the container once ``podman run`` is over)."""
        path = self._guard_file(name)
        try:
            lock = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # never started, or the guard is done
        try:
            deadline = time.monotonic() + GUARD_WAIT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break  # a podman that hangs: removed as it is
                    time.sleep(0.05)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        finally:
            os.close(lock)

    def remove_strays(self, running: Collection[str]) -> list[str]:
        """Remove this agent's containers (label ``shoal.agent``) of attempts not in
        ``running``: what a start cut short left when everything of it, its guard included,
        was killed (an agent started again calls it). Returns the removed containers' names."""
        if self.unavailable() is not None:  # no podman here: no containers either
            return []
        assert self.podman is not None
        listed = subprocess.run(
            [self.podman, "ps", "--all", "--format", "json", "--filter", f"label={self.label}"],
            cwd=self.scratch,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if listed.returncode != 0:
            raise RuntimeError(f"podman ps failed: {listed.stderr.strip()[-300:]}")
        strays = [
            container
            for container in json.loads(listed.stdout or "[]")
            if (container.get("Labels") or {}).get("shoal.attempt") not in running
        ]
        removed = []
        for container in strays:
            done = subprocess.run(
                [self.podman, "rm", "--force", "--ignore", "--time", "0", container["Id"]],
                cwd=self.scratch,
                capture_output=True,
                check=False,
                timeout=60,
            )
            if done.returncode == 0:
                removed.append(",".join(container.get("Names") or [container["Id"][:12]]))
        return removed

    def exec_argv(self, setup: TaskSetup, argv: list[str], tty: bool) -> Launch:
        assert self.podman is not None
        name = container_name(self.instance, setup.order.attempt_id)
        flags = ["--interactive", "--tty"] if tty else ["--interactive"]
        if setup.user is not None:
            flags += ["--user", f"{setup.user.uid}:{setup.user.gid}"]
        run = [self.podman, "exec", *flags, "--workdir", str(setup.start_dir), name, *argv]
        return Launch(argv=run, env=_podman_env(), cwd=self.scratch)

    def exit_signal(self, exit_code: int) -> int | None:
        return exit_code - 128 if 128 < exit_code < 160 else None  # podman's 128+signal

    def launch_error(self, attempt_dir: Path) -> str | None:
        marker = attempt_dir / container_shim.START_FAILED
        if not marker.exists():
            return None
        code = marker.read_text().strip()
        return f"podman could not start the container (exit {code}): see the task's stderr"


def _command(setup: TaskSetup) -> str:
    """The role's command for the container's /bin/sh. One with secrets is filled in, written
    to a file only the task's user can read, and read and removed by the shell as it starts:
    never on a command line or in the container's stored configuration."""
    order = setup.order
    if not order.secrets:
        return order.command
    secret = setup.workdir / ".shoal" / "command"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        if setup.user is not None:
            os.fchown(handle.fileno(), setup.user.uid, setup.user.gid)
        handle.write(fill_in(order.command, order.secrets))
    return f'shoal_command=$(cat {secret}); rm -f {secret}; eval "$shoal_command"'


def _identity(setup: TaskSetup) -> list[str]:
    """The task's user (shoal.agent.task_users) as the container's, with no capabilities and
    no way to gain privileges (setuid files in the image do not raise them)."""
    user = setup.user
    if user is None:
        return []
    options = ["--user", f"{user.uid}:{user.gid}", "--cap-drop", "all"]
    options += ["--security-opt", "no-new-privileges"]
    for group in user.groups:
        options += ["--group-add", str(group)]
    return options


def _mounts(setup: TaskSetup) -> list[tuple[Path, str]]:
    mounts = [(setup.workdir, "rw")]
    if setup.start_dir != setup.workdir:  # a job without code starts where it was submitted
        mounts.append((setup.start_dir, "rw"))
    if setup.order.data:
        mounts.append((setup.data_root, "ro"))
    return mounts


def _podman_limits(limits: TaskLimits) -> list[str]:
    memory = f"{limits.memory_mib}m"
    return ["--cpus", f"{limits.cpu_millis / 1000:g}", "--memory", memory,
            "--memory-swap", memory, "--pids-limit", str(limits.pids)]  # fmt: skip


def _gpu_devices(indices: list[int]) -> list[str]:
    """Only the task's GPUs: CDI devices when the node has a CDI spec for them, else the
    device nodes that exist (none on a machine without GPUs: CUDA_VISIBLE_DEVICES still says)."""
    if not indices:
        return []
    if any(d.is_dir() and any(d.glob("*nvidia*")) for d in CDI_DIRS):
        return [f"--device=nvidia.com/gpu={i}" for i in indices]
    nodes = [f"/dev/nvidia{i}" for i in indices]
    present = [d for d in (*nodes, *GPU_CONTROL_DEVICES) if os.path.exists(d)]
    return [f"--device={d}" for d in present]


def _podman_env() -> dict[str, str]:
    """podman's own environment: the agent's (its PATH finds conmon and crun)."""
    return dict(os.environ)


class LocalImages:
    """Images already in this node's podman store, by id: what a runner without a server to
    fetch pushed images from can run (shoal.agent.images fetches and loads the others)."""

    def __init__(self, scratch: Path, podman: str | None = None) -> None:
        self.scratch = scratch
        self.podman = podman or shutil.which("podman")

    def ensure(self, order: LaunchOrder) -> str:
        assert order.image is not None and self.podman is not None
        done = subprocess.run(
            [self.podman, "image", "exists", order.image.image_id],
            cwd=self.scratch,
            capture_output=True,
            check=False,
            timeout=60,
        )
        if done.returncode != 0:
            raise LaunchRefused(
                f"image {order.image.name} ({order.image.image_id[:12]}) is not on this node: "
                f"push it with `shoal image push {order.image.name}`"
            )
        return order.image.image_id
