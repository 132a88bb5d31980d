"""Admin edits are patches (issue 9, defect 2): ``PATCH`` VCs and users change only what they
name, validate like a creation, answer ``{before, after, changes}``, and a dry run writes
nothing; ``user delete`` with active jobs. In process (real SQLite and FastAPI, no agent)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from tests.server.test_api import JOB, register_node

VC = "/api/v1/virtual-clusters"
TEAM_A = {
    "guarantee_gpu": 2,
    "guarantee_cpu": 2,
    "guarantee_memory_mib": 2048,
    "borrow_gpu": 1,
    "user_gpu_cap": 1,
    "members": ["alice"],
    "description": "team a",
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def api(home: Path) -> Iterator[TestClient]:
    ctx = prepare(ServerSettings(home=home))
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        register_node(api=client, home=home, gpus=4)
        yield client


def vc(api: TestClient, name: str) -> dict[str, Any]:
    response = api.get(f"{VC}/{name}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def patch(api: TestClient, name: str, body: dict[str, Any], dry: bool = False) -> Any:
    return api.patch(f"{VC}/{name}", json=body, params={"dryRun": "true"} if dry else None)


@pytest.fixture
def team_a(api: TestClient) -> dict[str, Any]:
    assert api.post(f"{VC}/team-a", json=TEAM_A).status_code == 201
    return vc(api, "team-a")


def test_members_alone_keep_the_guarantee(api: TestClient, team_a: dict[str, Any]) -> None:
    answer = patch(api, "team-a", {"members": ["alice", "bob"]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["changes"] == [
        {"field": "members", "before": ["alice"], "after": ["alice", "bob"]}
    ]
    after = vc(api, "team-a")
    assert after["guarantee"] == {"cpu": 2.0, "memoryMiB": 2048.0, "gpu": 2.0}
    assert {**after, "members": ["alice"]} == team_a


def test_guarantee_alone_keeps_members_borrow_limit_and_user_cap(
    api: TestClient, team_a: dict[str, Any]
) -> None:
    answer = patch(api, "team-a", {"guarantee_gpu": 1}).json()
    assert [c["field"] for c in answer["changes"]] == ["guarantee_gpu"]
    after = vc(api, "team-a")
    assert after["members"] == ["alice"] and after["userGpuCap"] == 1
    assert after["borrowLimit"] is not None and after["borrowLimit"]["gpu"] == 1.0
    assert after["guarantee"]["gpu"] == 1.0 and after["guarantee"]["cpu"] == 2.0


def test_null_clears_a_setting(api: TestClient, team_a: dict[str, Any]) -> None:
    answer = patch(api, "team-a", {"borrow_gpu": None, "user_gpu_cap": None, "members": None})
    assert answer.status_code == 200, answer.text
    after = vc(api, "team-a")
    assert after["borrowLimit"] is None and after["userGpuCap"] is None
    assert after["members"] == [] and after["guarantee"]["gpu"] == 2.0
    refused = patch(api, "team-a", {"strict_fifo": None})
    assert refused.status_code == 400 and "strict_fifo" in refused.json()["message"]


def test_dry_run_writes_nothing(api: TestClient, team_a: dict[str, Any]) -> None:
    answer = patch(api, "team-a", {"guarantee_gpu": 3, "strict_fifo": True}, dry=True)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["dryRun"] and body["after"]["guarantee_gpu"] == 3 and body["after"]["strict_fifo"]
    assert vc(api, "team-a") == team_a
    too_big = patch(api, "team-a", {"guarantee_gpu": 9}, dry=True)
    assert too_big.status_code == 400 and "more than the cluster" in too_big.json()["message"]


def test_patch_is_validated_like_create_and_writes_nothing_when_refused(
    api: TestClient, team_a: dict[str, Any]
) -> None:
    too_big = patch(api, "team-a", {"guarantee_gpu": 5, "members": ["x"]})
    assert too_big.status_code == 400 and "more than the cluster" in too_big.json()["message"]
    typed = patch(api, "team-a", {"guarantee_gpu_by_type": {"A100": 1}})
    assert typed.status_code == 400 and "A100" in typed.json()["message"]
    negative = patch(api, "team-a", {"borrow_gpu": -1})
    assert negative.status_code == 422 and "borrow_gpu" in negative.json()["message"]
    unknown = patch(api, "team-a", {"gpus": 1})
    assert unknown.status_code == 422 and "gpus" in unknown.json()["message"]
    assert vc(api, "team-a") == team_a
    assert patch(api, "nope", {"user_gpu_cap": 1}).status_code == 404


def test_the_default_vc_can_be_updated_except_its_guarantee_and_members(
    api: TestClient,
) -> None:
    answer = patch(api, "default", {"user_gpu_cap": 1, "strict_fifo": True, "borrow_gpu": 2})
    assert answer.status_code == 200, answer.text
    assert "guarantee_gpu" not in answer.json()["after"]
    default = vc(api, "default")
    assert default["userGpuCap"] == 1 and default["strictFifo"] is True
    assert default["guarantee"]["gpu"] == 4.0  # still what the other VCs leave
    refused = patch(api, "default", {"guarantee_gpu": 1})
    assert refused.status_code == 400
    assert "guarantee_gpu" in refused.json()["message"] and "other VCs" in refused.json()["message"]
    assert patch(api, "default", {"members": ["x"]}).status_code == 400


def test_put_stays_a_full_replace(api: TestClient, team_a: dict[str, Any]) -> None:
    replaced = api.put(f"{VC}/team-a", json={"guarantee_gpu": 1})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["members"] == [] and replaced.json()["userGpuCap"] is None


def test_no_sentinel_for_resources_a_vc_does_not_limit(api: TestClient) -> None:
    assert api.post(f"{VC}/gpu-only", json={"guarantee_gpu": 1, "borrow_gpu": 1}).status_code == 201
    listed = {v["name"]: v for v in api.get(VC).json()}
    assert listed["gpu-only"]["guarantee"] == {"cpu": None, "memoryMiB": None, "gpu": 1.0}
    assert listed["gpu-only"]["borrowLimit"] == {"cpu": None, "memoryMiB": None, "gpu": 1.0}


SETTING_VALUES: dict[str, st.SearchStrategy[Any]] = {
    # text a store can keep (a NUL is refused: test_text_no_store_can_keep_is_refused)
    "description": st.text(
        st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=20
    ),
    "guarantee_cpu": st.none() | st.integers(0, 4).map(float),
    "guarantee_memory_mib": st.none() | st.integers(0, 4096),
    "guarantee_gpu": st.integers(2, 4),
    "borrow_cpu": st.none() | st.integers(0, 8).map(float),
    "borrow_memory_mib": st.none() | st.integers(0, 9000),
    "borrow_gpu": st.none() | st.integers(0, 8),
    "user_gpu_cap": st.none() | st.integers(0, 8),
    "preempt_within": st.booleans(),
    "strict_fifo": st.booleans(),
    "aging": st.none()
    | st.builds(
        lambda hours, most: {
            "policy": "las",
            "thresholds_gpu_hours": sorted(map(float, hours)),
            "max_preemptions": most,
        },
        st.lists(st.integers(1, 50), min_size=1, max_size=9, unique=True),
        st.none() | st.integers(1, 5),
    ),
    "members": st.none() | st.lists(st.sampled_from(["alice", "bob", "g1"]), unique=True),
}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    field=st.sampled_from(sorted(SETTING_VALUES)).flatmap(
        lambda f: st.tuples(st.just(f), SETTING_VALUES[f])
    )
)
def test_updating_one_setting_leaves_every_other_unchanged(
    api: TestClient, field: tuple[str, Any]
) -> None:
    name, value = field
    if api.get(f"{VC}/team-p").status_code == 404:
        assert api.post(f"{VC}/team-p", json=TEAM_A).status_code == 201
    before = patch(api, "team-p", {}).json()["after"]
    answer = patch(api, "team-p", {name: value})
    assert answer.status_code == 200, answer.text
    after = answer.json()["after"]
    assert {k: v for k, v in after.items() if k != name} == {
        k: v for k, v in before.items() if k != name
    }
    assert patch(api, "team-p", {}).json()["after"] == after  # and it was written


# ---- users ----


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_user(api: TestClient, name: str, **extra: object) -> str:
    made = api.post("/api/v1/users", json={"name": name, **extra})
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def login(api: TestClient, name: str, password: str) -> int:
    form = {"username": name, "password": password}
    return api.post("/api/v2/authn/basic/login", data=form).status_code


def users(api: TestClient) -> dict[str, dict[str, Any]]:
    return {u["name"]: u for u in api.get("/api/v1/users").json()}


def test_user_patch_changes_only_what_it_names(api: TestClient) -> None:
    make_user(api, "alice", groups=["g1"], password="secret1")
    answer = api.patch("/api/v1/users/alice", json={"admin": True})
    assert answer.status_code == 200, answer.text
    assert answer.json()["changes"] == [{"field": "admin", "before": False, "after": True}]
    assert users(api)["alice"] == {"name": "alice", "admin": True, "groups": ["g1"]}
    assert login(api, "alice", "secret1") == 200  # the password survived
    dry = api.patch("/api/v1/users/alice", json={"groups": []}, params={"dryRun": "true"})
    assert dry.json()["after"]["groups"] == [] and users(api)["alice"]["groups"] == ["g1"]
    cleared = api.patch("/api/v1/users/alice", json={"password": None}).json()
    assert cleared["changes"] == [{"field": "password", "before": "set", "after": "none"}]
    assert login(api, "alice", "secret1") == 400  # OpenPAI's IncorrectPasswordError
    short = api.patch("/api/v1/users/alice", json={"password": "abc"})
    assert short.status_code == 400 and "password" in short.json()["message"]
    assert api.patch("/api/v1/users/admin", json={"admin": False}).status_code == 400
    assert api.patch("/api/v1/users/nobody", json={"admin": True}).status_code == 404


def test_user_delete_with_active_jobs_needs_stop_jobs(api: TestClient) -> None:
    token = make_user(api, "bob")
    submitted = api.post(
        "/api/v1/jobs", json={"spec": JOB.format(name="long", gpu=1)}, headers=bearer(token)
    )
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()[0]["id"]
    refused = api.delete("/api/v1/users/bob")
    assert refused.status_code == 409
    assert f"{job_id} (long, WAITING)" in refused.json()["message"]
    assert "--stop-jobs" in refused.json()["message"]
    assert api.get("/api/v1/me", headers=bearer(token)).status_code == 200  # nothing changed
    deleted = api.delete("/api/v1/users/bob", params={"stopJobs": "true"})
    assert deleted.status_code == 200 and deleted.json()["stoppedJobs"] == [job_id]
    assert api.get("/api/v1/me", headers=bearer(token)).status_code == 401
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "STOPPED" and job["user"] == "bob"
    assert "bob" not in users(api)


def test_user_without_active_jobs_is_deleted_at_once(api: TestClient) -> None:
    make_user(api, "carol")
    deleted = api.delete("/api/v1/users/carol")
    assert deleted.status_code == 200 and deleted.json() == {"name": "carol", "stoppedJobs": []}


@pytest.mark.parametrize("text", ["a\x00b", "\ud800"])
def test_text_no_store_can_keep_is_refused(api: TestClient, text: str) -> None:
    """A NUL (PostgreSQL refuses it in text) or a lone surrogate: 422 naming the field, nothing
    written, on either store."""
    made = api.post(f"{VC}/team-n", json={"description": "kept"})
    assert made.status_code == 201, made.text
    as_json = {"Content-Type": "application/json"}  # JSON's \u escapes: what clients send
    refused = api.patch(f"{VC}/team-n", content=json.dumps({"description": text}), headers=as_json)
    assert refused.status_code == 422, refused.text
    assert "description holds a NUL character" in refused.json()["message"]
    assert api.get(f"{VC}/team-n").json()["description"] == "kept"
    user = api.post(
        "/api/v1/users",
        content=json.dumps({"name": "nul-user", "password": f"long-pass-{text}"}),
        headers=as_json,
    )
    assert user.status_code == 422, user.text
