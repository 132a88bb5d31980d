"""Exec sessions on the server, in process (real SQLite, the real app, the test playing the agent
over its real WebSocket): the relay both ways and its filtering, every refusal with its close
code and error frame, an agent that does not attach, an agent of another node, the audit log
(its visibility, sessions an earlier server left open), and migration 0022 both ways."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from shoal.protocol import ExecOrder, OrdersResponse, exec_path
from shoal.server.app import create_app, prepare
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.exec_hub import ExecHub
from shoal.server.loop import run_cycle
from shoal.server.routers import exec as exec_routes
from shoal.server.services.exec_sessions import check_attach
from shoal.server.settings import ServerSettings
from shoal.store.models import ExecSessionRow
from tests.server.migrations import MigrationSteps
from tests.server.test_api import agent_headers
from tests.server.test_fencing import orders, report, running, submit, task_row


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def ctx(home: Path) -> ServerContext:
    return prepare(ServerSettings(home=home, node_timeout_s=30, kill_grace_s=10))


@pytest.fixture
def api(home: Path, ctx: ServerContext) -> Iterator[TestClient]:
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:  # one event loop for all
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def running_job(api: TestClient, home: Path, ctx: ServerContext, name: str = "sleepy") -> str:
    """A job whose one task (role w) runs on node n0, as its agent reported."""
    report(api, home, ["n0"])
    job_id = submit(api, name)
    run_cycle(ctx)
    (launch,) = orders(api, home, ["n0"])["launch"]
    report(api, home, ["n0"], running=[running(launch["attempt_id"], 0)])
    assert task_row(ctx, job_id)[2] == "RUNNING"
    return job_id


def exec_order(api: TestClient, home: Path) -> dict[str, Any]:
    """The session the agent of n0 is told to attach to (once the user's side offered it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = orders(api, home, ["n0"])["exec"]
        if found:
            (order,) = found
            return dict(order)
        time.sleep(0.01)
    raise AssertionError("no exec order within 10 s")


def refusal(session: Any) -> tuple[dict[str, Any], int, str]:
    """The error frame and the close (code, reason) that follow a refusal."""
    error = session.receive_json()
    with pytest.raises(WebSocketDisconnect) as closed:
        session.receive_text()
    return error, closed.value.code, closed.value.reason


def audit(api: TestClient, **params: Any) -> list[dict[str, Any]]:
    response = api.get("/api/v1/exec-sessions", params=params)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()
    return rows


def ended(api: TestClient) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = audit(api)
        if rows and rows[0]["endReason"] is not None:
            return rows[0]
        time.sleep(0.02)
    raise AssertionError(f"the session's end was not recorded: {audit(api)}")


def test_a_session_is_relayed_both_ways_and_its_start_and_end_are_audited(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    job_id = running_job(api, home, ctx)
    url = f"/api/v1/jobs/{job_id}/exec?tty=true&cols=120&rows=40&cmd=sh&cmd=-c&cmd=cat"
    with api.websocket_connect(url) as user:
        user.send_bytes(b"\x00typed early")  # before the agent attached: kept for it
        order = exec_order(api, home)
        assert order["argv"] == ["sh", "-c", "cat"] and order["tty"] is True
        assert (order["cols"], order["rows"]) == (120, 40)
        assert order["attempt_id"] == task_row(ctx, job_id)[0]
        with api.websocket_connect(
            exec_path(order["session_id"]), headers=agent_headers(home)
        ) as agent:
            assert agent.receive_json() == {"type": "attached"}
            assert agent.receive_bytes() == b"\x00typed early"
            user.send_bytes(b"\x01not stdin")  # dropped: a user writes only to stdin
            user.send_json({"type": "exit", "code": 0})  # dropped: not the user's to say
            user.send_json({"type": "resize", "cols": 100, "rows": 30})
            user.send_bytes(b"\x00more")
            assert agent.receive_json() == {"type": "resize", "cols": 100, "rows": 30}
            assert agent.receive_bytes() == b"\x00more"
            agent.send_bytes(b"\x01out")
            agent.send_bytes(b"\x02err")
            agent.send_json({"type": "exit", "code": 3, "signal": None})
            assert user.receive_bytes() == b"\x01out"
            assert user.receive_bytes() == b"\x02err"
            assert user.receive_json() == {"type": "exit", "code": 3, "signal": None}
            with pytest.raises(WebSocketDisconnect) as closed:
                user.receive_text()
            assert closed.value.code == 1000
    row = ended(api)
    assert (row["user"], row["job"], row["role"], row["index"], row["node"]) == (
        "admin", job_id, "w", 0, "n0",
    )  # fmt: skip
    assert row["attempt"] == order["attempt_id"] and row["argv"] == ["sh", "-c", "cat"]
    assert row["tty"] is True and row["exitCode"] == 3 and row["endReason"] == "exited"
    assert row["endedAt"] >= row["startedAt"] and row["durationS"] is not None
    assert not ctx.exec_hub.live_ids()


def test_the_default_command_is_a_shell_in_the_first_roles_first_task(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    job_id = running_job(api, home, ctx)
    with api.websocket_connect(f"/api/v1/jobs/{job_id}/exec") as user:
        order = exec_order(api, home)
        assert order["argv"][:2] == ["/bin/sh", "-c"] and "bash" in order["argv"][2]
        assert order["tty"] is False and order["attempt_id"] == task_row(ctx, job_id)[0]
        user.close()
    assert ended(api)["endReason"] == "closed-by-user"  # before its agent came


def test_the_user_closing_ends_the_agents_side_and_is_audited(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    job_id = running_job(api, home, ctx)
    with api.websocket_connect(f"/api/v1/jobs/{job_id}/exec?cmd=sh") as user:
        order = exec_order(api, home)
        with api.websocket_connect(
            exec_path(order["session_id"]), headers=agent_headers(home)
        ) as agent:
            assert agent.receive_json() == {"type": "attached"}
            user.close()
            with pytest.raises(WebSocketDisconnect) as closed:
                agent.receive_text()
            assert closed.value.code == 1000  # the agent ends the command on this
    row = ended(api)
    assert row["endReason"] == "closed-by-user" and row["exitCode"] is None


def test_an_agent_that_loses_its_connection_is_reported_to_the_user(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    job_id = running_job(api, home, ctx)
    with api.websocket_connect(f"/api/v1/jobs/{job_id}/exec?cmd=sh") as user:
        order = exec_order(api, home)
        with api.websocket_connect(
            exec_path(order["session_id"]), headers=agent_headers(home)
        ) as agent:
            assert agent.receive_json() == {"type": "attached"}
            agent.close()
        error, code, reason = refusal(user)
    assert error["type"] == "error" and error["code"] == "AgentLostError"
    assert "node n0" in error["message"] and (code, reason) == (4502, "AgentLostError")
    assert ended(api)["endReason"] == "agent-lost"


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("task=w/x", "task: expected ROLE/INDEX"),
        ("tty=maybe", "tty: expected true or false"),
        ("tty=true&cols=0", "cols: expected a number from 1 to 1000"),
        ("cmd=", "cmd: give a command"),
    ],
)
def test_bad_parameters_are_refused_naming_the_parameter(
    api: TestClient, home: Path, ctx: ServerContext, query: str, problem: str
) -> None:
    job_id = running_job(api, home, ctx)
    with api.websocket_connect(f"/api/v1/jobs/{job_id}/exec?{query}") as user:
        error, code, _ = refusal(user)
    assert error["code"] == "InvalidParametersError" and problem in error["message"]
    assert code == 4422


def test_refusals_say_why_with_a_close_code_and_write_no_audit_row(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    job_id = running_job(api, home, ctx)
    bob = api.post("/api/v1/users", json={"name": "bob"}).json()["token"]
    cases = [
        ({"Authorization": ""}, job_id, "", 4401, "UnauthorizedUserError", "Bearer token"),
        ({"Authorization": "Bearer nope"}, job_id, "", 4401, "UnauthorizedUserError", "unknown"),
        (agent_headers(home), job_id, "", 4403, "ForbiddenUserError", "agent tokens"),
        ({"Authorization": f"Bearer {bob}"}, job_id, "", 4403, "ForbiddenUserError", "admin's"),
        ({}, "nosuch", "", 4404, "NoJobError", "no job 'nosuch'"),
        ({}, job_id, "task=ps/0", 4404, "NoTaskError", "its roles: w (0..0)"),
    ]
    for headers, job, query, code, error_code, said in cases:
        with api.websocket_connect(f"/api/v1/jobs/{job}/exec?{query}", headers=headers) as user:
            error, closed, reason = refusal(user)
        assert (closed, reason, error["code"]) == (code, error_code, error_code), error
        assert said in error["message"], error
    assert audit(api) == []


def test_a_task_that_is_not_running_is_refused_naming_its_state(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    job_id = running_job(api, home, ctx)
    attempt = task_row(ctx, job_id)[0]
    done = {"attempt_id": attempt, "exit_code": 0, "epoch": 0, "finished_at": time.time()}
    report(api, home, ["n0"], exited=[done])
    with api.websocket_connect(f"/api/v1/jobs/{job_id}/exec") as user:
        error, code, _ = refusal(user)
    assert code == 4409 and error["code"] == "TaskNotRunningError"
    assert "task w/0 of job" in error["message"] and "is SUCCEEDED" in error["message"]
    assert "shoal job logs" in error["message"]


def test_an_agent_that_does_not_attach_in_time_is_a_504_and_a_late_one_is_refused(
    api: TestClient, home: Path, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exec_routes, "EXEC_ATTACH_S", 0.2)
    job_id = running_job(api, home, ctx)
    with api.websocket_connect(f"/api/v1/jobs/{job_id}/exec") as user:
        order = exec_order(api, home)
        error, code, _ = refusal(user)
    assert code == 4504 and error["code"] == "AgentDidNotAttachError"
    assert "the agent of node n0" in error["message"]
    assert ended(api)["endReason"] == "agent-did-not-attach"
    with api.websocket_connect(exec_path(order["session_id"]), headers=agent_headers(home)) as late:
        error, code, _ = refusal(late)
    assert code == 4404 and error["code"] == "NoExecSessionError"


def test_only_agents_of_our_protocol_attach(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    token = (home / "admin.token").read_text().strip()
    for headers, code, error_code in [
        (
            {"Authorization": f"Bearer {token}", "X-Shoal-Protocol": "1"},
            4426,
            "ProtocolMismatchError",
        ),
        ({"Authorization": "Bearer nope"}, 4401, "UnauthorizedUserError"),
    ]:
        with api.websocket_connect(exec_path("abc"), headers=headers) as agent:
            error, closed, _ = refusal(agent)
        assert (closed, error["code"]) == (code, error_code)


def test_a_node_certificate_attaches_only_to_sessions_on_its_own_node() -> None:
    async def check() -> None:
        hub = ExecHub()
        order = ExecOrder(session_id="s1", attempt_id="1.1", argv=["sh"])
        live = hub.open(order, "n0")
        assert hub.take(["n1"]) == [] and hub.take(["n0"]) == [order]
        assert hub.take(["n0"]) == []  # delivered once
        other = Principal("node:n1", False, "node", node="n1")
        with pytest.raises(ApiError) as refused:
            check_attach(hub.find("s1"), other, "s1")
        assert refused.value.status == 403 and refused.value.code == "ForbiddenNodeError"
        assert "on node n0" in refused.value.message
        own = Principal("node:n0", False, "node", node="n0")
        assert check_attach(hub.find("s1"), own, "s1") is live
        local_agent = Principal("admin", True, "agent")  # local mode: one agent, every node
        assert check_attach(hub.find("s1"), local_agent, "s1") is live

    asyncio.run(check())


def test_the_audit_log_shows_users_their_own_and_admins_everyones(
    api: TestClient, home: Path, ctx: ServerContext
) -> None:
    bob = api.post("/api/v1/users", json={"name": "bob"}).json()["token"]
    with ctx.db.write() as session:
        for number, user in enumerate(["admin", "bob", "bob"]):
            session.add(
                ExecSessionRow(
                    id=f"s{number}", user=user, job_id=str(number), role="w", index=0,
                    attempt_id="1.1", node="n0", argv=["sh"], tty=False,
                    started_at=100.0 + number, ended_at=110.0 + number, exit_code=0,
                    end_reason="exited",
                )
            )  # fmt: skip
    assert [r["id"] for r in audit(api)] == ["s2", "s1", "s0"]  # newest first
    assert [r["id"] for r in audit(api, limit=1)] == ["s2"]
    assert [r["id"] for r in audit(api, user="admin")] == ["s0"]
    assert [r["id"] for r in audit(api, job="1")] == ["s1"]
    as_bob = {"Authorization": f"Bearer {bob}"}
    mine = api.get("/api/v1/exec-sessions", headers=as_bob).json()
    assert [r["id"] for r in mine] == ["s2", "s1"]
    others = api.get("/api/v1/exec-sessions", params={"user": "admin"}, headers=as_bob)
    assert others.status_code == 403 and others.json()["code"] == "ForbiddenUserError"
    assert api.get("/api/v1/exec-sessions", headers={"Authorization": ""}).status_code == 401


def test_sessions_an_earlier_server_left_open_are_closed_as_server_restarted(
    api: TestClient, ctx: ServerContext
) -> None:
    with ctx.db.write() as session:
        session.add(
            ExecSessionRow(
                id="old", user="admin", job_id="1", role="w", index=0, attempt_id="1.1",
                node="n0", argv=["sh"], tty=True, started_at=ctx.clock() - 60,
            )
        )  # fmt: skip
    (row,) = audit(api)
    assert row["endReason"] == "server-restarted" and row["exitCode"] is None
    assert row["endedAt"] is not None and row["durationS"] >= 60


def test_an_old_agent_reads_orders_without_exec_sessions() -> None:
    assert OrdersResponse.model_validate({"launch": [], "kill": []}).exec == []


def test_migration_0022_adds_and_drops_the_audit_table(tmp_path: Path) -> None:
    store = MigrationSteps(tmp_path)
    store.migrate("upgrade", "0022")
    assert "exec_sessions" in store.tables()
    store.migrate("downgrade", "0021")
    assert "exec_sessions" not in store.tables() and "jobs" in store.tables()
    store.close()
