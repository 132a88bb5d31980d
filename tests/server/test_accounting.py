"""Accounting: the per-job numbers (pure) and ``/api/v1/usage`` (who sees what, bad windows)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from shoal.server.services.accounting import TaskRun, account, fold_attempt
from shoal.spec.units import parse_duration
from tests.server.test_admin_edits import api, bearer, home, make_user  # noqa: F401
from tests.server.test_api import JOB


def test_account_sums_gpu_time_cpu_and_peak_memory() -> None:
    tasks = [
        TaskRun(2, 100.0, 160.0, {"cpuSeconds": 30.0, "maxRssMiB": 100.0}),
        TaskRun(1, 110.0, 130.0, {"cpuSeconds": 5.5, "maxRssMiB": 300.0}),
        TaskRun(1, None, None, {}),  # never started: no time, no GPU-hours
    ]
    used = account(tasks, job_end=170.0, now=1000.0)
    assert used.elapsedS == 60.0
    assert used.gpuHours == pytest.approx((2 * 60 + 1 * 20) / 3600, abs=1e-6)
    assert used.cpuSeconds == 35.5 and used.peakMemoryMiB == 300.0


def test_a_running_task_counts_until_now_and_an_unended_one_until_the_job_ended() -> None:
    running = account([TaskRun(1, 100.0, None, {})], job_end=None, now=130.0)
    assert running.elapsedS == 30.0 and running.gpuHours == pytest.approx(30 / 3600, abs=1e-6)
    lost = account([TaskRun(1, 100.0, None, {})], job_end=110.0, now=500.0)
    assert lost.elapsedS == 10.0
    assert account([], None, 5.0).model_dump() == {
        "elapsedS": 0.0,
        "gpuHours": 0.0,
        "cpuSeconds": 0.0,
        "peakMemoryMiB": 0.0,
    }


def test_the_earlier_attempts_of_a_task_retried_in_place_count_too() -> None:
    # attempt 1: 100..110 s, 4 s CPU, 200 MiB; attempt 2: 115..135 s, 6 s CPU, 50 MiB
    earlier = fold_attempt({}, 100.0, 110.0, {"cpuSeconds": 4.0, "maxRssMiB": 200.0})
    assert earlier["attempts"] == 1 and earlier["runSeconds"] == 10.0
    used = account(
        [TaskRun(2, 115.0, 135.0, {"cpuSeconds": 6.0, "maxRssMiB": 50.0}, earlier)],
        job_end=135.0,
        now=500.0,
    )
    assert used.elapsedS == 35.0  # from the first attempt's start
    assert used.gpuHours == pytest.approx(2 * (10 + 20) / 3600, abs=1e-6)
    assert used.cpuSeconds == 10.0 and used.peakMemoryMiB == 200.0
    # waiting to run again: the earlier attempts alone
    between = account([TaskRun(2, None, None, {}, earlier)], job_end=None, now=112.0)
    assert between.elapsedS == 10.0 and between.cpuSeconds == 4.0
    twice = fold_attempt(earlier, 115.0, 135.0, {"cpuSeconds": 6.0})
    assert (twice["attempts"], twice["runSeconds"], twice["cpuSeconds"]) == (2, 30.0, 10.0)
    assert (twice["firstStartedAt"], twice["lastFinishedAt"]) == (100.0, 135.0)


@pytest.mark.parametrize(("text", "seconds"), [("30d", 2592000), ("12h", 43200), ("10m", 600)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds and parse_duration(str(seconds)) == seconds


def test_a_bad_duration_names_itself_and_the_forms() -> None:
    with pytest.raises(ValueError, match=r"--since '3 weeks' is not a duration: write"):
        parse_duration("3 weeks", "--since")


def test_usage_by_user_and_vc_and_who_sees_what(api: TestClient) -> None:  # noqa: F811
    token = make_user(api, "dana")
    for who, name in ((None, "mine"), (token, "hers")):
        headers = bearer(token) if who else {}
        spec = {"spec": JOB.format(name=name, gpu=1)}
        assert api.post("/api/v1/jobs", json=spec, headers=headers).status_code == 201
    listed = api.get("/api/v1/jobs").json()
    assert all(
        set(j["accounting"]) == {"elapsedS", "gpuHours", "cpuSeconds", "peakMemoryMiB"}
        for j in listed
    )
    everyone = api.get("/api/v1/usage", params={"by": "user", "since": "30d"}).json()
    assert everyone["scope"] == "everyone" and everyone["sinceS"] == 30 * 86400
    assert sorted(r["key"] for r in everyone["rows"]) == ["admin", "dana"]
    own = api.get("/api/v1/usage", params={"by": "vc"}, headers=bearer(token)).json()
    assert own["scope"] == "own" and own["rows"][0]["key"] == "default"
    assert own["rows"][0]["jobs"] == 1  # dana's job only
    bad = api.get("/api/v1/usage", params={"since": "soon"})
    assert bad.status_code == 400 and "since 'soon' is not a duration" in bad.json()["message"]
    assert api.get("/api/v1/usage", params={"by": "node"}).status_code == 422
