"""OpenPAI's VS Code client against a real server on loopback (docs/openpai-compat.md, "The VS
Code client"): its three ``/api/v1`` calls, made as it makes them
(``tests/openpai_sdk/vscode_client.js``, with its own libraries), answer in OpenPAI's shapes under
``/rest-server``, OpenPAI's REST server path, while shoal's own ``/api/v1`` keeps shoal's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shoal.server.app import make_server, prepare
from shoal.server.settings import ServerSettings
from tests.integration.test_openpai_sdk import SDK_DIR, node_with_sdk

CLIENT = SDK_DIR / "vscode_client.js"
JOB_YAML = SDK_DIR / "hello-world-job.yaml"
USER, PASSWORD = "alice", "alice-vscode-1"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A server on a free loopback port: (its URL, the admin's token)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home, port=port, scheduler="thread"))
    running = make_server(ctx, log_level="error")
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not running.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running.started, "the server did not start"
        yield ctx.settings.url, (home / "admin.token").read_text().strip()
    finally:
        running.close()
        thread.join(15)
    assert not thread.is_alive()


def run_client(node: str, rest: str, job: str) -> dict[str, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}  # loopback only
    args = ["--rest", rest, "--user", USER, "--password", PASSWORD, "--job", job]
    done = subprocess.run(
        [node, str(CLIENT), *args, "--yaml", str(JOB_YAML)],
        cwd=SDK_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line["call"]: line for line in lines}


def test_the_vscode_clients_calls_answer_openpais_shapes(server: tuple[str, str]) -> None:
    node = node_with_sdk()
    url, admin = server
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}) as api:
        made = api.post("/api/v1/users", json={"name": USER, "admin": False, "password": PASSWORD})
        assert made.status_code == 201, made.text
        login = api.post("/api/v2/authn/basic/login", json={"username": USER, "password": PASSWORD})
        alice = {"Authorization": f"Bearer {login.json()['token']}"}
        text = JOB_YAML.read_text().replace("name: hello-world-job", "name: vscode-job", 1)
        submitted = api.post(
            "/api/v2/jobs", content=text, headers={**alice, "Content-Type": "text/yaml"}
        )
        assert submitted.status_code == 202, submitted.text

        calls = run_client(node, f"{url}/rest-server", "vscode-job")

        # POST /api/v1/token: OpenPAI's {user, token, admin, hasGitHubPAT}
        token = calls["token"]
        assert token["status"] == 200, token
        assert set(token["body"]) == {"user", "token", "admin", "hasGitHubPAT"}
        assert token["body"]["user"] == USER and token["body"]["admin"] is False
        # GET /api/v1/user/{user}/jobs/{name}: OpenPAI's JobDetail, and NoJobError for a free name
        detail = calls["job-detail"]
        assert detail["status"] == 200, detail
        assert detail["body"]["name"] == "vscode-job"
        assert detail["body"]["jobStatus"]["username"] == USER
        assert detail["body"]["jobStatus"]["state"] == "WAITING"
        assert set(detail["body"]) >= {"name", "jobStatus", "taskRoles"}
        free = calls["job-detail-free"]
        assert free["status"] == 404 and free["body"]["code"] == "NoJobError", free
        # the submission the client then makes, and the job list through the SDK
        assert calls["submit"]["status"] == 202, calls["submit"]
        listed = calls["list-v2"]
        assert listed["status"] == 200, listed
        assert {j["name"] for j in listed["body"]} == {"vscode-job", "vscode-job-free"}
        # GET /api/v1/jobs: the SDK's v1 client sends no token: OpenPAI's 401; with one, the list
        assert calls["list-v1"]["status"] == 401, calls["list-v1"]
        assert calls["list-v1"]["body"]["code"] == "UnauthorizedUserError"
        v1_list = calls["list-v1-token"]
        assert v1_list["status"] == 200, v1_list
        summary = next(j for j in v1_list["body"] if j["name"] == "vscode-job")
        assert summary["username"] == USER and summary["state"] == "WAITING"
        assert {"executionType", "subState", "virtualCluster", "totalGpuNumber"} <= set(summary)

        # OpenPAI's gateway health check, which the client probes when a cluster is added
        health = httpx.get(f"{url}/healthz")
        assert health.status_code == 200 and health.text == "ok"

        # shoal's own /api/v1 answers shoal's shapes, as its CLI reads them
        own = api.get("/api/v1/jobs", params={"user": "all"}, headers=alice)
        assert own.status_code == 200, own.text
        (job,) = [j for j in own.json() if j["name"] == "vscode-job"]
        assert {"id", "name", "user", "state"} <= set(job) and "jobStatus" not in job
        assert api.post("/api/v1/token", data={"username": USER}).status_code in (404, 405)
        mine = api.get(f"/api/v1/user/{USER}/jobs/vscode-job", headers=alice)
        assert mine.status_code == 404 and mine.json()["code"] == "NoApiError"
