"""Jobs whose tasks leave marks: each task attempt appends ``start``, then ``end CODE`` (or ``term``
on SIGTERM) with its job id, role, index and attempt numbers to one file opened with O_APPEND
(the shell's ``>>``), so the tests can count how often each attempt ran."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.crash.loadgen import JobMaker

# (job id, role, index, job attempt, task attempt)
AttemptKey = tuple[str, str, int, int, int]

ME = "$SHOAL_JOB_ID $SHOAL_TASK_ROLE $SHOAL_TASK_INDEX $SHOAL_JOB_ATTEMPT $SHOAL_TASK_ATTEMPT"


def marking(marker: Path, seconds: float, code: int) -> str:
    """The command of a task that marks its start and its end (or its SIGTERM)."""
    wait = f"sleep {seconds:.2f} & wait; " if seconds > 0 else ""
    return (
        f'm={marker}; me="{ME}"; echo "start $me" >> $m; '
        f"trap 'echo \"term $me\" >> $m; exit 143' TERM; "
        f'{wait}echo "end $me {code}" >> $m; exit {code}'
    )


def job_text(marker: Path, seconds: float, code: int, instances: int = 1) -> str:
    command = json.dumps(marking(marker, seconds, code))
    return (
        "version: 1\nname: marked\nroles:\n  w:\n"
        f"    instances: {instances}\n    resources: {{cpu: 0.25, memory: 32}}\n"
        f"    command: {command}\n"
    )


def marked_jobs(marker: Path, long_s: tuple[float, float] = (3.0, 6.0)) -> JobMaker:
    """Mostly quick jobs (launches and exits all the time), some long ones (running through a
    crash, to be adopted), some failing (exit 3), some of two instances."""

    def make(_client: int, _n: int, rng: random.Random) -> tuple[str, str]:
        draw = rng.random()
        if draw < 0.12:
            return "long", job_text(marker, rng.uniform(*long_s), 0)
        if draw < 0.17:
            return "fail", job_text(marker, 0, 3)
        if draw < 0.24:
            return "pair", job_text(marker, rng.uniform(0, 0.5), 0, instances=2)
        return "quick", job_text(marker, 0, 0)

    return make


@dataclass
class Marks:
    starts: int = 0
    ends: list[int] = field(default_factory=list)
    terms: int = 0


def read_marks(marker: Path) -> dict[AttemptKey, Marks]:
    found: dict[AttemptKey, Marks] = defaultdict(Marks)
    if not marker.exists():
        return found
    for line in marker.read_text().splitlines():
        parts = line.split()
        if len(parts) < 6:
            raise AssertionError(f"a torn line in {marker}: {line!r}")
        what, job, role, index, job_attempt, attempt = parts[:6]
        key = (job, role, int(index), int(job_attempt), int(attempt))
        if what == "start":
            found[key].starts += 1
        elif what == "end":
            found[key].ends.append(int(parts[6]))
        elif what == "term":
            found[key].terms += 1
    return found
