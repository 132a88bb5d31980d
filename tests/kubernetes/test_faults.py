"""Faults on kwok's nodes: the shoal server killed -9 in the middle of a 50-task launch, the API
server restarted under the watches, Pods deleted behind shoal's back and orphans left by a shoal
that no longer knows them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from shoal.local.supervisor import alive
from tests.kubernetes.conftest import NAMESPACE, KubeShoal, running_shoal
from tests.kubernetes.harness import ControlPlane, Kwok, fake_node, wait_for

# one worker runs the whole module: its cluster is started once (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("kubernetes-faults")


@pytest.fixture(scope="module")
def shoal(
    plane: ControlPlane, kwok: Kwok, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeShoal]:
    core = plane.core()
    for i in range(4):
        core.create_node(fake_node(f"kw-{i}", cpu="16", memory="64Gi", gpus=0))
    wait_for(lambda: len(core.list_node().items) == 4, 30, "four nodes")
    home: Path = tmp_path_factory.mktemp("shoal-faults") / "home"
    with running_shoal(plane, home, "--no-logs") as running:
        wait_for(
            lambda: sum(n["state"] == "READY" for n in running.client.nodes()) == 4, 60, "4 nodes"
        )
        yield running


def many(name: str, instances: int, retries: int = 0) -> str:
    return (
        f"version: 1\nname: {name}\nretries: {retries}\nroles:\n  w:\n    instances: {instances}\n"
        "    resources: {cpu: 100m, memory: 64Mi}\n    command: sleep 3600\n"
    )


def restart_server(shoal: KubeShoal) -> None:
    """kill -9 the server, then start it again on the same home and port (as an operator's
    service manager would); the Kubernetes agent is left running."""
    run_file = shoal.home / "run.json"
    info = json.loads(run_file.read_text())
    os.kill(info["server_pid"], signal.SIGKILL)
    wait_for(lambda: not alive(info["server_pid"]), 10, "the server gone")
    port = info["url"].rsplit(":", 1)[1]
    with open(shoal.home / "server.log", "ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "shoal", "server", "--home", str(shoal.home), "--port", port,
             "--kill-grace", "2", "--kubernetes"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    info["server_pid"] = server.pid  # `shoal down` (the fixture's end) stops this one
    run_file.write_text(json.dumps(info))
    wait_for(shoal.client.health, 30, "the restarted server")


def one_pod_per_task(shoal: KubeShoal, job_id: str, count: int) -> None:
    job = shoal.client.job(job_id)
    pods = shoal.pods_of(job_id)
    per_task = Counter(
        (p.metadata.labels["shoal.dev/role"], p.metadata.labels["shoal.dev/index"]) for p in pods
    )
    assert len(pods) == count and max(per_task.values()) == 1, per_task
    attempts = {f"{t['role']}/{t['index']}": t["attempt"] for t in job["tasks"]}
    for pod in pods:
        labels = pod.metadata.labels
        key = f"{labels['shoal.dev/role']}/{labels['shoal.dev/index']}"
        assert labels["shoal.dev/attempt"] == str(attempts[key]), (key, attempts[key])


def test_kill_9_of_the_server_during_a_50_task_launch_leaves_one_pod_per_task(
    shoal: KubeShoal,
) -> None:
    job_id = shoal.client.submit(many("fifty", 50))[0]["id"]
    wait_for(lambda: shoal.pods_of(job_id), 30, "the first Pods", interval=0.02)
    restart_server(shoal)
    shoal.wait_running(job_id, timeout=120)
    one_pod_per_task(shoal, job_id, 50)
    shoal.client.stop(job_id)
    shoal.wait_job(job_id, ("STOPPED",), timeout=60)
    wait_for(lambda: not shoal.pods_of(job_id), 60, "the 50 Pods deleted")


def test_the_api_server_restarted_under_the_watches(shoal: KubeShoal) -> None:
    job_id = shoal.client.submit(many("three", 3, retries=1))[0]["id"]
    shoal.wait_running(job_id)
    before = {p.metadata.name for p in shoal.pods_of(job_id)}
    shoal.plane.restart_apiserver()
    # after the restart, a Pod deleted behind shoal's back: its task is lost and runs again
    victim = sorted(before)[0]
    shoal.core.delete_namespaced_pod(victim, NAMESPACE, grace_period_seconds=0)

    def retried() -> bool:  # a lost task: its job runs again (attempt 2), a Pod per task
        job = shoal.client.job(job_id)
        tasks = job["tasks"]
        return (
            job["attempt"] >= 2 and len(tasks) == 3 and all(t["state"] == "RUNNING" for t in tasks)
        )

    try:
        wait_for(retried, 60, "the job running again after its lost task")
    except TimeoutError as exc:
        raise AssertionError(
            f"{exc}: {shoal.client.job(job_id)} {shoal.client.events(job_id)}"
        ) from None
    events = [e["message"] for e in shoal.client.events(job_id)]
    assert any("deleted outside shoal" in m for m in events), events
    one_pod_per_task(shoal, job_id, 3)
    # and a job submitted after the restart runs: orders and reports flow both ways
    after = shoal.client.submit(many("after", 2))[0]["id"]
    shoal.wait_running(after)
    for done in (job_id, after):
        shoal.client.stop(done)
        shoal.wait_job(done, ("STOPPED",), timeout=60)


def test_an_orphan_pod_shoal_does_not_know_is_deleted(shoal: KubeShoal) -> None:
    orphan = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "shoal-orphan",
            "namespace": NAMESPACE,
            "labels": {"shoal.dev/instance": "shoal", "shoal.dev/attempt-id": "99999.1"},
            "annotations": {"shoal.dev/epoch": "0", "shoal.dev/job": "99999"},
        },
        "spec": {"nodeName": "kw-0", "containers": [{"name": "task", "image": "x"}]},
    }
    shoal.core.create_namespaced_pod(NAMESPACE, orphan)

    def gone() -> bool:
        names = [p.metadata.name for p in shoal.core.list_namespaced_pod(NAMESPACE).items]
        return "shoal-orphan" not in names

    wait_for(gone, 30, "the orphan deleted")


def restart_agent(shoal: KubeShoal, frozen: psutil.Process) -> None:
    """kill -9 the (frozen) Kubernetes agent and start it again as it was started."""
    argv, cwd = frozen.cmdline(), frozen.cwd()
    frozen.kill()  # a stopped process still dies of SIGKILL
    frozen.wait(10)
    with open(shoal.home / "agent.log", "ab") as out:
        agent = subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    run_file = shoal.home / "run.json"
    info = json.loads(run_file.read_text())
    info["agent_pid"] = agent.pid  # `shoal down` (the fixture's end) stops this one
    run_file.write_text(json.dumps(info))


def test_a_node_removed_with_its_pods_while_the_agent_was_away_loses_its_tasks(
    shoal: KubeShoal,
) -> None:
    """The agent frozen, a task's Pod force-deleted and its Node removed (as pod GC does when a
    Node goes), then the agent killed and started again: the new one never sees that Pod end.
    Its first report names every Pod that runs and every Node: the server declares the task
    lost, the node NOT_READY and then forgotten, and runs the task again on another node (not
    RUNNING for good on a node that is gone)."""
    job_id = shoal.client.submit(many("gone-node", 1, retries=1))[0]["id"]
    shoal.wait_running(job_id)
    (task,) = shoal.client.job(job_id)["tasks"]
    (pod,) = shoal.pods_of(job_id)
    agent = psutil.Process(json.loads((shoal.home / "run.json").read_text())["agent_pid"])
    agent.send_signal(signal.SIGSTOP)
    try:
        shoal.core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        shoal.core.delete_node(task["node"])
    finally:
        restart_agent(shoal, agent)

    def elsewhere() -> dict[str, object] | None:
        job = shoal.client.job(job_id)
        tasks = job["tasks"]
        moved = job["attempt"] >= 2 and tasks[0]["state"] == "RUNNING"
        return job if moved and tasks[0]["node"] != task["node"] else None

    try:
        wait_for(elsewhere, 60, "the task lost and running again on another node")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {shoal.client.job(job_id)}") from None
    # the Node is gone and nothing of shoal's runs there: forgotten, with an event saying why
    assert all(n["name"] != task["node"] for n in shoal.client.nodes())
    assert "forgotten" in shoal.client.node_events(task["node"])[-1]["message"]
    shoal.client.stop(job_id)
    shoal.wait_job(job_id, ("STOPPED",), timeout=60)
