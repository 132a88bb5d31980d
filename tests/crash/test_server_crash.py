"""Server ``kill -9`` rounds under load (issue #15, item 3): while 20 clients submit, list, read
logs and stop jobs, the server is killed at a random point (its pid alone in even rounds, its
whole process group with the scheduler process in odd ones) and started again at once. After
each round: every acknowledged submission is stored exactly once under its name, no job is
half-written (checked in SQLite, read-only, and through the API), every task that ran on through
the crash was adopted, the old scheduler process is gone, and the API answered again (the time
is a figure). At the end: every job final, no task attempt ran twice (the tasks' marks), every
task's state is what its process did, no task process left."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from shoal.local.supervisor import stop_local
from tests.crash.campaign import run_rounds
from tests.crash.cluster import crash_and_restart, loadavg
from tests.crash.loadgen import Ack, Load, LoadConfig, median
from tests.crash.marked import marked_jobs
from tests.crash.rounds import (
    CLIENTS,
    ROUNDS,
    SERVER_SUBMISSIONS,
    Window,
    unexpected,
    wait_for_progress,
)
from tests.crash.store import (
    Snapshot,
    acknowledged_problems,
    coherence_problems,
    snapshot,
)
from tests.integration.conftest import LocalCluster, start_cluster

PREFIX = "srv"
ADOPTION_MARGIN_S = 2.0  # a task still running this long after the API was back was reported


def running_at(snap: Snapshot) -> set[tuple[str, str, int]]:
    running = [t for t in snap.tasks if t.state == "RUNNING" and t.launch_acked]
    return {(t.job_id, t.role, t.index) for t in running}


def not_adopted(before: set[tuple[str, str, int]], after: Snapshot, back_wall: float) -> list[str]:
    """Tasks running at the kill and still running well after the API was back, with no
    ``adopted`` event."""
    latest = {(t.job_id, t.role, t.index): t for t in after.tasks}
    missing = []
    for key in before:
        task = latest.get(key)
        if task is None:
            continue
        ran_on = task.finished_at is None or task.finished_at > back_wall + ADOPTION_MARGIN_S
        if ran_on and task.state != "WAITING" and key not in after.adopted:
            missing.append(f"{key} ({task.state}, finished {task.finished_at})")
    return missing


def one_round(
    cluster: LocalCluster, token: str, marker: Path, number: int, rng: random.Random
) -> tuple[dict[str, Any], list[Ack], set[str], list[str]]:
    prefix = f"{PREFIX}{number}-"
    config = LoadConfig(
        cluster.info.url,
        token,
        marked_jobs(marker, long_s=(5.0, 10.0)),
        SERVER_SUBMISSIONS,
        CLIENTS,
        seconds=600,
        prefix=prefix.rstrip("-"),
        seed=number,
    )
    started_wall = time.time()
    load = Load(config).start()
    wait_for_progress(load, int(rng.uniform(0.1, 0.7) * SERVER_SUBMISSIONS))  # a random point
    before = running_at(snapshot(cluster.home, PREFIX))  # of this round and earlier ones
    whole_group = number % 2 == 1
    recovery, scheduler = crash_and_restart(cluster, token, whole_group)
    result = load.join()
    time.sleep(ADOPTION_MARGIN_S + 1)  # the adopted tasks' reports are in
    after = snapshot(cluster.home, prefix)
    unanswered = set(result.unanswered)
    problems = acknowledged_problems(after, result.acks, unanswered)
    problems += [f"scheduler process {p} outlived its server" for p in scheduler.left]
    problems += coherence_problems(after)
    listed = {j["id"] for j in cluster.client.jobs(limit=10000, since=started_wall - 1)}
    problems += [f"job {a.id} is not listed by the API" for a in result.acks if a.id not in listed]
    everyone = snapshot(cluster.home, PREFIX)
    problems += [f"not adopted: {t}" for t in not_adopted(before, everyone, recovery.back_wall)]
    window = Window(recovery.killed_at, recovery.killed_at + recovery.list_s)
    problems += [f"unexpected error {f}" for f in unexpected(result.failures, [window])]
    stored_unanswered = sum(1 for j in after.jobs.values() if j.name in unanswered)
    figures = {
        "round": number,
        "kill": "process group" if whole_group else "server pid",
        **result.summary(),
        "recovery_health_s": round(recovery.health_s, 2),
        "recovery_list_s": round(recovery.list_s, 2),
        "old_scheduler_gone_s": scheduler.gone_s,
        "running_at_kill": len(before),
        "adopted": len(before & everyone.adopted),
        "unanswered_stored": stored_unanswered,
        "loadavg": loadavg(),
    }
    return figures, result.acks, unanswered, problems


def test_kill_9_server_rounds_under_load(tmp_path: Path) -> None:
    home, marker = tmp_path / "home", tmp_path / "marks"
    cluster = start_cluster(home)
    try:
        campaign, final = run_rounds(cluster, marker, PREFIX, one_round, 15, "server_kill_9")
    finally:
        cluster.client.close()
        stop_local(home, grace_s=10)
    recoveries = [r["recovery_list_s"] for r in campaign.figures.rounds]
    campaign.figures.overall = {
        "rounds": ROUNDS,
        "acknowledged": len(campaign.acks),
        "jobs_stored": len(final.jobs),
        "recovery_list_max_s": max(recoveries),
        "recovery_list_median_s": round(median(recoveries), 2),
        "per_second_median": median([r["per_second"] for r in campaign.figures.rounds]),
        "p99_ms_max": max((r["p99_ms"] or 0.0) for r in campaign.figures.rounds),
        "problems": len(campaign.problems),
    }
    campaign.figures.save()
    assert not campaign.problems, "\n".join(campaign.problems[:40])
