"""The idle timeout's decision (services/idle_jobs.py, docs/notebooks.md): stop at the timeout,
warn once within its lead before, and not before."""

from __future__ import annotations

from shoal.server.services.idle_jobs import STOP, WARN, IdleJob, decide, warn_lead


def test_a_job_is_warned_once_then_stopped_at_its_timeout() -> None:
    job = IdleJob("7", "lab", since=1000.0, timeout_s=3600.0)
    assert warn_lead(3600.0) == 600.0 and warn_lead(40.0) == 10.0
    assert decide([job], set(), now=1000.0 + 2999) == []
    (warned,) = decide([job], set(), now=1000.0 + 3000)
    assert warned.action == WARN and warned.idle_s == 3000
    assert decide([job], {"7"}, now=1000.0 + 3500) == []  # warned already
    (stopped,) = decide([job], {"7"}, now=1000.0 + 3600)
    assert stopped.action == STOP


def test_jobs_are_judged_each_by_its_own_timeout() -> None:
    short = IdleJob("1", "a", since=0.0, timeout_s=60.0)
    long = IdleJob("2", "b", since=0.0, timeout_s=7200.0)
    verdicts = decide([short, long], set(), now=100.0)
    assert [(v.job.job_id, v.action) for v in verdicts] == [("1", STOP)]
