"""The REST API in process (real SQLite, real FastAPI app, no agent): contract, validation, auth,
and the OpenPAI-compatible subset."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import text

from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from shoal.store.db import Database, sqlite_url

SNAPSHOT = Path(__file__).with_name("openapi.snapshot.json")
PUBLIC = {
    ("get", "/api/v1/health"),
    ("get", "/api/v1/version"),
    ("post", "/api/v2/authn/basic/login"),
    ("get", "/api/v2/info"),  # OpenPAI's clients ask it before logging in
    # a signed URL is its own credential (openpai/logurls.py)
    ("get", "/log-manager/{job_id}/{job_attempt}/{role}/{index}/{task_attempt}/{stream}"),
    ("get", "/api/v2/authn/oidc/login"),  # no OIDC: a redirect to /api/v2/info
    ("get", "/api/v2/authn/oidc/logout"),
    # joining: the CA is public (pinned by the token's hash), a join is authenticated by its token
    ("get", "/api/v1/join/ca"),
    ("post", "/api/v1/join"),
    ("get", "/api/v1/install/{file}"),  # public packages cloud machines install
    ("post", "/api/v1/session"),  # signing in to the dashboard
    ("get", "/api/v1/session"),  # the page asks whether it is signed in (no 401 in its console)
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def api(home: Path) -> Iterator[TestClient]:
    ctx = prepare(ServerSettings(home=home))
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def agent_headers(home: Path) -> dict[str, str]:
    token = (home / "agent.token").read_text().strip()
    return {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}


def register_node(api: TestClient, home: Path, gpus: int = 2, name: str = "n0") -> None:
    node = {
        "name": name,
        "address": "127.0.0.1",
        "cpu_millis": 4000,
        "memory_mib": 4096,
        "gpu_indices": list(range(gpus)),
        "port_low": 20000,
        "port_high": 21000,
    }
    response = api.post(
        "/api/v1/agent/report", json={"agent_id": "a", "nodes": [node]}, headers=agent_headers(home)
    )
    assert response.status_code == 200, response.text


JOB = (
    "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{gpu: {gpu}}}\n    command: echo hi\n"
)


def test_openapi_matches_the_snapshot(api: TestClient) -> None:
    schema = api.get("/openapi.json").json()
    if os.environ.get("SHOAL_UPDATE_SNAPSHOTS") == "1" or not SNAPSHOT.exists():
        SNAPSHOT.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
    expected = json.loads(SNAPSHOT.read_text())
    assert schema == expected, (
        "the API changed; if on purpose, rerun with SHOAL_UPDATE_SNAPSHOTS=1 and commit it"
    )


def test_every_non_public_endpoint_needs_a_token(api: TestClient) -> None:
    schema = api.get("/openapi.json").json()
    checked = 0
    for path, methods in schema["paths"].items():
        for method in methods:
            if (method, path) in PUBLIC:
                continue
            url = path.replace("{", "").replace("}", "")  # any value: auth comes first
            response = api.request(method.upper(), url, headers={"Authorization": ""})
            assert response.status_code == 401, (method, path, response.status_code)
            bad = api.request(method.upper(), url, headers={"Authorization": "Bearer nope"})
            assert bad.status_code == 401, (method, path)
            checked += 1
    assert checked >= 15


def test_agent_token_cannot_use_the_user_api(api: TestClient, home: Path) -> None:
    response = api.get("/api/v1/jobs", headers=agent_headers(home))
    assert response.status_code == 403


def test_invalid_job_is_a_400_with_field_paths_and_nothing_is_stored(api: TestClient) -> None:
    bad = JOB.format(name="bad", gpu=-1)
    response = api.post("/api/v1/jobs", json={"spec": bad})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "InvalidJobSpec"
    (problem,) = body["problems"]
    assert problem["path"] == "roles.w.resources.gpu" and problem["line"] == 5
    assert api.get("/api/v1/jobs").json() == []


def test_unknown_request_fields_and_job_are_clear_errors(api: TestClient) -> None:
    response = api.post("/api/v1/jobs", json={"spec": "x", "bogus": 1})
    assert response.status_code == 422
    assert "bogus" in response.json()["message"]
    missing = api.get("/api/v1/jobs/999")
    assert missing.status_code == 404 and missing.json()["code"] == "NoJobError"


def test_submission_is_durable_before_the_answer(api: TestClient, home: Path) -> None:
    response = api.post("/api/v1/jobs", json={"spec": JOB.format(name="kept", gpu=0)})
    assert response.status_code == 201
    (job,) = response.json()
    other = Database(sqlite_url(home))  # a second connection sees the committed job at once
    with other.read() as session:
        rows = session.execute(text("select name, state from jobs")).all()
    assert [tuple(r) for r in rows] == [("kept", "WAITING")]
    other.dispose()
    assert job["state"] == "WAITING"


def test_duplicate_active_name_is_409_and_never_fits_is_422(api: TestClient, home: Path) -> None:
    register_node(api, home, gpus=2)
    assert api.post("/api/v1/jobs", json={"spec": JOB.format(name="a", gpu=1)}).status_code == 201
    dup = api.post("/api/v1/jobs", json={"spec": JOB.format(name="a", gpu=1)})
    assert dup.status_code == 409 and dup.json()["code"] == "ConflictJobError"
    huge = api.post("/api/v1/jobs", json={"spec": JOB.format(name="huge", gpu=4)})
    assert huge.status_code == 422
    assert "needs 4 GPUs on one node" in huge.json()["message"]


def test_stop_a_waiting_job(api: TestClient) -> None:
    (job,) = api.post("/api/v1/jobs", json={"spec": JOB.format(name="s", gpu=0)}).json()
    stopped = api.post(f"/api/v1/jobs/{job['id']}/stop")
    assert stopped.status_code == 202 and stopped.json()["state"] == "STOPPED"
    kinds = [e["kind"] for e in api.get(f"/api/v1/jobs/{job['id']}/events").json()]
    assert kinds[0] == "queued" and kinds[-1] == "stopped"  # "pending" may come between


def test_openpai_submit_list_detail_stop_config(api: TestClient, shared_dir: Path) -> None:
    text = (shared_dir / "compat" / "pai" / "hello-world-job.yaml").read_text()
    text = text.replace("jobRetryCount: 0", "jobRetryCount: 0\nsecrets:\n  key: hunter2")
    response = api.post("/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml"})
    assert response.status_code == 202, response.text
    again = api.post("/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml"})
    assert again.status_code == 409 and again.json()["code"] == "ConflictJobError"
    listed = api.get("/api/v2/jobs", params={"username": "admin", "state": "WAITING"}).json()
    assert [j["name"] for j in listed] == ["hello-world-job"]
    assert listed[0]["totalGpuNumber"] == 1 and listed[0]["virtualCluster"] == "default"
    counted = api.get("/api/v2/jobs", params={"withTotalCount": "true", "limit": 1}).json()
    assert counted["totalCount"] == 1
    detail = api.get("/api/v2/jobs/admin~hello-world-job").json()
    assert detail["jobStatus"]["state"] == "WAITING"
    assert detail["taskRoles"] == {}
    config = api.get("/api/v2/jobs/admin~hello-world-job/config")
    assert "hunter2" not in config.text
    assert yaml.safe_load(config.text)["secrets"] == {"key": "******"}
    stop = api.put("/api/v2/jobs/admin~hello-world-job/executionType", json={"value": "STOP"})
    assert stop.status_code == 202
    assert api.get("/api/v2/jobs/admin~hello-world-job").json()["jobStatus"]["state"] == "STOPPED"
    assert api.get("/api/v2/jobs/admin~nope").status_code == 404


def test_openpai_invalid_protocol_is_400(api: TestClient) -> None:
    response = api.post("/api/v2/jobs", content="protocolVersion: 2\nname: x\ntype: job\n")
    assert response.status_code == 400
    assert response.json()["code"] == "InvalidParametersError"  # OpenPAI's code list has no other
    assert any(p["path"] == "taskRoles" for p in response.json()["problems"])


def test_per_type_gpu_guarantees_are_checked_against_the_cluster(
    api: TestClient, home: Path
) -> None:
    node = {
        "name": "k",
        "address": "127.0.0.1",
        "cpu_millis": 4000,
        "memory_mib": 4096,
        "gpu_indices": [0, 1, 2, 3],
        "gpu_type": "K80",
        "port_low": 20000,
        "port_high": 21000,
    }
    api.post(
        "/api/v1/agent/report", json={"agent_id": "a", "nodes": [node]}, headers=agent_headers(home)
    )
    ok = api.post(
        "/api/v1/virtual-clusters/v", json={"guarantee_gpu": 3, "guarantee_gpu_by_type": {"K80": 3}}
    )
    assert ok.status_code == 201 and ok.json()["gpuByType"] == {"K80": 3}
    too_many = api.post(
        "/api/v1/virtual-clusters/w",
        json={"guarantee_gpu": 1, "guarantee_gpu_by_type": {"A100": 1}},
    )
    assert too_many.status_code == 400 and "A100" in too_many.json()["message"]
