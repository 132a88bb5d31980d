"""A task attempt's processes: its keeper (shoal.agent.keeper) as a child of this agent or adopted
from an agent that ran before it, how it ended, and what its task tree uses."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from shoal.agent import keeper
from shoal.agent.journal import same_process

# The keeper runs on this agent's interpreter, isolated (-I: no user site, no PYTHON* variables;
# -S: no site import), so it starts in a few milliseconds and whatever the task's environment.
KEEPER = [sys.executable, "-I", "-S", keeper.__file__]


@dataclass(frozen=True, slots=True)
class Ended:
    """How an attempt's task ended (``exit_code`` None: by ``signal``)."""

    exit_code: int | None
    signal: int | None
    fenced: bool
    usage: dict[str, float]


def keeper_argv(
    attempt_dir: Path, lease: Path, grace: float, argv: list[str], join: list[str] | None = None
) -> list[str]:
    """``join``: the cgroup.procs files the task's command joins before it starts."""
    joined = ":".join(join) if join else "-"
    return [*KEEPER, str(attempt_dir), str(lease), f"{grace:g}", joined, "--", *argv]


def signal_group(pid: int, signo: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signo)


def reap_child(proc: subprocess.Popen[bytes]) -> int | None:
    """The keeper's wait status (``Popen.poll``'s convention) once it has exited."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return proc.poll()
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def adopted_alive(pid: int, create_time: float | None) -> bool:
    return same_process(pid, create_time)


def ended_from(record: dict[str, Any] | None, status: int | None, usage: dict[str, float]) -> Ended:
    """How the task ended: the keeper's record if it wrote one, else the keeper's own wait status
    (``status``; None when it is not this agent's child), else killed (SIGKILL ends the keeper
    before it can write)."""
    if record is not None:
        final = dict(usage)
        if "cpu_seconds" in record:
            final["cpuSeconds"] = round(
                max(float(record["cpu_seconds"]), usage.get("cpuSeconds", 0.0)), 3
            )
            peak = float(record["max_rss_kib"]) / 1024  # KiB on Linux
            final["maxRssMiB"] = round(max(peak, usage.get("maxRssMiB", 0.0)), 1)
        fenced = bool(record.get("fenced"))
        return Ended(record.get("exit_code"), record.get("signal"), fenced, final)
    if status is not None and status >= 0:
        return Ended(status, None, False, usage)
    return Ended(None, -status if status is not None else signal.SIGKILL, False, usage)


def tree_usage(pid: int, previous: dict[str, float]) -> dict[str, float]:
    """What the task's processes use: the keeper's descendants (the keeper itself is shoal's)."""
    try:
        processes = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return previous
    if not processes:
        return previous
    cpu = 0.0
    rss = 0
    for process in processes:
        try:
            times = process.cpu_times()
            cpu += times.user + times.system + times.children_user + times.children_system
            rss += process.memory_info().rss
        except psutil.Error:
            continue
    rss_mib = rss / (1 << 20)
    return {
        "cpuSeconds": round(max(cpu, previous.get("cpuSeconds", 0.0)), 3),
        "rssMiB": round(rss_mib, 1),
        "maxRssMiB": round(max(rss_mib, previous.get("maxRssMiB", 0.0)), 1),
        "processes": float(len(processes)),
    }
