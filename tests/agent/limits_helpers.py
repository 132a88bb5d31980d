"""Run one task attempt through a real Runner (keeper, cgroup, runtime) and wait for its end."""

from __future__ import annotations

import os
import time
from pathlib import Path

from shoal.agent.cache import NodeCache
from shoal.agent.cgroups import CgroupHost
from shoal.agent.runner import Runner
from shoal.protocol import ExitReport, ImageRef, LaunchOrder, TaskLimits


def _no_downloads(path: str, sink: object) -> None:
    raise AssertionError(f"nothing to download, yet {path} was asked for")


def cgroups_refused() -> str | None:
    """Why this machine cannot limit tasks (the tests needing it skip with it), or None."""
    if os.geteuid() != 0:
        return "cgroup limits need root"
    host = CgroupHost("shoal-test-probe")
    if host.version == 0:
        return ", ".join(sorted(set(host.unsupported.values())))
    refused = host.probe(TaskLimits(cpu_millis=1000, memory_mib=64, pids=64))
    return "; ".join(f"{k}: {v}" for k, v in refused.items()) or None


def make_runner(home: Path) -> Runner:
    return Runner(home, NodeCache(home / "cache", _no_downloads))


def order(
    command: str,
    attempt_id: str = "1.1",
    *,
    cpu_millis: int = 1000,
    memory_mib: int = 256,
    pids: int = 256,
    shm_mib: int | None = None,
    image: ImageRef | None = None,
    grace: float = 2.0,
) -> LaunchOrder:
    return LaunchOrder(
        attempt_id=attempt_id,
        job_id=attempt_id.split(".", maxsplit=1)[0],
        role="main",
        index=0,
        node="n0",
        command=command,
        env={"SHOAL_TASK_ROLE": "main"},
        hostfile="",
        has_code=False,
        kill_grace_s=grace,
        epoch=0,
        runtime="container" if image is not None else "process",
        image=image,
        limits=TaskLimits(cpu_millis=cpu_millis, memory_mib=memory_mib, pids=pids, shm_mib=shm_mib),
    )


def run_to_end(runner: Runner, launch: LaunchOrder, timeout: float = 60.0) -> ExitReport:
    runner.launch(launch)
    deadline = time.monotonic() + timeout
    while True:
        runner.poll()
        attempt = runner.attempts[launch.attempt_id]
        if attempt.exit is not None:
            return attempt.exit
        assert time.monotonic() < deadline, f"{launch.attempt_id} did not end in {timeout} s"
        runner.sample_usage()
        time.sleep(0.05)


def log_text(runner: Runner, attempt_id: str, stream: str = "stderr") -> str:
    return runner.attempts[attempt_id].log_path(stream).read_text(errors="replace")
