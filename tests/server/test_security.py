"""Users and tokens: who may see and do what; revoked and expired tokens; no token leaks."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shoal.server.app import create_app, prepare
from shoal.server.services.jobs import masked_source
from shoal.server.settings import ServerSettings

JOB = "version: 1\nname: {name}\nroles:\n  w:\n    command: echo hi\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home))
    with TestClient(create_app(ctx)) as client:
        yield client, (home / "admin.token").read_text().strip()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_user(client: TestClient, admin_token: str, name: str, **extra: object) -> str:
    response = client.post(
        "/api/v1/users", json={"name": name, **extra}, headers=bearer(admin_token)
    )
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def test_users_see_and_touch_only_their_own_jobs(server: tuple[TestClient, str]) -> None:
    client, admin = server
    alice, bob = make_user(client, admin, "alice"), make_user(client, admin, "bob")
    job = client.post("/api/v1/jobs", json={"spec": JOB.format(name="a1")}, headers=bearer(alice))
    job_id = job.json()[0]["id"]
    for method, path in [
        ("GET", f"/api/v1/jobs/{job_id}"),
        ("GET", f"/api/v1/jobs/{job_id}/events"),
        ("GET", f"/api/v1/jobs/{job_id}/logs"),
        ("GET", f"/api/v1/jobs/{job_id}/logs/lines"),
        ("GET", f"/api/v1/jobs/{job_id}/pending-reason"),
        ("POST", f"/api/v1/jobs/{job_id}/stop"),
        ("GET", "/api/v2/jobs/alice~a1"),
        ("GET", "/api/v2/jobs/alice~a1/config"),
        ("PUT", "/api/v2/jobs/alice~a1/executionType"),
    ]:
        kwargs = {"json": {"value": "STOP"}} if method == "PUT" else {}
        response = client.request(method, path, headers=bearer(bob), **kwargs)
        # shoal's API says whose it is (the job list shows that to anyone); OpenPAI's, nothing
        expected = 404 if path.startswith("/api/v2/") else 403
        assert response.status_code == expected, (method, path, response.status_code)
    assert client.get("/api/v1/jobs", headers=bearer(bob)).json() == []
    assert client.get("/api/v2/jobs", headers=bearer(bob)).json() == []
    assert client.get(f"/api/v1/jobs/{job_id}", headers=bearer(alice)).status_code == 200
    assert client.get(f"/api/v1/jobs/{job_id}", headers=bearer(admin)).status_code == 200
    assert client.get(f"/api/v1/jobs/{job_id}", headers=bearer(alice)).json()["state"] == "WAITING"


def test_everyones_queue_shows_summaries_never_commands_logs_or_events(
    server: tuple[TestClient, str],
) -> None:
    client, admin = server
    alice, bob = make_user(client, admin, "alice"), make_user(client, admin, "bob")
    spec = JOB.format(name="a1").replace("echo hi", "echo s3cr3t-command")
    job_id = client.post("/api/v1/jobs", json={"spec": spec}, headers=bearer(alice)).json()[0]["id"]
    listed = client.get("/api/v1/jobs", params={"allUsers": "true"}, headers=bearer(bob))
    assert [(j["id"], j["user"], j["name"]) for j in listed.json()] == [(job_id, "alice", "a1")]
    assert "s3cr3t-command" not in listed.text
    for path in (job_id, "alice~a1", f"{job_id}/events", f"{job_id}/logs", "alice~a1/logs"):
        response = client.get(f"/api/v1/jobs/{path}", headers=bearer(bob))
        assert response.status_code == 403, path
        assert "s3cr3t-command" not in response.text


def test_admin_only_operations(server: tuple[TestClient, str]) -> None:
    client, admin = server
    alice = make_user(client, admin, "alice")
    for method, path, body in [
        ("POST", "/api/v1/users", {"name": "eve"}),
        ("GET", "/api/v1/users", None),
        ("POST", "/api/v1/virtual-clusters/x", {"guarantee_gpu": 0}),
        ("DELETE", "/api/v1/users/admin", None),
    ]:
        response = client.request(method, path, json=body, headers=bearer(alice))
        assert response.status_code == 403, (method, path)


def test_application_tokens_are_limited_to_jobs(server: tuple[TestClient, str]) -> None:
    client, admin = server
    app_token = client.post(
        "/api/v1/tokens", json={"application": True}, headers=bearer(admin)
    ).json()["token"]
    submitted = client.post(
        "/api/v1/jobs", json={"spec": JOB.format(name="j")}, headers=bearer(app_token)
    )
    assert submitted.status_code == 201
    assert client.get("/api/v1/jobs", headers=bearer(app_token)).status_code == 200
    assert client.post("/api/v1/tokens", json={}, headers=bearer(app_token)).status_code == 403
    assert client.get("/api/v1/users", headers=bearer(app_token)).status_code == 403
    vc = client.post("/api/v1/virtual-clusters/x", json={}, headers=bearer(app_token))
    assert vc.status_code == 403


def test_revoked_and_expired_tokens_are_refused(server: tuple[TestClient, str]) -> None:
    client, admin = server
    made = client.post("/api/v1/tokens", json={"label": "temp"}, headers=bearer(admin)).json()
    assert client.get("/api/v1/me", headers=bearer(made["token"])).status_code == 200
    assert client.delete(f"/api/v1/tokens/{made['id']}", headers=bearer(admin)).status_code == 204
    revoked = client.get("/api/v1/me", headers=bearer(made["token"]))
    assert revoked.status_code == 401 and "revoked" in revoked.json()["message"]
    short = client.post("/api/v1/tokens", json={"expires_in_s": 0.05}, headers=bearer(admin)).json()
    time.sleep(0.1)
    assert client.get("/api/v1/me", headers=bearer(short["token"])).status_code == 401
    alice = make_user(client, admin, "alice")
    client.delete("/api/v1/users/alice", headers=bearer(admin))
    assert client.get("/api/v1/me", headers=bearer(alice)).status_code == 401


def test_vc_membership(server: tuple[TestClient, str]) -> None:
    client, admin = server
    alice = make_user(client, admin, "alice")
    bob = make_user(client, admin, "bob", groups=["vision"])
    carol = make_user(client, admin, "carol")
    assert (
        client.post(
            "/api/v1/virtual-clusters/team",
            json={"members": ["alice", "vision"]},
            headers=bearer(admin),
        ).status_code
        == 201
    )
    spec = {"spec": JOB.format(name="t"), "virtual_cluster": "team"}
    assert client.post("/api/v1/jobs", json=spec, headers=bearer(alice)).status_code == 201
    assert client.post("/api/v1/jobs", json=spec, headers=bearer(bob)).status_code == 201
    denied = client.post("/api/v1/jobs", json=spec, headers=bearer(carol))
    assert denied.status_code == 403 and "not a member of virtual cluster team" in denied.text
    missing = client.post(
        "/api/v1/jobs", json={**spec, "virtual_cluster": "nope"}, headers=bearer(alice)
    )
    assert missing.status_code == 400 and missing.json()["code"] == "NoVirtualClusterError"


def test_basic_login(server: tuple[TestClient, str]) -> None:
    client, admin = server
    make_user(client, admin, "dave", password="s3cret!")
    good = client.post(
        "/api/v2/authn/basic/login",
        content="username=dave&password=s3cret!&expiration=3600",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert good.status_code == 200
    assert client.get("/api/v1/me", headers=bearer(good.json()["token"])).json()["name"] == "dave"
    bad = client.post("/api/v2/authn/basic/login", json={"username": "dave", "password": "nope"})
    assert bad.status_code == 400 and bad.json()["code"] == "IncorrectPasswordError"


def test_tokens_never_appear_in_api_output_or_logs(
    server: tuple[TestClient, str], caplog: pytest.LogCaptureFixture
) -> None:
    client, admin = server
    caplog.set_level(logging.DEBUG)
    made = client.post("/api/v1/tokens", json={"label": "x"}, headers=bearer(admin)).json()
    secret = made["token"]
    client.post("/api/v1/jobs", json={"spec": JOB.format(name="j")}, headers=bearer(secret))
    outputs = [
        client.get("/api/v1/tokens", headers=bearer(admin)).text,
        client.get("/api/v1/jobs", headers=bearer(secret)).text,
        client.get("/api/v1/jobs/1", headers=bearer(secret)).text,
        client.get("/api/v1/jobs/1/events", headers=bearer(secret)).text,
        client.get("/api/v1/me", headers=bearer(secret)).text,
    ]
    for text in [*outputs, caplog.text]:
        assert secret not in text and admin not in text


def test_a_job_files_secrets_are_masked_where_it_is_shown_again() -> None:
    text = (
        "version: 1\nname: j\nsecrets:\n  key: 'abcd1234'\n  pin: 7\n"
        "roles:\n  w:\n    command: use abcd1234 and 7 and {{ secrets.pin }}\n"
    )
    masked = masked_source(text, {"key": "abcd1234", "pin": 7})
    assert "abcd1234" not in masked
    assert "  key: ******\n  pin: ******\n" in masked
    assert "use ****** and 7 and {{ secrets.pin }}" in masked  # a 1-character one stays in prose
    assert masked_source(text, {}) == text
