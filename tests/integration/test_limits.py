"""Limits through the whole product (server, scheduler, agent, real processes, real cgroups): a
task over its memory ends as OOM with the diagnostic and its retries, the OpenPAI API shows
-1200, `job status` shows each task's CPU time and peak memory, and the node lists what it
cannot limit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli.main import app
from tests.agent.limits_helpers import cgroups_refused
from tests.integration.conftest import LocalCluster
from tests.integration.test_lifecycle import _openpai
from tests.integration.test_local_mode import native

REFUSED = cgroups_refused()
pytestmark = pytest.mark.skipif(REFUSED is not None, reason=f"no cgroup limits here: {REFUSED}")


def test_a_task_over_its_memory_is_oom_with_the_limit_and_peak_and_is_retried(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hog = f"{sys.executable} -c 'b = bytearray(400 << 20)'"
    roles = f"hog:\n  resources: {{cpu: 1, memory: 96Mi}}\n  retries: 1\n  command: {hog}\n"
    job_id = cluster.submit(native("hog", roles))
    job = cluster.wait(job_id)
    assert job["state"] == "FAILED"
    task = cluster.client.job(job_id)["tasks"][0]
    assert task["exitClass"] == "OOM" and task["exitCode"] == -1200
    assert task["attempt"] == 2  # the role's retry was applied
    assert "killed by its memory limit of 96 MiB (peak use" in task["diagnostics"]
    assert 90 <= task["usage"]["peakMemoryMiB"] <= 96.5
    events = " ".join(e["message"] for e in cluster.client.events(job_id))
    assert events.count("exited: OOM (code -1200)") == 2

    pai = _openpai(cluster, "hog")
    status = pai["taskRoles"]["hog"]["taskStatuses"][0]
    assert status["containerExitSpec"]["phrase"] == "UserContainerDockerOOMKilled"

    monkeypatch.setenv("SHOAL_URL", cluster.info.url)
    monkeypatch.setenv("SHOAL_TOKEN", (cluster.home / "admin.token").read_text().strip())
    monkeypatch.setenv("COLUMNS", "120")
    shown = CliRunner().invoke(app, ["job", "status", job_id])
    assert shown.exit_code == 0, shown.output
    assert "CPU-TIME" in shown.output and "PEAK-MEM" in shown.output
    assert "-1200 OOM" in shown.output


def test_a_busy_task_reports_its_cpu_time_in_job_status(cluster: LocalCluster) -> None:
    # a second of CPU, however long it takes the busy machine to give it (not a second of time)
    loop = "[0 for _ in iter(lambda: time.process_time() < 1, False)]"
    burn = f"{sys.executable} -c 'import time; {loop}'"
    roles = f"burn:\n  resources: {{cpu: 1}}\n  command: |\n    {burn}\n"
    job_id = cluster.submit(native("burn", roles))
    assert cluster.wait(job_id)["state"] == "SUCCEEDED"
    usage = cluster.client.job(job_id)["tasks"][0]["usage"]
    assert usage["cpuSeconds"] >= 0.8
    assert usage["memoryLimitMiB"] == 1024
