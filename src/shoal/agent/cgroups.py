"""Each task attempt's own cgroup: its cpu, memory (and swap), pids limits, its usage, its OOM
kills, and the end of every process it left behind. Both runtimes use it: the process runtime puts
the task in it, the container runtime puts the container's monitor (conmon) and so the container.

Written straight to the kernel's files (there is no systemd on these machines):

- **cgroup v1** (this project's machines: v1 hierarchies plus a cgroup2 mount beside them): a
  directory ``<own>/shoal/<attempt>`` in each of the memory, cpu, cpuacct, pids and freezer
  hierarchies, where ``<own>`` is the agent's own cgroup in that hierarchy (``/proc/self/cgroup``),
  so the tasks stay accounted with the agent that started them.
- **cgroup v2** (a unified hierarchy at /sys/fs/cgroup): the agent moves itself into a leaf
  ``<own>/agent`` (a v2 cgroup with processes cannot hand controllers to children), enables
  cpu, memory and pids below ``<own>``, and gives each attempt ``<own>/shoal/<attempt>``.

Whatever the kernel refuses is found once, when the agent starts (``CgroupHost.probe``), and
reported as the node's ``unsupported`` limits with the reason; tasks started there say so on
their stderr. Nothing is ever left silently unlimited.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from shoal.protocol import TaskLimits

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "freezer", "devices")
# GPU device nodes: NVIDIA's major, a GPU's minor is its index (nvidiactl is 255, never denied);
# a task may open only its own GPUs' (v1 ``devices.deny``; v2 needs a BPF program: not done)
GPU_MAJOR = 195
GPU_MINORS = range(64)
CFS_PERIOD_US = 100_000
KILL_ROUNDS = 200


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _read(path: Path) -> str:
    with open(path) as handle:
        return handle.read()


def _read_int(path: Path) -> int | None:
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: Path) -> dict[str, int]:
    """``key value`` lines (memory.oom_control, memory.events, memory.stat, cpu.stat)."""
    values: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in _read(path).splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                values[key] = int(value)
    return values


@dataclass(frozen=True, slots=True)
class CgroupStats:
    cpu_seconds: float | None
    memory_mib: float | None  # in use now, without reclaimable file cache
    peak_memory_mib: float | None  # the highest charge, what the limit is compared with
    oom_kills: int
    processes: int | None
    forks_refused: int  # forks the pids limit refused


class TaskCgroup:
    """One attempt's cgroup: a directory per hierarchy (v1) or one directory (v2)."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs  # controller -> directory ("unified" for v2)

    def _dir(self, controller: str) -> Path | None:
        return self.dirs.get("unified" if self.version == 2 else controller)

    @property
    def procs_files(self) -> list[str]:
        """The files a process writes its pid to, to join (the keeper's child does, before exec)."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def exists(self) -> bool:
        return any(d.is_dir() for d in self.dirs.values())

    def apply(self, limits: TaskLimits) -> dict[str, str]:
        """Write the limits; returns those the kernel refused, with its reason."""
        memory = str(limits.memory_mib << 20)
        quota = max(1000, limits.cpu_millis * CFS_PERIOD_US // 1000)
        if self.version == 1:
            mem, cpu, pids = self.dirs["memory"], self.dirs["cpu"], self.dirs["pids"]
            writes = {
                "memory": [(mem / "memory.limit_in_bytes", memory)],
                "cpu": [(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))],
                "pids": [(pids / "pids.max", str(limits.pids))],
            }
            writes["cpu"].append((cpu / "cpu.cfs_quota_us", str(quota)))
            swap = mem / "memory.memsw.limit_in_bytes"
        else:
            unified = self.dirs["unified"]
            writes = {
                "memory": [(unified / "memory.max", memory)],
                "cpu": [(unified / "cpu.max", f"{quota} {CFS_PERIOD_US}")],
                "pids": [(unified / "pids.max", str(limits.pids))],
            }
            swap = unified / "memory.swap.max"
            memory = "0"  # v2 limits swap on its own: none beyond memory
        if swap.exists():  # swap = memory (v1 counts memory+swap; v2 swap alone)
            writes["memory"].append((swap, memory))
        if self.version == 1 and "devices" in self.dirs:
            deny = self.dirs["devices"] / "devices.deny"
            given = set(limits.gpu_indices)
            writes["gpu-devices"] = [
                (deny, f"c {GPU_MAJOR}:{minor} rwm") for minor in GPU_MINORS if minor not in given
            ]
        refused: dict[str, str] = {}
        for limit, files in writes.items():
            for path, value in files:
                try:
                    _write(path, value)
                except OSError as exc:
                    refused[limit] = f"the kernel refused {path.name} = {value}: {exc.strerror}"
                    break
        return refused

    def stats(self) -> CgroupStats:
        if self.version == 1:
            mem, acct = self.dirs["memory"], self.dirs["cpuacct"]
            usage_ns = _read_int(acct / "cpuacct.usage")
            current = _read_int(mem / "memory.usage_in_bytes")
            cache = _keyed(mem / "memory.stat").get("total_inactive_file", 0)
            peak = _read_int(mem / "memory.max_usage_in_bytes")
            kills = _keyed(mem / "memory.oom_control").get("oom_kill", 0)
            processes = _read_int(self.dirs["pids"] / "pids.current")
            refused = _keyed(self.dirs["pids"] / "pids.events").get("max", 0)
            cpu = None if usage_ns is None else usage_ns / 1e9
        else:
            unified = self.dirs["unified"]
            usage_us = _keyed(unified / "cpu.stat").get("usage_usec")
            current = _read_int(unified / "memory.current")
            cache = _keyed(unified / "memory.stat").get("inactive_file", 0)
            peak = _read_int(unified / "memory.peak")  # kernels from 5.19
            kills = _keyed(unified / "memory.events").get("oom_kill", 0)
            processes = _read_int(unified / "pids.current")
            refused = _keyed(unified / "pids.events").get("max", 0)
            cpu = None if usage_us is None else usage_us / 1e6
        in_use = None if current is None else max(0, current - cache) / (1 << 20)
        return CgroupStats(
            cpu_seconds=cpu,
            memory_mib=in_use,
            peak_memory_mib=None if peak is None else peak / (1 << 20),
            oom_kills=kills,
            processes=processes,
            forks_refused=refused,
        )

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in dict.fromkeys(self.dirs.values()):
            with contextlib.suppress(OSError):
                found.update(int(p) for p in _read(directory / "cgroup.procs").split())
        return found

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup, frozen first where the freezer exists (so a fork
        bomb cannot outrun the kills), until none is left."""
        freezer = self._freezer_file()
        if freezer is not None:
            with contextlib.suppress(OSError):
                _write(freezer, "FROZEN" if self.version == 1 else "1")
        try:
            for _ in range(KILL_ROUNDS):
                alive = self.pids()
                if not alive:
                    return
                for pid in alive:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.005)
        finally:
            if freezer is not None:
                with contextlib.suppress(OSError):
                    _write(freezer, "THAWED" if self.version == 1 else "0")

    def _freezer_file(self) -> Path | None:
        path: Path | None = None
        if self.version == 2:
            path = self.dirs["unified"] / "cgroup.freeze"
        elif (directory := self.dirs.get("freezer")) is not None:
            path = directory / "freezer.state"
        return path if path is not None and path.exists() else None

    def remove(self) -> bool:
        """Kill what is left and remove the directories (children first: podman or a task may
        have made some). True once nothing is left."""
        self.kill_all()
        removed = True
        for directory in dict.fromkeys(self.dirs.values()):
            if not directory.is_dir():
                continue
            for child in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if child.is_dir():
                    _rmdir(child)
            removed &= _rmdir(directory)
        return removed


def _rmdir(path: Path) -> bool:
    for _ in range(50):  # EBUSY for a moment after the last process exits
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.01)
    return False


def _mounts() -> tuple[Path | None, dict[str, Path]]:
    """The cgroup2 mount at /sys/fs/cgroup if the host is pure v2, and each v1 controller's
    mount point (from /proc/self/mountinfo: ``... mountpoint ... - fstype source options``)."""
    unified: Path | None = None
    v1: dict[str, Path] = {}
    with contextlib.suppress(OSError):
        for line in _read(Path("/proc/self/mountinfo")).splitlines():
            fields, _, tail = line.partition(" - ")
            parts, tail_parts = fields.split(), tail.split()
            if len(parts) < 5 or len(tail_parts) < 3:
                continue
            mountpoint, fstype, options = Path(parts[4]), tail_parts[0], tail_parts[2]
            if fstype == "cgroup2" and mountpoint == ROOT:
                unified = mountpoint
            elif fstype == "cgroup":
                for option in options.split(","):
                    if option in V1_CONTROLLERS:
                        v1.setdefault(option, mountpoint)
    return unified, v1


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and ``unified`` for v2's."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in _read(Path("/proc/self/cgroup")).splitlines():
            _, controllers, path = line.split(":", 2)
            if not controllers:
                own["unified"] = path
            for controller in controllers.split(","):
                own[controller] = path
    return own


class CgroupHost:
    """Where this agent makes its tasks' cgroups, and what the kernel lets it limit.

    ``group`` names this agent's directory (several agents may share a machine and its
    hierarchies: their attempt ids may clash, their homes do not)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.version = 0
        self.bases: dict[str, Path] = {}
        self.unsupported: dict[str, str] = {}
        self._find_bases()

    def _find_bases(self) -> None:
        unified, v1 = _mounts()
        own = _own_paths()
        needed = ("memory", "cpu", "cpuacct", "pids")
        if unified is not None:
            self.version = 2
            self.bases = {"unified": self._v2_base(unified, own.get("unified", "/"))}
        elif all(c in v1 for c in needed):
            self.version = 1
            for controller, mount in v1.items():
                path = own.get(controller, "/").lstrip("/")
                self.bases[controller] = mount / path / self.group
        else:
            missing = ", ".join(c for c in needed if c not in v1)
            reason = f"no cgroup hierarchy for {missing} is mounted under {ROOT}"
            self.unsupported = dict.fromkeys(("memory", "cpu", "pids"), reason)

    def _v2_base(self, mount: Path, own: str) -> Path:
        """v2: move this agent into ``<own>/agent`` and hand cpu, memory and pids down, so its
        tasks' cgroups below ``<own>/<group>`` can be limited."""
        top = mount / own.lstrip("/")
        with contextlib.suppress(OSError):
            leaf = top / "agent"
            leaf.mkdir(exist_ok=True)
            _write(leaf / "cgroup.procs", str(os.getpid()))
            _write(top / "cgroup.subtree_control", "+cpu +memory +pids")
        return top / self.group

    def probe(self, limits: TaskLimits) -> dict[str, str]:
        """Create a throw-away cgroup with ``limits`` to learn what the kernel refuses here."""
        if self.version == 0:
            return dict(self.unsupported)
        try:
            cgroup = self.create(f"probe-{os.getpid()}")
        except OSError as exc:
            reason = f"cannot create a cgroup here ({exc}): run the agent as root"
            self.unsupported = dict.fromkeys(("memory", "cpu", "pids"), reason)
            return dict(self.unsupported)
        try:
            self.unsupported = cgroup.apply(limits)
            if self.version == 2 or "devices" not in cgroup.dirs:
                self.unsupported["gpu-devices"] = (
                    "no v1 devices controller (v2 filters devices with BPF programs: not done)"
                )
        finally:
            cgroup.remove()
            self.tidy()
        return dict(self.unsupported)

    def planned(self, name: str) -> TaskCgroup:
        """The cgroup ``create(name)`` makes, not made yet (to be recorded first)."""
        return TaskCgroup(self.version, {c: base / name for c, base in self.bases.items()})

    def create(self, name: str) -> TaskCgroup:
        cgroup = self.planned(name)
        for controller, directory in cgroup.dirs.items():
            base = self.bases[controller]
            if self.version == 2 and not (base / "cgroup.subtree_control").exists():
                base.mkdir(exist_ok=True)
                _write(base / "cgroup.subtree_control", "+cpu +memory +pids")
            directory.mkdir(parents=True, exist_ok=True)
        return cgroup

    def tidy(self) -> None:
        """Remove this agent's directories once no task cgroup is left in them."""
        for base in self.bases.values():
            _rmdir_quietly(base)


def _rmdir_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()
