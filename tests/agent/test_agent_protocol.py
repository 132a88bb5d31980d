"""The agent refuses a server of another protocol version: it logs one error naming both
versions, stops calling the server (no retry loop) and ``shoal agent`` ends with status 2.
The servers here are stand-ins (real HTTP on a port of the test block) that answer as a server
of the given version would."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shoal.agent.identity import Connection
from shoal.agent.main import Agent
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION, mismatch_message
from tests.integration.conftest import port_base

ANSWERS = {
    "/api/v1/agent/report": {"acked": [], "kill": [], "lease_s": 30.0},
    "/api/v1/agent/orders": {"launch": [], "kill": []},
    "/api/v1/agent/logs": {"sizes": {}},
}


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, version: str | None, status: int = 200) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.version, self.status = version, status
        self.calls: list[dict[str, str]] = []
        self.called = threading.Condition()

    def wait_for_calls(self, count: int) -> None:
        with self.called:
            assert self.called.wait_for(lambda: len(self.calls) >= count, timeout=30)


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.server.called:
            self.server.calls.append(dict(self.headers))
            self.server.called.notify_all()
        body = json.dumps(ANSWERS.get(self.path, {})).encode()
        self.send_response(self.server.status)
        if self.server.version is not None:
            self.send_header(PROTOCOL_HEADER, self.server.version)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve(version: str | None, status: int = 200, slot: int = 0) -> Iterator[StandIn]:
    server = StandIn(port_base() + 3970 + slot, version, status)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def agent_home(tmp_path: Path) -> Path:
    return tmp_path / "agent"


def run_agent(server: StandIn, home: Path) -> Agent:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    agent = Agent(Connection.bearer(url, "shoal_test"), home, [], "test-agent")
    agent.start()
    return agent


@pytest.mark.parametrize(
    ("version", "status", "message"),
    [
        ("3", 200, "the agent speaks protocol 2, the server speaks protocol 3: upgrade the agent"),
        (None, 200, "the server speaks no protocol version (it predates protocol 1): upgrade the"),
        ("3", 426, "the agent speaks protocol 2, the server speaks protocol 3: upgrade the agent"),
    ],
)
def test_a_server_of_another_version_is_refused_once_and_not_called_again(
    version: str | None,
    status: int,
    message: str,
    agent_home: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for server in serve(version, status):
        agent = run_agent(server, agent_home)
        try:
            assert agent.must_stop.wait(30)
            assert agent.refusal is not None and message in agent.refusal
            for thread in agent._threads[1:]:  # the reporter and the order taker end
                thread.join(timeout=30)
                assert not thread.is_alive()
            calls = len(server.calls)
            assert calls <= 2  # one report, one order poll: nothing retried
        finally:
            agent.stop(0.1)
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and message in errors[0].getMessage()


def test_a_server_of_the_same_version_is_served(agent_home: Path) -> None:
    for server in serve(str(PROTOCOL_VERSION)):
        agent = run_agent(server, agent_home)
        try:
            server.wait_for_calls(4)  # reports and order polls go on
            assert not agent.must_stop.is_set() and agent.refusal is None
        finally:
            agent.stop(0.1)
        assert {c[PROTOCOL_HEADER] for c in server.calls} == {str(PROTOCOL_VERSION)}


def test_shoal_agent_stops_with_status_2_naming_both_versions(tmp_path: Path) -> None:
    token = tmp_path / "agent.token"
    token.write_text("shoal_test\n")
    for server in serve("3", slot=1):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "shoal",
                "agent",
                "--server",
                f"http://127.0.0.1:{server.server_address[1]}",
                "--token-file",
                str(token),
                "--home",
                str(tmp_path / "agent"),
                "--port-base",
                str(port_base() + 3000),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert mismatch_message(str(PROTOCOL_VERSION), "3") in " ".join(done.stderr.split())
