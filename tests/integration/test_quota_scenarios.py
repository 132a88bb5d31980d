"""The two scenarios of the OpenPAI virtual-cluster article, with real processes: borrowing idle
capacity, and getting it back by preemption (SIGTERM, grace, SIGKILL; the victim requeues)."""

from __future__ import annotations

import time

from tests.integration.conftest import LocalCluster
from tests.integration.test_local_mode import native

ONE_GPU = "w:\n  resources: {{gpu: {gpu}}}\n  command: sleep {seconds}; echo done\n"


def vc(cluster: LocalCluster, name: str, gpu: int) -> None:
    settings = {"guarantee_gpu": gpu, "members": []}
    cluster.client.save_vc(name, settings, create=True)


def running(cluster: LocalCluster, job_id: str) -> bool:
    job = cluster.client.job(job_id)
    return job["state"] == "RUNNING" and all(t["state"] == "RUNNING" for t in job["tasks"])


def test_a_team_borrows_the_idle_half_and_gives_it_back(cluster: LocalCluster) -> None:
    vc(cluster, "team-a", 2)  # 2 nodes x 2 GPUs: each team is guaranteed half
    vc(cluster, "team-b", 2)
    a_jobs = [
        cluster.submit(native(f"a{i}", ONE_GPU.format(gpu=1, seconds=6)), virtual_cluster="team-a")
        for i in range(4)
    ]
    cluster.wait_for(lambda: all(running(cluster, j) for j in a_jobs), timeout_s=30)
    submitted = time.time()
    b_job = cluster.submit(native("b0", ONE_GPU.format(gpu=2, seconds=1)), virtual_cluster="team-b")
    b_done = cluster.wait(b_job, timeout_s=60)
    assert b_done["state"] == "SUCCEEDED"
    timeline = sorted(
        (e["at"] - submitted, j, e["kind"], e["message"])
        for j in [*a_jobs, b_job]
        for e in cluster.client.events(j)
    )
    assert b_done["launchedAt"] - submitted < 2.0 + 4.0, "\n".join(
        f"{t:7.3f} job {j} {k}: {m}" for t, j, k, m in timeline
    )  # the grace period plus a margin
    preempted = [j for j in a_jobs if "preempted" in [e["kind"] for e in cluster.client.events(j)]]
    assert len(preempted) == 1 or len(preempted) == 2
    for job_id in preempted:
        events = cluster.client.events(job_id)
        message = next(e["message"] for e in events if e["kind"] == "preempted")
        assert f"preempted for job {b_job}" in message
        assert "requeued" in [e["kind"] for e in events]
    for job_id in a_jobs:  # every A job finishes in the end, the preempted ones after requeueing
        finished = cluster.wait(job_id, timeout_s=90)
        assert finished["state"] == "SUCCEEDED", finished
    victim = cluster.client.job(preempted[0])
    assert victim["attempt"] == 2  # it ran again from the queue
    kept = [j for j in a_jobs if j not in preempted]
    for job_id in kept:  # inside the guarantee: never preempted
        events = cluster.client.events(job_id)
        assert "preempted" not in [e["kind"] for e in events], events
        assert cluster.client.job(job_id)["retries"]["resource"] == sum(
            e["kind"] == "port-clash" for e in events
        ), events  # a port taken on the host may requeue it; a preemption may not


def test_experiments_run_only_while_production_is_idle(cluster: LocalCluster) -> None:
    vc(cluster, "prod", 4)  # all 4 GPUs guaranteed to prod; exp has none and only borrows
    vc(cluster, "exp", 0)
    exp_jobs = [
        cluster.submit(native(f"e{i}", ONE_GPU.format(gpu=2, seconds=30)), virtual_cluster="exp")
        for i in range(2)
    ]
    cluster.wait_for(lambda: all(running(cluster, j) for j in exp_jobs), timeout_s=30)
    prod = cluster.submit(native("p0", ONE_GPU.format(gpu=2, seconds=1)), virtual_cluster="prod")
    assert cluster.wait(prod, timeout_s=60)["state"] == "SUCCEEDED"
    victims = [j for j in exp_jobs if "preempted" in [e["kind"] for e in cluster.client.events(j)]]
    assert len(victims) == 1  # the fewest victims that make room
    (victim,) = victims
    detail = cluster.client.job(victim)
    # back in the queue, or already running again after prod finished
    assert detail["state"] in ("WAITING", "RUNNING")
    tasks_exit = [e["message"] for e in cluster.client.events(victim) if e["kind"] == "exited"]
    assert any("PREEMPTED" in m for m in tasks_exit)
    for job_id in exp_jobs:
        cluster.client.stop(job_id)
