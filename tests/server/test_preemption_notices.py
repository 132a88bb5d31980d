"""Preemption notices (docs/cloud.md) on the server, in process: a report whose node carries a
notice drains the node and requeues its job (SIGTERM, the kill grace, then back in the queue
keeping its place), once per notice; and the agent's reading of Azure's Scheduled Events."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from fastapi.testclient import TestClient

from shoal.agent.scheduled_events import ScheduledEvents, notice_in
from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.settings import ServerSettings
from tests.server.test_api import agent_headers
from tests.server.test_fencing import node_body, orders, running, submit

AZURE = {
    "DocumentIncarnation": 2,
    "Events": [
        {
            "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
            "EventType": "Preempt",
            "ResourceType": "VirtualMachine",
            "Resources": ["cpu-1a2b3c4d"],
            "EventStatus": "Scheduled",
            "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
            "Description": "",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }
    ],
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def ctx(home: Path) -> ServerContext:
    return prepare(ServerSettings(home=home, node_timeout_s=30, kill_grace_s=10))


@pytest.fixture
def api(home: Path, ctx: ServerContext) -> Iterator[TestClient]:
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def report_with(api: TestClient, home: Path, notice: dict[str, Any] | None, **extra: Any) -> None:
    body = {"agent_id": "a", "nodes": [{**node_body("n0"), "preemption": notice}], **extra}
    answer = api.post("/api/v1/agent/report", json=body, headers=agent_headers(home))
    assert answer.status_code == 200, answer.text


def test_a_notice_drains_the_node_and_requeues_its_job_once(
    api: TestClient,
    home: Path,
    ctx: ServerContext,
) -> None:
    report_with(api, home, None)
    job = submit(api, "spot")
    assert run_cycle(ctx) == 1
    (launch,) = orders(api, home, ["n0"])["launch"]
    report_with(api, home, None, running=[running(launch["attempt_id"], 0)])
    notice = {"event_id": "ev-1", "not_before": 1_700_000_000.0}
    report_with(api, home, notice, running=[running(launch["attempt_id"], 0)])
    node = next(n for n in api.get("/api/v1/nodes").json() if n["name"] == "n0")
    assert node["hold"] == "DRAINING" and node["schedulable"] is False
    assert orders(api, home, ["n0"])["kill"] == [launch["attempt_id"]]
    events = api.get(f"/api/v1/jobs/{job}/events").json()
    assert any("preempted by its cloud" in e["message"] for e in events)
    report_with(api, home, notice, running=[running(launch["attempt_id"], 0)])  # said again
    kinds = [e["kind"] for e in api.get("/api/v1/nodes/n0/events").json()]
    assert kinds.count("cloud.preempt-notice") == 1
    exited = [
        {"attempt_id": launch["attempt_id"], "exit_code": None, "signal": 15, "finished_at": 2.0}
    ]
    report_with(api, home, notice, exited=exited)
    detail = api.get(f"/api/v1/jobs/{job}").json()
    assert detail["state"] == "WAITING" and detail["retries"]["resource"] == 1
    messages = [e["message"] for e in api.get(f"/api/v1/jobs/{job}/events").json()]
    assert any("after its node n0 was preempted by its cloud" in m for m in messages)
    audit = api.get("/api/v1/audit", params={"action": "cloud.preempt-notice"}).json()
    assert audit[0]["actor"] == "node:n0"


def test_azure_scheduled_events_are_read_for_this_machine_only() -> None:
    notice = notice_in(AZURE, ["cpu-1a2b3c4d"])
    assert notice is not None and notice.event_id.startswith("602d9444")
    assert notice.not_before == 1474309787.0
    assert notice_in(AZURE, ["another-vm"]) is None
    freeze = {"Events": [{**AZURE["Events"][0], "EventType": "Freeze"}]}  # type: ignore[dict-item]
    assert notice_in(freeze, ["cpu-1a2b3c4d"]) is None
    assert notice_in({"DocumentIncarnation": 1, "Events": []}, ["cpu-1a2b3c4d"]) is None


class _Metadata(http.server.BaseHTTPRequestHandler):
    document: ClassVar[dict[str, Any]] = {"Events": []}
    headers_seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).headers_seen.append(self.headers.get("Metadata", ""))
        body = json.dumps(type(self).document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def metadata_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metadata/scheduledevents"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_agent_reads_the_endpoint_with_azures_header() -> None:
    for url in metadata_server():
        events = ScheduledEvents(url, ["cpu-1a2b3c4d"])
        with httpx.Client(headers={"Metadata": "true"}) as http_client:
            events.read_once(http_client)
            assert events.notice is None
            _Metadata.document = AZURE
            events.read_once(http_client)
        assert events.notice is not None and events.notice.event_id.startswith("602d9444")
        assert set(_Metadata.headers_seen) == {"true"}
