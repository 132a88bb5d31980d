"""Accounting counts every attempt of a task retried in place (real processes): the task row
keeps only its last attempt's times and usage, the earlier ones are folded in at the retry."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.integration.conftest import LocalCluster

# Burns 0.3 s of CPU, then fails on its first attempt and succeeds on its second.
BURN = (
    "import os, sys, time\nstart = time.process_time()\n"
    "while time.process_time() - start < 0.3:\n    pass\n"
    "sys.exit(1 if os.environ['SHOAL_TASK_ATTEMPT'] == '1' else 0)\n"
)


def test_a_task_retried_in_place_is_accounted_for_both_attempts(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    (tmp_path / "burn.py").write_text(BURN)
    job_id = cluster.submit(
        "version: 1\nname: twice\nroles:\n  a:\n    resources: {gpu: 1}\n    retries: 1\n"
        f"    command: {sys.executable} {tmp_path / 'burn.py'}\n"
    )
    final = cluster.wait(job_id)["state"]
    detail = cluster.client.job(job_id)
    assert final == "SUCCEEDED", (detail["tasks"], cluster.client.events(job_id))
    task = detail["tasks"][0]
    assert task["attempt"] == 2
    last_run = task["finishedAt"] - task["startedAt"]
    used = detail["accounting"]
    assert used["cpuSeconds"] >= 0.5, used  # both attempts' 0.3 s, not the last one's alone
    assert used["gpuHours"] * 3600 >= last_run + 0.25, (used, last_run)
    assert used["elapsedS"] >= last_run + 0.25, (used, last_run)
