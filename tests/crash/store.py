"""The crash rounds' checks on what the server stored, read straight from its SQLite file,
read-only, in one transaction (a consistent snapshot while the server writes), and what the
task marks say ran."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tests.crash.loadgen import Ack
from tests.crash.marked import AttemptKey, Marks

LIVE = ("WAITING", "RUNNING", "STOPPING")
FINAL = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass(frozen=True)
class TaskRow:
    job_id: str
    job_attempt: int
    role: str
    index: int
    attempt: int
    state: str
    exit_code: int | None
    launch_acked: bool
    started_at: float | None
    finished_at: float | None

    @property
    def key(self) -> AttemptKey:
        return (self.job_id, self.role, self.index, self.job_attempt, self.attempt)


@dataclass(frozen=True)
class JobRow:
    id: str
    name: str
    state: str
    attempt: int
    instances: int


@dataclass
class Snapshot:
    jobs: dict[str, JobRow]
    tasks: list[TaskRow]
    adopted: set[tuple[str, str, int]]  # (job id, role, index) with an "adopted" event


def snapshot(home: Path, prefix: str) -> Snapshot:
    """Every job named PREFIX..., its tasks and adoption events, as one read transaction."""
    url = f"file:{home / 'shoal.db'}?mode=ro"
    with sqlite3.connect(url, uri=True, timeout=30) as db:
        db.execute("BEGIN")  # one snapshot for the three reads
        like = (f"{prefix}%",)
        jobs = {
            row[0]: JobRow(row[0], row[1], row[2], row[3], _instances(row[4]))
            for row in db.execute(
                "SELECT id, name, state, attempt, spec FROM jobs WHERE name LIKE ?", like
            )
        }
        tasks = [
            TaskRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), r[8], r[9])
            for r in db.execute(
                'SELECT t.job_id, t.job_attempt, t.role, t."index", t.attempt, t.state, '
                "t.exit_code, t.launch_acked, t.started_at, t.finished_at FROM tasks t "
                "JOIN jobs j ON j.id = t.job_id WHERE j.name LIKE ?",
                like,
            )
        ]
        adopted = {
            (r[0], r[1], r[2])
            for r in db.execute(
                'SELECT e.job_id, e.role, e."index" FROM events e JOIN jobs j ON '
                "j.id = e.job_id WHERE e.kind = 'adopted' AND j.name LIKE ?",
                like,
            )
        }
        db.rollback()
    return Snapshot(jobs, tasks, adopted)


def _instances(spec: str) -> int:
    return sum(int(role.get("instances", 1)) for role in json.loads(spec)["roles"])


def acknowledged_problems(snap: Snapshot, acks: Iterable[Ack], unanswered: set[str]) -> list[str]:
    """Every acknowledged submission is stored exactly once, under its name; a submission that
    got no answer is stored at most once; no name is stored twice."""
    problems = []
    for ack in acks:
        row = snap.jobs.get(ack.id)
        if row is None:
            problems.append(f"acknowledged job {ack.id} ({ack.name}) is missing")
        elif row.name != ack.name:
            problems.append(f"job {ack.id} is named {row.name!r}, acknowledged as {ack.name!r}")
    names = Counter(row.name for row in snap.jobs.values())
    problems += [f"name {n} stored {c} times" for n, c in names.items() if c > 1]
    acked_names = {a.name for a in acks}
    strays = [n for n in names if n not in acked_names and n not in unanswered]
    problems += [f"job {n} was stored but never submitted" for n in strays]
    return problems


def coherence_problems(snap: Snapshot) -> list[str]:
    """No half-written job: a running job has all its tasks, a final job none still live, a task
    belongs to its job's attempts."""
    by_job: dict[str, list[TaskRow]] = {}
    for task in snap.tasks:
        by_job.setdefault(task.job_id, []).append(task)
    problems = []
    for job in snap.jobs.values():
        tasks = by_job.get(job.id, [])
        current = _latest(t for t in tasks if t.job_attempt == job.attempt)
        if any(t.job_attempt > job.attempt for t in tasks):
            problems.append(f"job {job.id} ({job.state}) has tasks of a later attempt")
        if job.state in ("RUNNING", "STOPPING", "SUCCEEDED") and len(current) != job.instances:
            problems.append(
                f"job {job.id} is {job.state} with {len(current)} of {job.instances} tasks"
            )
        if job.state == "SUCCEEDED" and any(t.state != "SUCCEEDED" for t in current.values()):
            problems.append(f"job {job.id} SUCCEEDED but its tasks are {_states(current)}")
        if job.state in FINAL and any(t.state in LIVE for t in tasks):
            problems.append(f"job {job.id} is {job.state} with live tasks {_states(current)}")
        if job.state == "WAITING" and any(t.state in ("RUNNING", "STOPPING") for t in tasks):
            problems.append(f"job {job.id} is WAITING with running tasks")
        if job.state not in LIVE + FINAL:
            problems.append(f"job {job.id} is in an unknown state {job.state}")
    return problems


def _latest(tasks: Iterable[TaskRow]) -> dict[tuple[str, int], TaskRow]:
    """The last attempt of each task (role, index)."""
    latest: dict[tuple[str, int], TaskRow] = {}
    for task in tasks:
        known = latest.get((task.role, task.index))
        if known is None or task.attempt > known.attempt:
            latest[(task.role, task.index)] = task
    return latest


def _states(tasks: dict[tuple[str, int], TaskRow]) -> str:
    return ", ".join(f"{r}/{i}={t.state}" for (r, i), t in sorted(tasks.items()))


def attempt_problems(snap: Snapshot, marks: dict[AttemptKey, Marks]) -> list[str]:
    """No attempt ran twice; every attempt that ran is a task row; every final task's state is
    what its process did (an exit code it wrote is the one recorded; SUCCEEDED only if it ran to
    its end with 0, exactly once)."""
    rows = {t.key: t for t in snap.tasks}
    problems = []
    for key, mark in marks.items():
        if key[0] not in snap.jobs:
            continue  # another test's job
        if mark.starts > 1 or len(mark.ends) > 1:
            problems.append(f"attempt {key} ran {mark.starts} times ({mark.ends} ends)")
        row = rows.get(key)
        if row is None:
            problems.append(f"attempt {key} ran but the server has no such task attempt")
        elif mark.ends and row.state in FINAL and row.exit_code != mark.ends[0]:
            problems.append(
                f"attempt {key} exited {mark.ends[0]} but is recorded {row.state} "
                f"with exit code {row.exit_code}"
            )
    for key, row in rows.items():
        ran = marks.get(key)
        if row.state == "SUCCEEDED" and (ran is None or ran.ends != [0]):
            problems.append(f"task {key} is SUCCEEDED but did not run to its end ({ran})")
    return problems


def unfinished(snap: Snapshot) -> list[str]:
    return [j.id for j in snap.jobs.values() if j.state not in FINAL]
