"""Each attempt's limits, usage and OOM kills, through its cgroup (shoal.agent.cgroups).

The agent probes once, at start, what this node can limit; what it cannot is reported as the
node's ``unsupported`` limits and written at the top of the stderr of every task that asked for
it. Each attempt's cgroup directories are saved beside its keeper's record, so an agent started
again finds the cgroups of the attempts it adopts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from pathlib import Path

from shoal.agent.cgroups import CgroupHost, TaskCgroup
from shoal.protocol import TaskLimits

log = logging.getLogger("shoal.agent")
CGROUP_FILE = "cgroup.json"
LIMITED = ("memory", "cpu", "pids")
DEFAULT_PIDS = 4096  # a task's processes and threads when the order does not say
PROBE = TaskLimits(cpu_millis=1000, memory_mib=64, pids=64)
SIGKILL = 9
KILLED_EXIT = 128 + SIGKILL


def instance_name(home: Path) -> str:
    """This agent's name among others on the machine, the same each time it starts on ``home``:
    its cgroup directory and its containers' name prefix."""
    return "shoal-" + hashlib.sha1(str(home.resolve()).encode()).hexdigest()[:10]


class TaskLimiter:
    def __init__(self, home: Path, enabled: bool = True) -> None:
        self.host = CgroupHost(instance_name(home))
        if enabled:
            self.unsupported = self.host.probe(PROBE)
        else:
            self.unsupported = dict.fromkeys(LIMITED, "limits are turned off for this agent")
        for limit, reason in self.unsupported.items():
            log.warning("tasks here are not held to their %s limit: %s", limit, reason)

    def create(self, attempt_id: str, limits: TaskLimits, attempt_dir: Path) -> TaskCgroup | None:
        """The attempt's cgroup with its limits, or None when this node limits nothing."""
        if all(limit in self.unsupported for limit in LIMITED):
            return None
        # recorded before it is made: an agent killed meanwhile finds it when it starts again
        # (and a fenced keeper removes it, shoal.agent.keeper)
        planned = self.host.planned(attempt_id)
        (attempt_dir / CGROUP_FILE).write_text(
            json.dumps(
                {"version": planned.version, "dirs": {k: str(v) for k, v in planned.dirs.items()}}
            )
        )
        cgroup = self.host.create(attempt_id)
        refused = cgroup.apply(limits)
        for limit, reason in refused.items():  # found since the probe: reported from now on
            self.unsupported.setdefault(limit, reason)
        return cgroup

    def find(self, attempt_dir: Path) -> TaskCgroup | None:
        """The cgroup an attempt was started in (by this agent or an earlier run of it)."""
        try:
            saved = json.loads((attempt_dir / CGROUP_FILE).read_text())
        except (OSError, ValueError):
            return None
        return TaskCgroup(int(saved["version"]), {k: Path(v) for k, v in saved["dirs"].items()})

    def notice(self, limits: TaskLimits | None, runtime_refused: dict[str, str]) -> str:
        """What the task will not be held to here, for the top of its stderr ("" when nothing)."""
        if limits is None:
            return ""
        wanted = {
            "memory": f"memory {limits.memory_mib} MiB",
            "cpu": f"cpu {limits.cpu_millis / 1000:g}",
            "pids": f"pids {limits.pids}",
        }
        if limits.shm_mib is not None:
            wanted["shm"] = f"/dev/shm {limits.shm_mib} MiB"
        wanted["gpu-devices"] = "GPU devices (only its own GPUs' device files)"
        refused = {**self.unsupported, **runtime_refused}
        lines = [
            f"shoal: this node cannot enforce the task's {text} limit: {refused[limit]}\n"
            for limit, text in wanted.items()
            if limit in refused
        ]
        return "".join(lines)

    def usage(
        self, cgroup: TaskCgroup, limits: TaskLimits | None, previous: dict[str, float]
    ) -> dict[str, float]:
        """The task's use from its cgroup: CPU time, memory now, peak memory, processes."""
        stats = cgroup.stats()
        usage = dict(previous)
        if stats.cpu_seconds is not None:
            usage["cpuSeconds"] = round(max(stats.cpu_seconds, previous.get("cpuSeconds", 0.0)), 3)
        if stats.memory_mib is not None:
            usage["rssMiB"] = round(stats.memory_mib, 1)
            usage["maxRssMiB"] = round(max(stats.memory_mib, previous.get("maxRssMiB", 0.0)), 1)
        if stats.peak_memory_mib is not None:
            peak = max(stats.peak_memory_mib, previous.get("peakMemoryMiB", 0.0))
            usage["peakMemoryMiB"] = round(peak, 1)
        if stats.processes is not None:
            usage["processes"] = float(stats.processes)
        if limits is not None and "memory" not in self.unsupported:
            usage["memoryLimitMiB"] = float(limits.memory_mib)
        usage["oomKills"] = float(stats.oom_kills)
        return usage

    def release(self, cgroup: TaskCgroup) -> None:
        """Kill what the task left and remove its cgroup."""
        if not cgroup.remove():
            log.warning("could not remove the cgroup %s yet", next(iter(cgroup.dirs.values())))
        with contextlib.suppress(OSError):
            self.host.tidy()


def oom_verdict(
    usage: dict[str, float], exit_code: int | None, signal: int | None
) -> tuple[bool, int]:
    """(whether the OOM killer ended the task's command, how many of its processes it killed):
    the command ended by SIGKILL (or its shell said 137) in a cgroup whose OOM killer struck."""
    kills = int(usage.get("oomKills", 0))
    killed = signal == SIGKILL or exit_code == KILLED_EXIT
    return (kills > 0 and killed, kills)
