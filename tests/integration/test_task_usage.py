"""The agent's runner accounts a task's CPU time and peak memory from its exit status, so a task
that ends before the first usage sample is accounted too (real child processes)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from shoal.agent.cache import NodeCache
from shoal.agent.runner import Runner
from shoal.protocol import LaunchOrder

BURN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3:\\n    pass"


def _no_downloads(path: str, sink: object) -> None:
    raise AssertionError(f"nothing to download, yet {path} was asked for")


def test_a_short_task_reports_its_cpu_time_and_memory(tmp_path: Path) -> None:
    runner = Runner(tmp_path, NodeCache(tmp_path / "cache", _no_downloads))
    order = LaunchOrder(
        attempt_id="1.1",
        job_id="1",
        role="a",
        index=0,
        node="n0",
        command=f"{sys.executable} -c \"exec('{BURN}')\"",
        env={},
        hostfile="",
        has_code=False,
        kill_grace_s=1.0,
        epoch=0,
    )
    runner.launch(order)
    deadline = time.monotonic() + 30
    while not runner.poll():  # no sample_usage(): only the exit can account it
        assert time.monotonic() < deadline, "the task did not end"
        time.sleep(0.02)
    report = runner.attempts["1.1"].exit
    assert report is not None and report.exit_code == 0
    assert report.usage["cpuSeconds"] >= 0.25
    assert report.usage["maxRssMiB"] > 1
