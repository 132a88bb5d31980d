"""The job list summarises a page a few hundred jobs at a time (``routers/jobs._SUMMARY_CHUNK``), so
a 10,000-job page never holds 10,000 job rows at once (issue #29 item 4, the API process's
memory). Chunks must not change the answer: the same jobs, in the same order, with the same
nodes, accounting, array counts and queue positions as one chunk gives."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.routers import jobs as jobs_router
from shoal.server.settings import ServerSettings
from tests.server.test_fencing import JOB, report, submit

NOW = time.time()


@pytest.fixture
def ctx(tmp_path: Path) -> ServerContext:
    ctx = prepare(ServerSettings(home=tmp_path / "home", node_timeout_s=30, kill_grace_s=10))
    ctx.clock = lambda: NOW  # running jobs' accounting does not move between the two lists
    return ctx


@pytest.fixture
def api(ctx: ServerContext) -> Iterator[TestClient]:
    token = (ctx.settings.home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def listed(api: TestClient, query: str = "limit=100") -> list[dict[str, Any]]:
    answer = api.get(f"/api/v1/jobs?{query}")
    assert answer.status_code == 200, answer.text
    jobs: list[dict[str, Any]] = answer.json()
    return jobs


def test_a_page_summarised_in_chunks_is_the_page_summarised_at_once(
    api: TestClient, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    report(api, ctx.settings.home, ["n1"])  # 2 GPUs: two 1-GPU jobs run, the others wait
    ids = [submit(api, f"job{i}", gpu=1) for i in range(6)]
    array = api.post(
        "/api/v1/jobs",
        json={"spec": JOB.format(name="arr", gpu=0, extra="", role=""), "array": "0-2"},
    )
    assert array.status_code == 201, array.text
    run_cycle(ctx)
    run_cycle(ctx)
    whole = listed(api)
    assert len(whole) == 7  # the array is listed once, by its parent
    assert [j["id"] for j in whole[1:]] == ids[::-1]  # newest first
    assert {j["state"] for j in whole} == {"RUNNING", "WAITING"}
    assert any(j["pending"] and j["pending"]["position"] for j in whole)
    assert whole[0]["array"] is not None and any(j["nodes"] == ["n1"] for j in whole)

    monkeypatch.setattr(jobs_router, "_SUMMARY_CHUNK", 2)
    assert listed(api) == whole
    assert listed(api, "limit=3&offset=2") == whole[2:5]
    assert listed(api, "state=WAITING&sort=name") == sorted(
        (j for j in whole if j["state"] == "WAITING"), key=lambda j: j["name"]
    )
