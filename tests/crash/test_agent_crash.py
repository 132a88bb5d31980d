"""Agent ``kill -9`` rounds under load (issue #15, item 3): while 20 clients submit, list, read
logs and stop jobs and the agent launches and reaps tasks all the time, the agent is killed (its
process group in even rounds, its pid alone in odd ones: launches and exits under way), left dead
for a random while (its tasks run on, some end) and started again as ``shoal up`` runs it. After
each round: every acknowledged submission is stored exactly once, no job is half-written, and the
clients saw no error at all (the server never went away). At the end, every job final: no task
attempt ran twice, every task's state is what its process did (an attempt the agent was starting
when it died either ran and was adopted, or never ran and failed with the platform's reason),
and no process of any task is left."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from shoal.local.supervisor import UpOptions, stop_local
from tests.crash.campaign import run_rounds
from tests.crash.cluster import kill_agent, loadavg, start_agent
from tests.crash.loadgen import Ack, Load, LoadConfig, median
from tests.crash.marked import marked_jobs, read_marks
from tests.crash.rounds import (
    AGENT_SUBMISSIONS,
    CLIENTS,
    ROUNDS,
    unexpected,
    wait_for_progress,
)
from tests.crash.store import (
    Snapshot,
    acknowledged_problems,
    coherence_problems,
    snapshot,
)
from tests.integration.conftest import LocalCluster, port_base, start_cluster

PREFIX = "agt"
DOWN_S = (0.0, 2.5)  # how long the agent stays dead (well within its lease)


def options(home: Path) -> UpOptions:
    base = UpOptions(home=home, port=0, nodes=2, cpus=4.0, memory_mib=8192, gpus=2)
    return replace(base, kill_grace_s=2.0, port_base=port_base())


def starts(marker: Path) -> int:
    return marker.read_text().count("start ") if marker.exists() else 0


def in_flight(snap: Snapshot, ended: set[tuple[str, str, int, int, int]]) -> dict[str, int]:
    """At the kill: launches ordered and not yet confirmed, tasks running, exits not reported."""
    live = [t for t in snap.tasks if t.state in ("WAITING", "RUNNING")]
    return {
        "launching": sum(1 for t in live if not t.launch_acked),
        "running": sum(1 for t in live if t.launch_acked and t.key not in ended),
        "exiting": sum(1 for t in live if t.launch_acked and t.key in ended),
    }


def one_round(
    cluster: LocalCluster, token: str, marker: Path, number: int, rng: random.Random
) -> tuple[dict[str, Any], list[Ack], set[str], list[str]]:
    prefix = f"{PREFIX}{number}-"
    config = LoadConfig(
        cluster.info.url,
        token,
        marked_jobs(marker, long_s=(1.0, 4.0)),
        AGENT_SUBMISSIONS,
        CLIENTS,
        seconds=600,
        prefix=prefix.rstrip("-"),
        seed=100 + number,
    )
    started = starts(marker)
    load = Load(config).start()
    wait_for_progress(load, int(rng.uniform(0.2, 0.7) * AGENT_SUBMISSIONS))
    wanted = started + rng.randint(2, 20)  # tasks of this round have started: some end, too
    deadline = time.monotonic() + 60
    while starts(marker) < wanted and time.monotonic() < deadline:
        time.sleep(0.01)
    before = snapshot(cluster.home, PREFIX)
    ended = {key for key, mark in read_marks(marker).items() if mark.ends or mark.terms}
    whole_group = number % 2 == 0
    kill_agent(cluster, whole_group)
    down = rng.uniform(*DOWN_S)
    time.sleep(down)
    start_agent(cluster, options(cluster.home))
    result = load.join()
    after = snapshot(cluster.home, prefix)
    unanswered = set(result.unanswered)
    problems = acknowledged_problems(after, result.acks, unanswered)
    problems += coherence_problems(after)
    problems += [f"unexpected error {f}" for f in unexpected(result.failures, [])]
    figures = {
        "round": number,
        "kill": "process group" if whole_group else "agent pid",
        "down_s": round(down, 2),
        **{f"at_kill_{k}": v for k, v in in_flight(before, ended).items()},
        **result.summary(),
        "loadavg": loadavg(),
    }
    return figures, result.acks, unanswered, problems


def test_kill_9_agent_rounds_under_load(tmp_path: Path) -> None:
    home, marker = tmp_path / "home", tmp_path / "marks"
    cluster = start_cluster(home)
    try:
        campaign, final = run_rounds(cluster, marker, PREFIX, one_round, 16, "agent_kill_9")
        states: dict[str, int] = {}
        for task in final.tasks:
            code = "" if task.state == "SUCCEEDED" else f" exit {task.exit_code}"
            states[task.state + code] = states.get(task.state + code, 0) + 1
    finally:
        cluster.client.close()
        stop_local(home, grace_s=10)
    campaign.figures.overall = {
        "rounds": ROUNDS,
        "acknowledged": len(campaign.acks),
        "tasks_by_state": states,
        "launches_in_flight_at_kills": sum(r["at_kill_launching"] for r in campaign.figures.rounds),
        "exits_in_flight_at_kills": sum(r["at_kill_exiting"] for r in campaign.figures.rounds),
        "running_at_kills": sum(r["at_kill_running"] for r in campaign.figures.rounds),
        "per_second_median": median([r["per_second"] for r in campaign.figures.rounds]),
        "problems": len(campaign.problems),
    }
    campaign.figures.save()
    assert not campaign.problems, "\n".join(campaign.problems[:40])
