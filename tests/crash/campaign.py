"""The loop both crash tests run: rounds under load, then the checks on the whole run once every
job is final (acknowledged jobs stored once, coherent rows, no attempt run twice, no task process
left)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.crash.cluster import describe, task_processes
from tests.crash.loadgen import Ack
from tests.crash.marked import read_marks
from tests.crash.rounds import ROUNDS, SETTLE_S, Figures
from tests.crash.store import (
    Snapshot,
    acknowledged_problems,
    attempt_problems,
    coherence_problems,
    snapshot,
    unfinished,
)
from tests.integration.conftest import LocalCluster

RoundOutcome = tuple[dict[str, Any], list[Ack], set[str], list[str]]
OneRound = Callable[[LocalCluster, str, Path, int, random.Random], RoundOutcome]


@dataclass
class Campaign:
    """What the rounds of one test gathered."""

    figures: Figures
    acks: list[Ack] = field(default_factory=list)
    unanswered: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def settle(cluster: LocalCluster, prefix: str, timeout_s: float) -> Snapshot:
    """The store once every job of ours is final (an assertion after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        snap = snapshot(cluster.home, prefix)
        left = unfinished(snap)
        if not left:
            return snap
        assert time.monotonic() < deadline, f"{len(left)} jobs not final: {left[:10]}"
        time.sleep(0.5)


def run_rounds(
    cluster: LocalCluster, marker: Path, prefix: str, one_round: OneRound, seed: int, name: str
) -> tuple[Campaign, Snapshot]:
    """``ROUNDS`` rounds, then the whole run's checks; the campaign's problems say what failed."""
    token = (cluster.home / "admin.token").read_text().strip()
    rng = random.Random(seed)
    campaign = Campaign(Figures(name))
    for number in range(ROUNDS):
        figures, acks, unanswered, problems = one_round(cluster, token, marker, number, rng)
        campaign.figures.rounds.append({**figures, "problems": problems[:20]})
        campaign.acks += acks
        campaign.unanswered |= unanswered
        campaign.problems += [f"round {number}: {p}" for p in problems]
    final = settle(cluster, prefix, SETTLE_S)
    campaign.problems += acknowledged_problems(final, campaign.acks, campaign.unanswered)
    campaign.problems += coherence_problems(final)
    campaign.problems += attempt_problems(final, read_marks(marker))
    time.sleep(1.0)
    left = describe(task_processes(cluster.home))
    campaign.problems += [f"task process left: {p}" for p in left]
    return campaign, final
