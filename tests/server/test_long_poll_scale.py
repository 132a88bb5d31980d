"""Many agents long-polling for orders do not stall the API, and news wakes only its node's agent.

A real server (uvicorn in a thread, on a free loopback port) and 200 simulated agents, each with
its own node, long-polling at once with async httpx clients. While they wait, ordinary API calls
(list jobs, submit) must answer; the job placed on one node must wake that node's agent only."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import make_server, prepare
from shoal.server.context import ServerContext
from shoal.server.settings import ServerSettings

AGENTS = 200
# the polls' wait: longer than the API calls' bound, so a stall shows as a timeout, and longer than
# parking all of them may take on two busy cores (it took over 15 s under a full test run), so
# none has answered and gone before the last one parks
WAIT_S = 30.0  # the most the protocol allows
PARK_S = WAIT_S - 5
API_BOUND_S = 10.0  # generous: "answers at all", not a performance figure
JOB = "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{cpu: 1}}\n    command: echo hi\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(what: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, ServerContext]]:
    settings = ServerSettings(home=tmp_path / "home", port=free_port(), node_timeout_s=600)
    ctx = prepare(settings)
    running = make_server(ctx)
    thread = threading.Thread(target=running.run, name="uvicorn", daemon=True)
    thread.start()
    wait_for(lambda: running.started)
    yield settings.url, ctx
    running.close()
    thread.join(timeout=20)


def node(i: int) -> dict[str, Any]:
    return {
        "name": f"n{i}",
        "address": "127.0.0.1",
        "cpu_millis": 2000,
        "memory_mib": 2048,
        "gpu_indices": [],
        "port_low": 20000,
        "port_high": 21000,
    }


async def register(agents: httpx.AsyncClient, i: int) -> None:
    body = {"agent_id": f"a{i}", "nodes": [node(i)]}
    response = await agents.post("/api/v1/agent/report", json=body)
    assert response.status_code == 200, response.text


async def poll(agents: httpx.AsyncClient, i: int) -> dict[str, Any]:
    body = {"agent_id": f"a{i}", "nodes": [f"n{i}"], "wait_s": WAIT_S}
    response = await agents.post("/api/v1/agent/orders", json=body)
    assert response.status_code == 200, response.text
    orders: dict[str, Any] = response.json()
    return orders


async def answers(api: httpx.AsyncClient) -> None:
    """Ordinary API calls answer (a stalled API raises httpx.ReadTimeout here)."""
    for _ in range(3):
        response = await api.get("/api/v1/jobs")
        assert response.status_code == 200, response.text


async def until_parked(ctx: ServerContext, count: int) -> None:
    deadline = time.monotonic() + PARK_S
    while ctx.agent_work.waiting() < count:
        assert time.monotonic() < deadline, f"only {ctx.agent_work.waiting()} polls are waiting"
        await asyncio.sleep(0.05)


async def scenario(url: str, ctx: ServerContext) -> None:
    home = ctx.settings.home
    agent_token = (home / "agent.token").read_text().strip()
    admin_token = (home / "admin.token").read_text().strip()
    headers = {"Authorization": f"Bearer {agent_token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
    limits = httpx.Limits(max_connections=AGENTS + 10, max_keepalive_connections=AGENTS + 10)
    async with (
        httpx.AsyncClient(
            base_url=url, headers=headers, timeout=WAIT_S + API_BOUND_S, limits=limits
        ) as agents,
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=API_BOUND_S
        ) as api,
    ):
        for start in range(0, AGENTS, 20):
            await asyncio.gather(*(register(agents, i) for i in range(start, start + 20)))
        polls = {f"n{i}": asyncio.create_task(poll(agents, i)) for i in range(AGENTS)}
        await until_parked(ctx, AGENTS)
        await answers(api)
        submitted = await api.post("/api/v1/jobs", json={"spec": JOB.format(name="one")})
        assert submitted.status_code == 201, submitted.text
        done, _ = await asyncio.wait(
            polls.values(), timeout=API_BOUND_S, return_when=asyncio.FIRST_COMPLETED
        )
        assert len(done) == 1, f"{len(done)} polls answered (none: the placement woke nobody)"
        job = (await api.get(f"/api/v1/jobs/{submitted.json()[0]['id']}")).json()
        (placed,) = {task["node"] for task in job["tasks"]}
        woken = polls.pop(placed)
        assert woken in done
        assert [order["node"] for order in woken.result()["launch"]] == [placed]
        await answers(api)  # meanwhile a wrongly woken poll would have answered
        assert not [name for name, task in polls.items() if task.done()], "others were woken"
        for orders in await asyncio.gather(*polls.values()):  # each waits out its wait_s
            assert orders == {"launch": [], "kill": [], "exec": [], "tunnels": []}


def test_200_long_polls_leave_the_api_answering_and_news_wakes_only_its_node(
    server: tuple[str, ServerContext],
) -> None:
    url, ctx = server
    asyncio.run(scenario(url, ctx))
