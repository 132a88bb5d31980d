"""The crash rounds' checks find what they look for (without a cluster): a lost or duplicated
submission, a half-written job, an attempt that ran twice, a state its process did not earn."""

from __future__ import annotations

from pathlib import Path

from tests.crash.loadgen import TRANSPORT_KINDS, Ack, Failure
from tests.crash.marked import read_marks
from tests.crash.rounds import Window, unexpected
from tests.crash.store import (
    JobRow,
    Snapshot,
    TaskRow,
    acknowledged_problems,
    attempt_problems,
    coherence_problems,
)


def task(job: str, state: str, code: int | None = None, attempt: int = 1) -> TaskRow:
    return TaskRow(job, 1, "w", 0, attempt, state, code, True, 1.0, 2.0)


def snap(jobs: list[JobRow], tasks: list[TaskRow]) -> Snapshot:
    return Snapshot({j.id: j for j in jobs}, tasks, set())


def test_lost_duplicated_and_stray_submissions_are_found() -> None:
    acks = [Ack("1", "a", "quick", 0.1, 0.0), Ack("2", "b", "quick", 0.1, 0.0)]
    stored = snap([JobRow("1", "a", "WAITING", 0, 1), JobRow("3", "c", "WAITING", 0, 1)], [])
    assert acknowledged_problems(stored, acks, unanswered=set()) == [
        "acknowledged job 2 (b) is missing",
        "job c was stored but never submitted",
    ]
    assert acknowledged_problems(stored, acks[:1], unanswered={"c"}) == []  # at most once
    twice = snap([JobRow("1", "a", "WAITING", 0, 1), JobRow("4", "a", "WAITING", 0, 1)], [])
    assert "name a stored 2 times" in acknowledged_problems(twice, acks[:1], set())


def test_half_written_jobs_are_found() -> None:
    running = JobRow("1", "a", "RUNNING", 1, 2)
    assert coherence_problems(snap([running], [task("1", "RUNNING")])) == [
        "job 1 is RUNNING with 1 of 2 tasks"
    ]
    done = JobRow("2", "b", "SUCCEEDED", 1, 1)
    assert coherence_problems(snap([done], [task("2", "RUNNING")]))
    assert coherence_problems(snap([done], [task("2", "SUCCEEDED", 0)])) == []


def test_twice_run_and_untruthful_attempts_are_found(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.write_text("start 1 w 0 1 1\nstart 1 w 0 1 1\nend 1 w 0 1 1 0\nstart 2 w 0 1 1\n")
    jobs = [JobRow("1", "a", "SUCCEEDED", 1, 1), JobRow("2", "b", "SUCCEEDED", 1, 1)]
    found = attempt_problems(
        snap(jobs, [task("1", "SUCCEEDED", 0), task("2", "SUCCEEDED", 0)]), read_marks(marks)
    )
    assert len(found) == 2
    assert "ran 2 times" in found[0] and "did not run to its end" in found[1]
    marks.write_text("start 1 w 0 1 1\nend 1 w 0 1 1 3\n")
    lied = attempt_problems(snap(jobs[:1], [task("1", "SUCCEEDED", 0)]), read_marks(marks))
    assert "exited 3 but is recorded SUCCEEDED with exit code 0" in lied[0]
    assert "did not run to its end" in lied[1]


def test_only_a_dead_servers_errors_are_expected() -> None:
    (transport,) = sorted(TRANSPORT_KINDS)[:1]
    window = [Window(10.0, 12.0)]
    during = Failure("submit", transport, "", 11.0)
    later = Failure("submit", transport, "", 20.0)
    server_error = Failure("submit", "http 500 Internal", "", 11.0)
    assert unexpected([during, later, server_error], window) == [later, server_error]
