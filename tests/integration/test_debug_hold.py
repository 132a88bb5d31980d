"""Failed tasks held for debugging (docs/debug-jobs.md), through the whole product: real server and
agent processes, the CLI as a user runs it. A ``debug: true`` task that exits 1 stays up (exec
reaches it and reads what it left), keeps its GPUs (another job waits for them, with its reason),
and ends FAILED with exit code 1 when released (`shoal job release`) or when its hold runs out; an
OpenPAI v2 job with ``extras.jobEnvs.isDebug`` is held the same way; a task that exits 0 is not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from shoal.local.supervisor import stop_local
from tests.integration.conftest import LocalCluster, start_cluster
from tests.integration.conftest import local_cli as shoal
from tests.integration.test_local_mode import native

FAILING = "echo left-behind > clue.txt; echo failing; exit 1"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One node with two (simulated) GPUs for the module (`shoal --context local` finds it)."""
    home = tmp_path_factory.mktemp("debug") / "shoal-home"
    running = start_cluster(home, nodes=1, gpus=2)
    (home / "server.json").write_text(json.dumps({"url": running.info.url}))
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


def main_task(
    cluster: LocalCluster, job_id: str, role: str = "main", index: int = 0
) -> dict[str, Any]:
    tasks = cluster.client.job(job_id)["tasks"]
    return next((t for t in tasks if (t["role"], t["index"]) == (role, index)), {})


def held(cluster: LocalCluster, job_id: str, role: str = "main", index: int = 0) -> dict[str, Any]:
    """The job's task once it is held (its command exited, it still runs), within 30 s."""
    cluster.wait_for(
        lambda: (
            main_task(cluster, job_id, role, index)
            .get("diagnostics", "")
            .startswith("held for debugging")
        ),
        30,
    )
    return main_task(cluster, job_id, role, index)


def test_a_released_task_stays_reachable_and_reserved_until_released(local: LocalCluster) -> None:
    job_id = local.submit(
        native("debugged", f"main:\n  debug: true\n  resources: {{gpu: 2}}\n  command: {FAILING}\n")
    )
    task = held(local, job_id)
    assert task["state"] == "RUNNING" and task["exitCode"] == 1
    assert f"shoal job release {job_id} --task main/0" in task["diagnostics"]
    events = [e for e in local.client.events(job_id) if e["kind"] == "held"]
    assert len(events) == 1 and "main[0] exited 1; held for debugging until" in events[0]["message"]

    looked = shoal(
        local, "job", "exec", job_id, "--", "sh", "-c", "echo $SHOAL_TASK_ROLE; cat clue.txt"
    )
    assert looked.returncode == 0, looked.stderr
    assert looked.stdout.splitlines() == ["main", "left-behind"]

    waiting = local.submit(native("waiter", "w:\n  resources: {gpu: 1}\n  command: echo ran\n"))
    local.wait_for(lambda: (local.client.job(waiting).get("pending") or {}).get("code") is not None)
    assert local.client.job(waiting)["pending"]["code"] == "InsufficientGPU"
    assert local.client.job(job_id)["state"] == "RUNNING"  # the failure is not judged yet
    assert local.client.why(waiting)["blockers"] == [job_id]
    status = shoal(local, "job", "status", job_id)
    assert "main/0: held for debugging until" in status.stdout, status.stdout

    released = shoal(local, "job", "release", job_id)
    assert released.returncode == 0, released.stderr
    assert f"job {job_id}: main/0 released" in released.stdout
    done = local.wait(job_id)
    assert done["state"] == "FAILED" and done["exitCode"] == 1, done
    ended = main_task(local, job_id)
    assert (ended["state"], ended["exitCode"], ended["exitClass"]) == ("FAILED", 1, "USER_FAILURE")
    assert local.wait(waiting)["state"] == "SUCCEEDED"  # the GPUs were freed with it
    assert "ran" in local.log(waiting, "w")

    again = shoal(local, "job", "release", job_id)
    assert again.returncode == 1 and "has no task held for debugging" in again.stderr


def test_a_hold_ends_by_itself_when_its_time_runs_out(local: LocalCluster) -> None:
    job_id = local.submit(
        native("timed", f"main:\n  debug: true\n  debug_hold: 3s\n  command: {FAILING}\n")
    )
    held(local, job_id)
    done = local.wait(job_id, timeout_s=30)
    assert done["state"] == "FAILED" and done["exitCode"] == 1, done
    assert main_task(local, job_id)["exitCode"] == 1
    kinds = [e["message"] for e in local.client.events(job_id) if e["kind"] == "released"]
    assert kinds == ["main[0]: its hold for debugging ran out"]


def test_an_openpai_job_with_is_debug_is_held_and_released_by_task(local: LocalCluster) -> None:
    text = f"""\
protocolVersion: 2
name: paidebug
type: job
prerequisites:
  - {{type: dockerimage, name: img, uri: python:3.11}}
taskRoles:
  worker:
    instances: 2
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0}}
    commands:
      - 'if [ "$PAI_TASK_INDEX" = 1 ]; then {FAILING}; fi; sleep 300'
extras:
  jobEnvs:
    isDebug: true
"""
    job_id = local.submit(text)
    task = held(local, job_id, "worker", 1)
    assert task["state"] == "RUNNING" and task["exitCode"] == 1
    looked = shoal(local, "job", "exec", job_id, "--task", "worker/1", "--", "cat", "clue.txt")
    assert looked.returncode == 0 and looked.stdout == "left-behind\n", looked.stderr
    refused = shoal(local, "job", "release", job_id, "--task", "worker/0")
    assert refused.returncode == 1 and "task worker/0 of job" in refused.stderr

    assert local.client.release(job_id, "worker/1") == {"id": job_id, "released": ["worker/1"]}
    done = local.wait(job_id)  # the failed task fails the job (minFailedInstances 1)
    assert done["state"] == "FAILED" and done["exitCode"] == 1, done
    by_index = {t["index"]: t for t in local.client.job(job_id)["tasks"]}
    assert (by_index[1]["state"], by_index[1]["exitCode"]) == ("FAILED", 1)
    local.wait_for(lambda: main_task(local, job_id, "worker", 0)["state"] == "STOPPED")


def test_a_task_that_succeeds_is_not_held(local: LocalCluster) -> None:
    job_id = local.submit(native("fine", "main:\n  debug: true\n  command: echo fine\n"))
    done = local.wait(job_id, timeout_s=30)
    assert done["state"] == "SUCCEEDED"
    assert not [e for e in local.client.events(job_id) if e["kind"] == "held"]
