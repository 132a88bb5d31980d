"""The audit log (docs/audit.md): every security-relevant action writes one row, in the same
transaction as the change; refusals worth knowing are written too; only admins read it; no
secret ever lands in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.settings import ServerSettings
from shoal.store.db import Database, sqlite_url
from tests.server.migrations import MigrationSteps
from tests.server.test_exec_sessions import refusal, running_job

JOB = "version: 1\nname: {name}\nroles:\n  w:\n    command: sleep 100\n"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def ctx(home: Path) -> ServerContext:
    return prepare(ServerSettings(home=home))


@pytest.fixture
def api(home: Path, ctx: ServerContext) -> Iterator[TestClient]:
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        client.headers["User-Agent"] = "admin-console/1"
        yield client


def log(api: TestClient, **params: Any) -> list[dict[str, Any]]:
    response = api.get("/api/v1/audit", params=params)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()
    return rows


def actions(api: TestClient, **params: Any) -> list[tuple[str, str, str, str]]:
    """(actor, action, target, outcome), oldest first."""
    return [
        (r["actor"], r["action"], r["target"], r["outcome"]) for r in reversed(log(api, **params))
    ]


def bearer(token: str, agent: str = "cli/1") -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "User-Agent": agent}


def test_user_token_login_and_vc_changes_are_recorded_with_who_and_from_where(
    api: TestClient,
) -> None:
    alice = api.post("/api/v1/users", json={"name": "alice", "password": "s3cret-pass"})
    assert alice.status_code == 201, alice.text
    assert api.patch("/api/v1/users/alice", json={"admin": True}).status_code == 200
    assert api.patch("/api/v1/users/alice", json={"admin": False}).status_code == 200
    token = api.post("/api/v1/tokens", json={"label": "ci"}).json()
    assert api.delete(f"/api/v1/tokens/{token['id']}").status_code in (200, 204)
    team = "/api/v1/virtual-clusters/team"
    assert api.post(team, json={"members": ["alice"]}).status_code == 201
    assert api.patch(team, json={"description": "the RL team"}).status_code == 200
    assert api.patch(f"{team}?dryRun=true", json={"description": "unsaid"}).status_code == 200
    assert api.delete(team).status_code in (200, 204)
    login = api.post(
        "/api/v2/authn/basic/login",
        data={"username": "alice", "password": "s3cret-pass"},
        headers={"Authorization": ""},
    )
    assert login.status_code == 200, login.text
    wrong = api.post(
        "/api/v2/authn/basic/login",
        data={"username": "alice", "password": "guess"},
        headers={"Authorization": ""},
    )
    assert wrong.status_code == 400
    assert api.delete("/api/v1/users/alice").status_code in (200, 204)

    seen = [a for a in actions(api) if a[1] != "token.new_client"]
    assert seen == [
        ("admin", "user.create", "user alice", "ok"),
        ("admin", "user.update", "user alice", "ok"),
        ("admin", "user.update", "user alice", "ok"),
        ("admin", "token.create", f"token {token['id']}", "ok"),
        ("admin", "token.revoke", f"token {token['id']}", "ok"),
        ("admin", "vc.create", "vc team", "ok"),
        ("admin", "vc.update", "vc team", "ok"),  # the dry run wrote nothing
        ("admin", "vc.delete", "vc team", "ok"),
        ("alice", "login", "user alice", "ok"),
        ("alice", "login", "user alice", "refused"),
        ("admin", "user.delete", "user alice", "ok"),
    ], seen
    rows = {(r["action"], r["outcome"]): r for r in log(api)}
    assert rows[("user.update", "ok")]["detail"]["changes"][0]["field"] == "admin"
    assert rows[("login", "refused")]["detail"]["reason"] == "IncorrectPasswordError"
    assert rows[("user.create", "ok")]["client"] == "testclient"
    assert rows[("user.create", "ok")]["detail"]["userAgent"] == "admin-console/1"
    vc_change = rows[("vc.update", "ok")]["detail"]["changes"]
    assert [c["field"] for c in vc_change] == ["description"], vc_change


def test_a_token_used_by_a_new_client_is_recorded_once_even_across_restarts(
    api: TestClient, home: Path
) -> None:
    bob = api.post("/api/v1/users", json={"name": "bob"}).json()["token"]
    for _ in range(3):
        assert api.get("/api/v1/jobs", headers=bearer(bob, "laptop/1")).status_code == 200
    assert api.get("/api/v1/jobs", headers=bearer(bob, "notebook/2")).status_code == 200
    with TestClient(create_app(prepare(ServerSettings(home=home)))) as again:  # a restart
        assert again.get("/api/v1/jobs", headers=bearer(bob, "laptop/1")).status_code == 200
    uses = log(api, action="token.new_client", actor="bob")
    assert sorted(u["detail"]["userAgent"] for u in uses) == ["laptop/1", "notebook/2"], uses
    assert all(u["target"].startswith("token ") for u in uses)


def test_an_admin_stopping_someone_elses_job_is_recorded_but_not_their_own(
    api: TestClient,
) -> None:
    carol = api.post("/api/v1/users", json={"name": "carol"}).json()["token"]
    theirs = api.post("/api/v1/jobs", json={"spec": JOB.format(name="c1")}, headers=bearer(carol))
    mine = api.post("/api/v1/jobs", json={"spec": JOB.format(name="a1")})
    theirs_id, mine_id = theirs.json()[0]["id"], mine.json()[0]["id"]
    assert api.post(f"/api/v1/jobs/{theirs_id}/stop").status_code == 202
    assert api.post(f"/api/v1/jobs/{mine_id}/stop").status_code == 202
    assert api.post(f"/api/v1/jobs/{theirs_id}/stop", headers=bearer(carol)).status_code == 202
    stops = log(api, action="job.stop")
    assert [(s["actor"], s["target"], s["detail"]["owner"]) for s in stops] == [
        ("admin", f"job {theirs_id}", "carol")
    ]


def test_node_holds_and_terminal_sessions_opened_or_refused_are_recorded(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    job_id = running_job(api, home, ctx)  # node n0 reported by its agent
    dave = api.post("/api/v1/users", json={"name": "dave"}).json()["token"]
    assert api.post("/api/v1/nodes/n0/cordon").status_code == 200
    assert api.post("/api/v1/nodes/n0/uncordon").status_code == 200
    with api.websocket_connect(
        f"/api/v1/jobs/{job_id}/exec", headers={"Authorization": f"Bearer {dave}"}
    ) as refused:
        error, _, _ = refusal(refused)
    assert error["code"] == "ForbiddenUserError"
    seen = [a for a in actions(api) if a[1] != "token.new_client"]
    assert seen[-3:] == [
        ("admin", "node.cordon", "node n0", "ok"),
        ("admin", "node.uncordon", "node n0", "ok"),
        ("dave", "exec.open", f"job {job_id}", "refused"),
    ], seen


def test_only_admins_read_the_log_and_filters_work(api: TestClient) -> None:
    erin = api.post("/api/v1/users", json={"name": "erin"}).json()["token"]
    refused = api.get("/api/v1/audit", headers=bearer(erin))
    assert refused.status_code == 403 and refused.json()["code"] == "ForbiddenUserError"
    api.post("/api/v1/tokens", json={"label": "one"})
    assert {r["action"] for r in log(api, action="token.")} <= {"token.create", "token.new_client"}
    assert [r["action"] for r in log(api, action="token.create")] == ["token.create"]
    assert len(log(api, limit=1)) == 1
    assert log(api, since=4_000_000_000) == []
    assert log(api, outcome="refused", actor="erin") == []
    bad = api.get("/api/v1/audit", params={"limit": 0})
    assert bad.status_code == 422 and "limit" in bad.json()["message"]


def test_no_secret_is_ever_written_to_the_log(api: TestClient, home: Path) -> None:
    created = api.post("/api/v1/users", json={"name": "frank", "password": "hunter2-long"})
    frank = created.json()["token"]
    api.patch("/api/v1/users/frank", json={"password": "another-pass-9"})
    api.post("/api/v2/authn/basic/login", data={"username": "frank", "password": "wrong-pass-7"})
    minted = api.post("/api/v1/tokens", json={"label": "x"}).json()["token"]
    db = Database(sqlite_url(home))  # the home's store (tests/server/conftest.py)
    try:
        with db.read() as session:
            rows = session.execute(text("SELECT * FROM audit_events")).all()
    finally:
        db.dispose()
    dump = "\n".join(str(tuple(row)) for row in rows)
    for secret in ("hunter2-long", "another-pass-9", "wrong-pass-7", frank, minted):
        assert secret not in dump
    assert "passwordChanged" in dump or "changed" in dump


def test_migration_0023_adds_and_drops_the_audit_table(tmp_path: Path) -> None:
    store = MigrationSteps(tmp_path)
    store.migrate("upgrade", "0023")
    assert "audit_events" in store.tables()
    store.migrate("downgrade", "0022")
    assert "audit_events" not in store.tables() and "exec_sessions" in store.tables()
    store.close()


@pytest.mark.sqlite_only  # backups copy a SQLite store
def test_a_backup_is_recorded(api: TestClient) -> None:
    taken = api.get("/api/v1/admin/backup")
    assert taken.status_code == 200, taken.text
    (row,) = log(api, action="store.backup")
    assert (row["actor"], row["target"], row["detail"]["jobs"]) == ("admin", "store", 0)
