"""Per-user rate limits (docs/limits.md) through the real app: a user over the requests or the
submissions budget gets 429 with Retry-After and a message naming the limit; other users, the
admin and agents go on; callers without a valid credential are counted by address; buckets
refill; 0 turns a limit off. The defaults leave room for this suite's heavy users."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.cli.server_commands import _with_limits
from shoal.server import rate_limits
from shoal.server.app import create_app, prepare
from shoal.server.rate_limits import BucketSet, RateLimits
from shoal.server.settings import ServerSettings
from tests.server.test_api import agent_headers
from tests.server.test_security import bearer, make_user

JOB = "version: 1\nname: {name}\nroles:\n  w:\n    command: echo hi\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(rate_limits, "monotonic", fake)
    return fake


def serve(home: Path, **limits: Any) -> TestClient:
    ctx = prepare(ServerSettings(home=home, scheduler="thread", **limits))
    return TestClient(create_app(ctx, run_scheduler=False))


@pytest.fixture
def server(tmp_path: Path, clock: Clock) -> Iterator[tuple[TestClient, str]]:
    home = tmp_path / "home"
    limits = {"rate_limit_requests_per_min": 5, "rate_limit_anonymous_per_min": 0}
    with serve(home, **limits) as client:
        yield client, (home / "admin.token").read_text().strip()


def test_a_user_over_the_request_budget_gets_429_with_retry_after(
    server: tuple[TestClient, str], clock: Clock
) -> None:
    client, admin = server
    alice, bob = make_user(client, admin, "alice"), make_user(client, admin, "bob")
    answers = [client.get("/api/v1/jobs", headers=bearer(alice)) for _ in range(6)]
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    refused = answers[-1]
    assert refused.json()["code"] == "RateLimited"
    assert refused.headers["Retry-After"] == "12"  # 5 a minute: one more every 12 s
    message = refused.json()["message"]
    assert "user alice" in message and "5 requests per minute" in message
    assert "--rate-limit-requests" in message
    # others go on: another user, the admin (not limited) and the agent
    assert client.get("/api/v1/jobs", headers=bearer(bob)).status_code == 200
    for _ in range(20):
        assert client.get("/api/v1/jobs", headers=bearer(admin)).status_code == 200
    home_agent = agent_headers(Path(client.app.state.context.settings.home))  # type: ignore[attr-defined]
    for _ in range(20):
        report = client.post("/api/v1/agent/report", json={"agent_id": "a"}, headers=home_agent)
        assert report.status_code != 429, report.text
    # the bucket refills: after Retry-After, one more
    clock.now += 11.0
    assert client.get("/api/v1/jobs", headers=bearer(alice)).status_code == 429
    clock.now += 1.0
    again = client.get("/api/v1/jobs", headers=bearer(alice))
    assert again.status_code == 200, again.text
    assert client.get("/api/v1/jobs", headers=bearer(alice)).status_code == 429


def test_submissions_have_their_own_hourly_budget(tmp_path: Path, clock: Clock) -> None:
    home = tmp_path / "home"
    limits = {"rate_limit_submissions_per_hour": 3, "rate_limit_anonymous_per_min": 0}
    with serve(home, **limits) as client:
        admin = (home / "admin.token").read_text().strip()
        alice = make_user(client, admin, "alice")
        codes = [
            client.post(
                "/api/v1/jobs", json={"spec": JOB.format(name=f"j{i}")}, headers=bearer(alice)
            ).status_code
            for i in range(4)
        ]
        assert codes == [201, 201, 201, 429]
        refused = client.post(
            "/api/v2/jobs", content="x", headers={**bearer(alice), "Content-Type": "text/yaml"}
        )
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "1200"
        assert "3 submissions per hour" in refused.json()["message"]
        assert "--array" in refused.json()["message"]  # sweeps as one array
        # reads are not submissions; an array of 100 is one submission
        assert client.get("/api/v1/jobs", headers=bearer(alice)).status_code == 200
        clock.now += 1200
        array = client.post(
            "/api/v1/jobs",
            json={"spec": JOB.format(name="sweep"), "array": "0-99"},
            headers=bearer(alice),
        )
        assert array.status_code == 201, array.text
        for i in range(5):  # the admin is not limited
            job = {"spec": JOB.format(name=f"a{i}")}
            assert client.post("/api/v1/jobs", json=job, headers=bearer(admin)).status_code == 201


def test_callers_without_a_valid_credential_are_counted_by_address(
    tmp_path: Path, clock: Clock
) -> None:
    with serve(tmp_path / "home", rate_limit_anonymous_per_min=3) as client:
        wrong = bearer("shoal_not-a-token")
        codes = [client.get("/api/v1/jobs", headers=wrong).status_code for _ in range(3)]
        assert codes == [401] * 3
        refused = client.post("/api/v1/session", json={"user": "admin", "password": "guess"})
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "20"
        assert "client testclient (no valid credential)" in refused.json()["message"]
        assert "--rate-limit-anonymous" in refused.json()["message"]


def test_zero_turns_the_limits_off(tmp_path: Path) -> None:
    limits = {
        "rate_limit_requests_per_min": 0,
        "rate_limit_submissions_per_hour": 0,
        "rate_limit_anonymous_per_min": 0,
    }
    home = tmp_path / "home"
    with serve(home, **limits) as client:
        assert not RateLimits(client.app.state.context.settings).enabled  # type: ignore[attr-defined]
        admin = (home / "admin.token").read_text().strip()
        alice = make_user(client, admin, "alice")
        for i in range(30):
            job = {"spec": JOB.format(name=f"j{i}")}
            assert client.post("/api/v1/jobs", json=job, headers=bearer(alice)).status_code == 201
        assert all(client.get("/api/v1/jobs").status_code == 401 for _ in range(30))


def test_a_bucket_refills_continuously_and_holds_one_period_at_most() -> None:
    clock = Clock()
    buckets = BucketSet(capacity=60, period_s=60.0, clock=clock)
    assert all(buckets.take("u") == 0.0 for _ in range(60))
    assert buckets.take("u") == pytest.approx(1.0)
    clock.now += 0.5
    assert buckets.take("u") == pytest.approx(0.5)
    clock.now += 3600  # idle for an hour: full again, never more than 60
    assert all(buckets.take("u") == 0.0 for _ in range(60))
    assert buckets.take("u") > 0
    assert buckets.take("other") == 0.0


def test_idle_buckets_are_dropped_when_there_are_too_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rate_limits, "MAX_BUCKETS", 100)
    clock = Clock()
    buckets = BucketSet(capacity=10, period_s=60.0, clock=clock)
    for i in range(100):
        buckets.take(f"10.0.0.{i}")
    clock.now += 60  # all have refilled: idle
    buckets.take("busy")
    assert list(buckets.buckets) == ["busy"]


def test_the_defaults_are_documented_and_generous_enough_for_sweeps() -> None:
    settings = ServerSettings(home=Path("/nonexistent"))
    assert settings.rate_limit_requests_per_min == 3000
    assert settings.rate_limit_submissions_per_hour == 1000
    assert settings.rate_limit_anonymous_per_min == 600
    assert settings.max_body_bytes == 1 << 20
    docs = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    for figure in ("3,000", "1,000", "600", "1 MiB", "100 MiB"):
        assert figure in docs, figure


def test_the_admin_is_not_counted_even_while_the_token_cache_is_emptied(
    tmp_path: Path, clock: Clock
) -> None:
    """Every user or token change empties the server's token cache: the credential is looked
    up again, never mistaken for an anonymous caller (here: 3 a minute)."""
    home = tmp_path / "home"
    with serve(home, rate_limit_anonymous_per_min=3, rate_limit_requests_per_min=3) as client:
        admin = (home / "admin.token").read_text().strip()
        tokens = [make_user(client, admin, f"u{i}") for i in range(10)]
        assert client.get("/api/v1/jobs", headers=bearer(admin)).status_code == 200
        assert client.get("/api/v1/jobs", headers=bearer(tokens[-1])).status_code == 200


def test_server_start_options_change_only_the_limits_given() -> None:
    base = ServerSettings(home=Path("/nonexistent"), port=9000)
    changed = _with_limits(
        base, max_body_bytes=5, rate_limit_requests_per_min=0, max_push_bytes=None
    )
    assert (changed.max_body_bytes, changed.rate_limit_requests_per_min) == (5, 0)
    assert changed.max_push_bytes == base.max_push_bytes and changed.port == 9000
