"""`shoal server move-store` (docs/postgresql.md): a SQLite cluster's whole state moved into an
empty PostgreSQL database; the server then runs on it with the same tokens, jobs and nodes, and
new rows take new ids. A target that holds rows already is refused, and nothing is recorded."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from shoal.cli.main import app
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from shoal.store.db import home_store, sqlite_url, store_url
from tests.server.test_api import JOB, register_node


def _client(home: Path, token: str, scheduler: bool) -> tuple[TestClient, object]:
    ctx = prepare(ServerSettings(home=home, scheduler="thread", scheduler_interval_s=0.05))
    client = TestClient(create_app(ctx, run_scheduler=scheduler))
    client.headers["Authorization"] = f"Bearer {token}"
    return client, ctx


def _until_placed(api: TestClient, job_id: str) -> None:
    deadline = time.monotonic() + 20
    while api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "WAITING":
        assert time.monotonic() < deadline, "the job was not placed"
        time.sleep(0.1)


def test_a_sqlite_cluster_moves_to_postgresql_and_runs_there(tmp_path: Path, pg_store: str) -> None:
    home = tmp_path / "home"
    prepare(ServerSettings(home=home)).db.dispose()
    admin = (home / "admin.token").read_text().strip()
    api, ctx = _client(home, admin, scheduler=True)
    with api:
        register_node(api, home, gpus=2)
        jobs = [api.post("/api/v1/jobs", json={"spec": JOB.format(name=f"j{i}", gpu=1)})
                .json()[0]["id"] for i in range(3)]  # fmt: skip
        _until_placed(api, jobs[0])
        dora = api.post("/api/v1/users", json={"name": "dora"}).json()["token"]
    ctx.db.dispose()  # type: ignore[attr-defined]

    moved = CliRunner().invoke(app, ["server", "move-store", "--home", str(home), "--to", pg_store])
    assert moved.exit_code == 0, moved.output
    assert "copied" in moved.output and "now uses postgresql://" in moved.output
    assert home_store(home) == store_url(pg_store)
    assert (home / "shoal.db").exists()  # the old store is left as it was

    api, ctx = _client(home, admin, scheduler=True)
    with api:
        assert sorted(j["id"] for j in api.get("/api/v1/jobs").json()) == sorted(jobs)
        assert (
            api.get("/api/v1/me", headers={"Authorization": f"Bearer {dora}"}).json()["name"]
            == "dora"
        )
        assert [n["name"] for n in api.get("/api/v1/nodes").json()] == ["n0"]
        report = api.get(f"/api/v1/jobs/{jobs[0]}").json()
        assert report["state"] != "WAITING"
        new = api.post("/api/v1/jobs", json={"spec": JOB.format(name="new", gpu=0)})
        assert new.status_code == 201, new.text  # new rows take ids past the copied ones
        _until_placed(api, new.json()[0]["id"])
    ctx.db.dispose()  # type: ignore[attr-defined]


def test_a_target_with_rows_is_refused_and_nothing_is_recorded(
    tmp_path: Path, pg_store: str
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    prepare(ServerSettings(home=first, database_url=pg_store)).db.dispose()  # a cluster there
    prepare(ServerSettings(home=second)).db.dispose()
    moved = CliRunner().invoke(
        app, ["server", "move-store", "--home", str(second), "--to", pg_store]
    )
    assert moved.exit_code == 1
    assert "already has rows in" in moved.output
    assert home_store(second) == sqlite_url(second)
