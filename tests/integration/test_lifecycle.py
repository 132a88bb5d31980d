"""Final states with real processes: `shoal down` never turns a killed job into a success, a
timeout says so, a preemption is counted as a resource retry, and a task that exited 0 on its own
keeps its success when its sibling's failure decides the job."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import httpx

from shoal.local.supervisor import alive, stop_local
from tests.integration.conftest import LocalCluster, start_cluster
from tests.integration.test_local_mode import native
from tests.integration.test_quota_scenarios import ONE_GPU, running, vc


def _openpai(cluster: LocalCluster, name: str) -> dict[str, Any]:
    token = (cluster.home / "admin.token").read_text().strip()
    response = httpx.get(
        f"{cluster.info.url}/api/v2/jobs/admin~{name}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def _task_running(cluster: LocalCluster, job_id: str) -> bool:
    tasks = cluster.client.job(job_id)["tasks"]
    return bool(tasks) and all(t["state"] == "RUNNING" for t in tasks)


def test_shoal_down_stops_a_running_job_and_up_keeps_it_stopped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cluster = start_cluster(home, nodes=1)
    try:
        job_id = cluster.submit(native("long", "w:\n  instances: 2\n  command: sleep 300\n"))
        cluster.wait_for(lambda: _task_running(cluster, job_id))
        pids = [t["pid"] for t in cluster.client.job(job_id)["tasks"]]
        cluster.client.close()
        stop_local(home, grace_s=15)  # `shoal down`
        assert not any(alive(pid) for pid in pids)
        cluster = start_cluster(home, nodes=1)  # `shoal up`
        job = cluster.wait(job_id, timeout_s=30)
    finally:
        cluster.client.close()
        stop_local(home, grace_s=10)
    assert job["state"] == "STOPPED", job
    assert job["exitClass"] == "STOPPED" and job["exitCode"] != 0
    assert "shoal down" in job["diagnostics"], job["diagnostics"]
    for task in job["tasks"]:
        assert (task["state"], task["exitClass"], task["exitCode"]) == ("STOPPED", "STOPPED", 143)
        assert "agent shut down" in task["diagnostics"], task


def test_a_timeout_says_the_max_runtime_was_reached(cluster: LocalCluster) -> None:
    job_id = cluster.submit(
        native("slowpoke", "w:\n  instances: 2\n  command: sleep 300\n", extra="max_runtime: 2\n")
    )
    job = cluster.wait(job_id, timeout_s=30)
    assert (job["state"], job["exitClass"], job["exitCode"]) == ("FAILED", "TIMEOUT", -220)
    assert "max runtime of 2s was reached" in job["diagnostics"], job["diagnostics"]
    assert "failed" not in job["diagnostics"]


def test_a_preemption_is_a_resource_retry_and_a_failure_a_user_retry(
    cluster: LocalCluster,
) -> None:
    vc(cluster, "prod", 4)  # all 4 GPUs guaranteed to prod; exp has none and only borrows
    vc(cluster, "exp", 0)
    exp_jobs = {
        f"e{i}": cluster.submit(
            native(f"e{i}", ONE_GPU.format(gpu=2, seconds=60)), virtual_cluster="exp"
        )
        for i in range(2)
    }
    cluster.wait_for(lambda: all(running(cluster, j) for j in exp_jobs.values()), timeout_s=30)
    prod = cluster.submit(native("p0", ONE_GPU.format(gpu=2, seconds=1)), virtual_cluster="prod")
    assert cluster.wait(prod, timeout_s=60)["state"] == "SUCCEEDED"
    (victim,) = [
        name
        for name, j in exp_jobs.items()
        if "preempted" in [e["kind"] for e in cluster.client.events(j)]
    ]
    cluster.wait_for(lambda: cluster.client.job(exp_jobs[victim])["attempt"] == 2, timeout_s=30)
    status = _openpai(cluster, victim)["jobStatus"]
    assert status["retryDetails"] == {"user": 0, "platform": 0, "resource": 1}
    assert status["retries"] == 1
    retries = cluster.client.job(exp_jobs[victim])["retries"]
    assert retries == {"user": 0, "platform": 0, "resource": 1}  # /api/v1 says the same
    for job_id in exp_jobs.values():
        cluster.client.stop(job_id)
    again = cluster.submit(
        native("again", 'w:\n  command: test "$SHOAL_JOB_ATTEMPT" = 2\n', extra="retries: 1\n")
    )
    assert cluster.wait(again)["state"] == "SUCCEEDED"
    status = _openpai(cluster, "again")["jobStatus"]
    assert status["retryDetails"] == {"user": 1, "platform": 0, "resource": 0}
    assert cluster.client.job(again)["retries"] == {"user": 1, "platform": 0, "resource": 0}


def test_a_task_that_exited_0_keeps_its_success_when_its_sibling_fails(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    # w/0 writes a big log, then exits 0; w/1 fails right after. An exit is reported only once
    # its log is shipped, so the server hears of w/1's failure first, decides the job and asks
    # for w/0 to be stopped: too late, w/0 had already exited on its own.
    flag = tmp_path / "zero-done"
    command = (
        'if [ "$SHOAL_TASK_INDEX" = 0 ]; then '
        "python -c 'import sys; sys.stdout.write(\"x\" * 40_000_000)'; "
        f"touch {flag}; exit 0; "
        f"else while [ ! -e {flag} ]; do sleep 0.01; done; exit 3; fi"
    )
    job_id = cluster.submit(native("pair", f"w:\n  instances: 2\n  command: {command}\n"))
    cluster.wait(job_id, timeout_s=60)
    cluster.wait_for(
        lambda: all(
            t["state"] in ("SUCCEEDED", "FAILED", "STOPPED")
            for t in cluster.client.job(job_id)["tasks"]
        ),
        timeout_s=60,
    )
    job = cluster.client.job(job_id)
    assert (job["state"], job["exitClass"], job["exitCode"]) == ("FAILED", "USER_FAILURE", 3)
    tasks = {t["index"]: t for t in job["tasks"]}
    assert (tasks[1]["state"], tasks[1]["exitClass"], tasks[1]["exitCode"]) == (
        "FAILED",
        "USER_FAILURE",
        3,
    )
    assert (tasks[0]["state"], tasks[0]["exitClass"], tasks[0]["exitCode"]) == (
        "SUCCEEDED",
        "SUCCEEDED",
        0,
    ), tasks[0]
    # The failure was heard first, so the race happened. The API lists events by the time they
    # happened (w/0 exited first), so the order the server recorded them in is read from the store.
    with sqlite3.connect(cluster.home / "shoal.db") as db:
        heard = [
            message
            for (message,) in db.execute(
                "SELECT message FROM events WHERE job_id = ? AND kind = 'exited' ORDER BY id",
                (job_id,),
            )
        ]
    assert heard[0].startswith("w[1]"), heard


def test_shoal_down_with_the_server_gone_delivers_the_exits_on_the_next_up(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    cluster = start_cluster(home, nodes=1)
    try:
        job_id = cluster.submit(native("orphaned", "w:\n  command: sleep 300\n"))
        cluster.wait_for(lambda: _task_running(cluster, job_id))
        cluster.client.close()
        os.killpg(cluster.info.server_pid, signal.SIGKILL)  # the server is gone first
        cluster.wait_for(lambda: not alive(cluster.info.server_pid), timeout_s=10)
        stop_local(home, grace_s=15)  # the agent stops its task but cannot report it
        assert (home / "agent" / "unreported-exits.json").exists()
        cluster = start_cluster(home, nodes=1)
        job = cluster.wait(job_id, timeout_s=30)
    finally:
        cluster.client.close()
        stop_local(home, grace_s=10)
    assert (job["state"], job["exitClass"]) == ("STOPPED", "STOPPED"), job
    assert "shoal down" in job["diagnostics"]
    (task,) = job["tasks"]
    assert (task["state"], task["exitCode"]) == ("STOPPED", 143), task
