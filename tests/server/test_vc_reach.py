"""Jobs their virtual cluster could never hold (issue 25, item 1): refused at submission with a 422
naming the VC, the limit and the fix; a waiting job that an admin's VC edit puts out of reach is
marked infeasible with the reason (as ``NeverFits`` is: it stays queued, and an edit back lets it
run); limits a VC does not set are never shown as the number that stands for them. In process:
real SQLite and FastAPI, the scheduler's cycles run by the test, the agent's report sent by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shoal.core.resources import UNLIMITED
from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.settings import ServerSettings
from tests.server.test_api import register_node

VC = "/api/v1/virtual-clusters"
JOB = "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{gpu: {gpu}}}\n    command: x\n"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def ctx(home: Path) -> ServerContext:
    return prepare(ServerSettings(home=home, node_timeout_s=10**9))


@pytest.fixture
def api(home: Path, ctx: ServerContext) -> Iterator[TestClient]:
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        register_node(api=client, home=home, gpus=4)  # one node: 4 cpu, 4096 MiB, 4 GPUs
        yield client


def submit(api: TestClient, name: str, gpu: int, vc: str = "team") -> Any:
    spec = JOB.format(name=name, gpu=gpu)
    return api.post("/api/v1/jobs", json={"spec": spec, "virtual_cluster": vc})


def make_vc(api: TestClient, name: str, **settings: Any) -> None:
    made = api.post(f"{VC}/{name}", json=settings)
    assert made.status_code == 201, made.text


def state_of(api: TestClient, job_id: str) -> dict[str, Any]:
    detail = api.get(f"/api/v1/jobs/{job_id}")
    assert detail.status_code == 200, detail.text
    return dict(detail.json())


def assert_no_sentinel(message: str) -> None:
    assert str(UNLIMITED) not in message and "e+" not in message, message


def test_a_job_over_guarantee_plus_borrowing_is_refused(api: TestClient) -> None:
    make_vc(api, "team", guarantee_gpu=1, borrow_gpu=1)
    refused = submit(api, "big", gpu=3)
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["code"] == "ExceedsVirtualClusterLimit"
    message = body["message"]
    assert "virtual cluster team may ever use (3 GPU asked, at most 2 GPU" in message
    assert "(guarantee 1 GPU plus borrowing limit 1 GPU)" in message
    assert "shoal vc update team --borrow-limit gpu=2" in message
    assert_no_sentinel(message)
    assert api.get("/api/v1/jobs").json() == []  # nothing stored


def test_a_job_that_fits_by_borrowing_is_accepted_and_runs(
    api: TestClient, ctx: ServerContext
) -> None:
    make_vc(api, "team", guarantee_gpu=1, borrow_gpu=1)
    made = submit(api, "fits", gpu=2)
    assert made.status_code == 201, made.text
    run_cycle(ctx)
    assert state_of(api, made.json()[0]["id"])["state"] == "RUNNING"


def test_a_job_over_the_per_user_cap_is_refused(api: TestClient) -> None:
    make_vc(api, "team", guarantee_gpu=4, user_gpu_cap=1)
    refused = submit(api, "greedy", gpu=2)
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "ExceedsUserGPUCap"
    message = refused.json()["message"]
    assert "more than the 1-GPU per-user cap of virtual cluster team" in message
    assert "shoal vc update team --user-gpu-cap 2" in message


def test_the_default_vc_with_a_borrowing_limit_is_judged_too(api: TestClient) -> None:
    make_vc(api, "team", guarantee_gpu=2)
    assert api.patch(f"{VC}/default", json={"borrow_gpu": 1}).status_code == 200
    refused = submit(api, "big", gpu=4, vc="default")  # default's guarantee: the 2 left
    assert refused.status_code == 422 and refused.json()["code"] == "ExceedsVirtualClusterLimit"
    assert "at most 3 GPU (guarantee 2 GPU plus borrowing limit 1 GPU)" in refused.json()["message"]
    assert submit(api, "fits", gpu=3, vc="default").status_code == 201


def test_a_vc_edit_marks_a_waiting_job_infeasible_with_the_reason(
    api: TestClient, ctx: ServerContext
) -> None:
    make_vc(api, "team", guarantee_gpu=2)  # may borrow any idle GPU
    first = submit(api, "first", gpu=4).json()[0]["id"]
    run_cycle(ctx)
    assert state_of(api, first)["state"] == "RUNNING"
    second = submit(api, "second", gpu=4).json()[0]["id"]
    run_cycle(ctx)
    waiting = state_of(api, second)
    assert waiting["state"] == "WAITING"
    assert waiting["pending"]["code"] != "ExceedsVirtualClusterLimit"
    assert api.patch(f"{VC}/team", json={"borrow_gpu": 1}).status_code == 200
    run_cycle(ctx)
    detail = state_of(api, second)
    assert detail["state"] == "WAITING"  # as NeverFits: reported, kept, never started
    assert detail["pending"]["code"] == "ExceedsVirtualClusterLimit"
    assert "(4 GPU asked, at most 3 GPU (guarantee 2 GPU" in detail["pending"]["message"]
    why = api.get(f"/api/v1/jobs/{second}/pending-reason").json()
    assert why["code"] == "ExceedsVirtualClusterLimit" and why["blockers"] == []
    assert state_of(api, first)["state"] == "RUNNING"  # what runs already is left alone
    assert api.patch(f"{VC}/team", json={"borrow_gpu": None}).status_code == 200
    run_cycle(ctx)
    assert state_of(api, second)["pending"]["code"] != "ExceedsVirtualClusterLimit"


def test_over_quota_names_only_the_limits_set(api: TestClient, ctx: ServerContext) -> None:
    make_vc(api, "team", guarantee_gpu=2, borrow_gpu=0)
    assert submit(api, "first", gpu=2).status_code == 201
    run_cycle(ctx)
    second = submit(api, "second", gpu=2).json()[0]["id"]
    run_cycle(ctx)
    pending = state_of(api, second)["pending"]
    assert pending["code"] == "OverQuota"
    message = pending["message"]
    assert "of its guarantee 2 GPU (cpu and memory unlimited) plus borrowing limit 0 GPU" in message
    assert_no_sentinel(message)
