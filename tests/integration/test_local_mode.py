"""Local mode end to end: a real server, a real agent, real child processes, real HTTP."""

from __future__ import annotations

import json
import textwrap

import psutil

from shoal.client import ShoalError
from tests.integration.conftest import LocalCluster

DUMP_ENV = "python -c 'import json, os; print(json.dumps(dict(os.environ)))'"


def native(name: str, roles: str, extra: str = "") -> str:
    return f"version: 1\nname: {name}\n{extra}roles:\n{textwrap.indent(roles, '  ')}"


def test_two_roles_three_instances_across_two_nodes(cluster: LocalCluster) -> None:
    job_id = cluster.submit(
        native(
            "envjob",
            f"""\
learner:
  instances: 1
  resources: {{cpu: 3, memory: 1024, gpu: 2}}
  command: {DUMP_ENV}
actor:
  instances: 2
  resources: {{cpu: 2, memory: 512}}
  command: {DUMP_ENV}
""",
        )
    )
    job = cluster.wait(job_id)
    assert job["state"] == "SUCCEEDED", job
    detail = cluster.client.job(job_id)
    tasks = {(t["role"], t["index"]): t for t in detail["tasks"]}
    assert {t["node"] for t in tasks.values()} == {"node-0", "node-1"}
    envs = {key: json.loads(cluster.log(job_id, *key)) for key in tasks}
    hosts = {
        role: ",".join(
            f"{t['address']}:{t['ports']['http'][0]}"
            for (r, _), t in sorted(tasks.items(), key=lambda kv: kv[0][1])
            if r == role
        )
        for role in ("learner", "actor")
    }
    ranks = set()
    for (role, index), env in envs.items():
        task = tasks[(role, index)]
        assert env["SHOAL_TASK_ROLE"] == env["PAI_CURRENT_TASK_ROLE_NAME"] == role
        assert (
            env["SHOAL_TASK_INDEX"] == env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == str(index)
        )
        assert (
            env["SHOAL_LEARNER_HOSTS"] == env["PAI_TASK_ROLE_learner_HOST_LIST"] == hosts["learner"]
        )
        assert env["SHOAL_ACTOR_HOSTS"] == env["PAI_TASK_ROLE_actor_HOST_LIST"] == hosts["actor"]
        assert env["JOB_NAME"] == "envjob"
        assert env["COMPONENT_TYPE"] == role and env["COMPONENT_INDEX"] == str(index)
        assert env["MASTER_ADDR"] == tasks[("learner", 0)]["address"]
        assert env["MASTER_PORT"] == str(tasks[("learner", 0)]["ports"]["http"][0])
        assert env["WORLD_SIZE"] == "3"
        ranks.add(env["RANK"])
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, task["gpus"]))
        assert env["SHOAL_NODE_NAME"] == task["node"]
    assert ranks == {"0", "1", "2"}
    assert envs[("learner", 0)]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert envs[("actor", 0)]["NVIDIA_VISIBLE_DEVICES"] == "none"


def test_job_that_does_not_fit_waits_with_a_reason_then_starts(cluster: LocalCluster) -> None:
    blocker = cluster.submit(
        native(
            "blocker",
            """\
w:
  instances: 2
  resources: {gpu: 2}
  command: sleep 2
""",
        )
    )
    cluster.wait_for(lambda: cluster.client.job(blocker)["state"] == "RUNNING")
    waiting = cluster.submit(
        native(
            "waiter",
            """\
w:
  resources: {gpu: 2}
  command: echo ran
""",
        )
    )
    # the reason and the queue position come from the same cycle but are published one after
    # the other: wait for both
    cluster.wait_for(
        lambda: (cluster.client.job(waiting).get("pending") or {}).get("position") is not None
    )
    pending = cluster.client.job(waiting)
    assert pending["state"] == "WAITING"
    assert pending["pending"]["code"] == "InsufficientGPU"
    assert "needs 2 GPUs on one node" in pending["pending"]["message"]
    assert pending["pending"]["position"] == 1
    why = cluster.client.why(waiting)
    assert why["blockers"] == [blocker]  # the job that has to finish first
    assert why["code"] == "InsufficientGPU" and why["virtualCluster"] == "default"
    done = cluster.wait(waiting)
    assert done["state"] == "SUCCEEDED"
    first = cluster.client.job(blocker)
    assert first["state"] == "SUCCEEDED"
    # It needs one node's 2 GPUs: it may start once the first of the blocker's two tasks (one
    # per node) has ended, before the blocker as a whole has.
    freed = min(task["finishedAt"] for task in first["tasks"])
    assert done["launchedAt"] >= freed
    assert cluster.log(waiting, "w") == "ran\n"


def test_gang_no_task_starts_before_all_are_placed(cluster: LocalCluster) -> None:
    # 3 tasks of 2 GPUs on 2 nodes × 2 GPUs: never fits, rejected at submission.
    try:
        cluster.submit(
            native("toobig", "w:\n  instances: 3\n  resources: {gpu: 2}\n  command: x\n")
        )
    except ShoalError as exc:
        assert exc.status == 422 and exc.code == "NeverFits"
    else:
        raise AssertionError("an infeasible gang was accepted")
    # Occupy one node's GPUs: a 2-task gang of 2 GPUs each must wait, with nothing started.
    holder = cluster.submit(native("holder", "h:\n  resources: {gpu: 2}\n  command: sleep 2\n"))
    cluster.wait_for(lambda: cluster.client.job(holder)["state"] == "RUNNING")
    gang = cluster.submit(
        native(
            "gang",
            """\
w:
  instances: 2
  resources: {gpu: 2}
  command: python -c 'import time; print(time.time())'
""",
        )
    )
    cluster.wait_for(lambda: cluster.client.job(gang).get("pending") is not None)
    waiting = cluster.client.job(gang)
    assert waiting["tasks"] == [] and waiting["state"] == "WAITING"
    assert waiting["pending"]["code"] == "GangDoesNotFit"
    assert cluster.wait(gang)["state"] == "SUCCEEDED"
    placed = next(e for e in cluster.client.events(gang) if e["kind"] == "placed")
    starts = [float(cluster.log(gang, "w", i)) for i in (0, 1)]
    assert all(start >= placed["at"] for start in starts)


def test_task_retries_then_succeeds(cluster: LocalCluster) -> None:
    job_id = cluster.submit(
        native(
            "flaky",
            """\
w:
  retries: 2
  command: echo "attempt $SHOAL_TASK_ATTEMPT"; test "$SHOAL_TASK_ATTEMPT" -ge 3
""",
        )
    )
    job = cluster.wait(job_id)
    assert job["state"] == "SUCCEEDED", job
    (task,) = job["tasks"]
    assert task["attempt"] == 3
    kinds = [e["kind"] for e in cluster.client.events(job_id)]
    assert kinds.count("retried") == 2
    assert cluster.log(job_id, "w") == "attempt 3\n"


def test_failure_fails_the_job_per_completion_policy(cluster: LocalCluster) -> None:
    tolerant = cluster.submit(
        native(
            "tolerant",
            """\
w:
  instances: 3
  completion: {min_failed: 2}
  command: test "$SHOAL_TASK_INDEX" != 1
""",
        )
    )
    job = cluster.wait(tolerant)
    assert job["state"] == "SUCCEEDED"  # one failure is below the threshold of 2
    strict = cluster.submit(
        native(
            "strict",
            """\
w:
  instances: 2
  command: if [ "$SHOAL_TASK_INDEX" = 1 ]; then exit 3; else sleep 30; fi
""",
        )
    )
    job = cluster.wait(strict)
    assert job["state"] == "FAILED"
    assert job["exitCode"] == 3 and job["exitClass"] == "USER_FAILURE"
    # The job fails at once; its surviving task is stopped (and holds its resources until then).
    cluster.wait_for(lambda: cluster.client.job(strict)["tasks"][0]["state"] == "STOPPED")
    job = cluster.client.job(strict)
    states = {t["index"]: t["state"] for t in job["tasks"]}
    assert states == {0: "STOPPED", 1: "FAILED"}  # the survivor was stopped, not left running


def test_job_retry_runs_a_new_attempt(cluster: LocalCluster) -> None:
    job_id = cluster.submit(
        native(
            "again",
            """\
w:
  command: echo "job attempt $SHOAL_JOB_ATTEMPT"; test "$SHOAL_JOB_ATTEMPT" = 2
""",
            extra="retries: 1\n",
        )
    )
    job = cluster.wait(job_id)
    assert job["state"] == "SUCCEEDED" and job["attempt"] == 2
    assert cluster.log(job_id, "w") == "job attempt 2\n"
    assert "requeued" in [e["kind"] for e in cluster.client.events(job_id)]


def test_stop_kills_the_whole_process_tree(cluster: LocalCluster) -> None:
    job_id = cluster.submit(
        native(
            "tree",
            """\
w:
  command: |
    sleep 300 &
    (sleep 300 & echo "child $!"; wait) &
    echo "shell $$"
    echo "child $!"
    wait
""",
        )
    )
    cluster.wait_for(lambda: cluster.output_so_far(job_id, "w").count("\n") >= 3)
    text = cluster.client.logs(job_id, "w")["data"]
    pids = [int(line.split()[1]) for line in text.splitlines()]
    assert all(psutil.pid_exists(pid) for pid in pids)
    cluster.client.stop(job_id)
    job = cluster.wait(job_id, timeout_s=20)
    assert job["state"] == "STOPPED"
    assert job["tasks"][0]["exitClass"] == "STOPPED"

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    cluster.wait_for(lambda: all(gone(pid) for pid in pids), timeout_s=10)


def test_logs_are_complete_and_follow_works(cluster: LocalCluster) -> None:
    big = cluster.submit(
        native(
            "big",
            """\
w:
  command: python -c 'import sys; [print(f"line {i:06d} " + "x" * 50) for i in range(30000)]'
""",
        )
    )
    assert cluster.wait(big)["state"] == "SUCCEEDED"
    text = cluster.log(big, "w")
    lines = text.splitlines()
    assert len(lines) == 30000
    assert lines[0].startswith("line 000000") and lines[-1].startswith("line 029999")
    slow = cluster.submit(
        native(
            "slow",
            """\
w:
  command: for i in 1 2 3 4 5 6 7 8; do echo "tick $i"; sleep 0.3; done
""",
        )
    )
    seen_while_running = []
    collected = ""
    for chunk in cluster.client.follow_logs(slow, "w", poll_s=0.1, timeout_s=30):
        collected += chunk
        seen_while_running.append(cluster.client.job(slow)["state"] == "RUNNING")
    assert collected == "".join(f"tick {i}\n" for i in range(1, 9))
    assert any(seen_while_running), "follow only saw output after the task ended"


def test_max_runtime_is_enforced(cluster: LocalCluster) -> None:
    job_id = cluster.submit(
        native("forever", "w:\n  command: sleep 300\n", extra="max_runtime: 2\n")
    )
    job = cluster.wait(job_id, timeout_s=30)
    assert job["state"] == "FAILED"
    assert job["exitClass"] == "TIMEOUT"
    (task,) = job["tasks"]
    assert task["exitCode"] == -220 and "max runtime" in task["diagnostics"]
    assert 1.5 <= task["finishedAt"] - task["startedAt"] < 10  # counted from the job's launch
