"""``shoal status`` as a user reads it, against a stand-in client."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.cli import cluster_commands
from tests.cli.test_job_cli import shoal

STATES = ("WAITING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED")


def cluster(jobs: dict[str, int]) -> dict[str, Any]:
    """``GET /api/v1/cluster``'s answer: every state counted, as the server sends it."""
    return {
        "url": "http://127.0.0.1:8476",
        "version": "0.1.0",
        "totals": {"nodes": 2, "cpus": 8.0, "memoryMiB": 16384, "gpus": 4},
        "allocated": {"cpus": 0.0, "memoryMiB": 0, "gpus": 0},
        "jobs": {state: jobs.get(state, 0) for state in STATES},
    }


@pytest.mark.parametrize(
    ("jobs", "line"),
    [({}, "jobs: none"), ({"RUNNING": 1, "FAILED": 2}, "jobs: 1 running, 2 failed")],
)
def test_status_names_the_jobs_or_says_there_are_none(
    monkeypatch: pytest.MonkeyPatch, jobs: dict[str, int], line: str
) -> None:
    class Fake:
        def cluster(self) -> dict[str, Any]:
            return cluster(jobs)

    monkeypatch.setattr(cluster_commands, "client", Fake)
    result = shoal("status")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == line
