"""The scheduler process imports only what it schedules with (issue #29 item 4: the API process
and it share one memory budget). Its entry is started the way the server starts it (a child on a
socket pair, ``python -m shoal.server.scheduler_main FD``), schedules a job, loses a silent node,
stops, and then says which modules it loaded: no web framework, no routers, no OpenPAI views, no
migrations, no spec loader, no PKI. Not timed or measured: bench/api.py measures the memory."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.scheduler_link import STOP, WAKE
from shoal.server.settings import ServerSettings
from shoal.store.models import Job, Node, NodeEventRow
from tests.server.test_fencing import report, submit

# What serves HTTP, changes settings, checks specs or signs certificates: the API process's
NOT_IN_SCHEDULER = [
    "fastapi",
    "starlette",
    "uvicorn",
    "anyio",
    "httpx",
    "alembic",
    "mako",
    "pygments",
    "cryptography",
    "yaml",
    "shoal.server.app",
    "shoal.server.routers",
    "shoal.server.openpai",
    "shoal.server.web",
    "shoal.server.proxy",
    "shoal.server.auth",
    "shoal.server.ca",
    "shoal.pki",
    "shoal.spec.loader",
    "shoal.server.services.agents",
    "shoal.server.services.joining",
    "shoal.server.services.submission",
    "shoal.server.services.users",
    "shoal.server.services.vcs",
    "shoal.server.services.node_life",
]
# The child's entry run as ``-m`` runs it, then the modules it loaded, on stdout
PROBE = """
import json, runpy, sys
sys.argv = ["shoal.server.scheduler_main", sys.argv[1]]
code = 0
try:
    runpy.run_module("shoal.server.scheduler_main", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
print("\\n@@" + json.dumps(sorted(sys.modules)))
sys.exit(code)
"""


@pytest.fixture
def ctx(tmp_path: Path) -> ServerContext:
    return prepare(ServerSettings(home=tmp_path / "home", node_timeout_s=30, kill_grace_s=10))


@pytest.fixture
def api(ctx: ServerContext) -> Iterator[TestClient]:
    token = (ctx.settings.home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


class Child:
    """The scheduler process, started on a socket pair as ``SchedulerProcess._spawn`` does."""

    def __init__(self, settings: ServerSettings) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-c", PROBE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdout=subprocess.PIPE,
                text=True,
            )
        self.link = Connection(ours.detach())
        self.link.send(("settings", settings))
        self.link.send(WAKE)

    def wait_for(self, kind: str, timeout_s: float = 30.0) -> Any:
        """The next message of ``kind`` (others are skipped)."""
        while self.link.poll(timeout_s):
            message = self.link.recv()
            if message[0] == kind:
                return message
        raise AssertionError(f"the scheduler process sent no {kind!r} in {timeout_s} s")

    def stop(self) -> set[str]:
        """Ask it to stop; the modules it had loaded."""
        self.link.send(STOP)
        out, _ = self.process.communicate(timeout=30)
        self.link.close()
        assert self.process.returncode == 0, out
        marker = out.rfind("\n@@")
        assert marker >= 0, out
        return set(json.loads(out[marker + 3 :]))

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=30)
        self.link.close()


def _node_state(ctx: ServerContext, name: str) -> str | None:
    with ctx.db.read() as session:
        node = session.get(Node, name)
        return None if node is None else node.state


def test_the_scheduler_process_schedules_without_the_api_s_modules(
    api: TestClient, ctx: ServerContext
) -> None:
    report(api, ctx.settings.home, ["n1"])  # 2 GPUs
    placed = submit(api, "placed", gpu=2)
    waiting = submit(api, "waiting", gpu=2)
    child = Child(ctx.settings)
    try:
        child.wait_for("ready")
        assert child.wait_for("news")[1] == ["n1"]  # the launch of ``placed``
        with ctx.db.read() as session:
            states = {row.id: row.state for row in session.execute(select(Job.id, Job.state))}
        assert states == {placed: "RUNNING", waiting: "WAITING"}
        # n1's agent falls silent: the scheduler's next cycle loses it and its task
        with ctx.db.write() as session:
            session.execute(update(Node).where(Node.name == "n1").values(last_seen=0.0))
        child.link.send(WAKE)
        deadline = time.monotonic() + 30
        while _node_state(ctx, "n1") != "NOT_READY":
            assert time.monotonic() < deadline, "the scheduler process never lost node n1"
            time.sleep(0.05)
        with ctx.db.read() as session:
            kinds = session.scalars(select(NodeEventRow.kind).where(NodeEventRow.node == "n1"))
            assert "heartbeats_missed" in set(kinds)
            assert session.get(Job, placed).state != "RUNNING"  # type: ignore[union-attr]
        loaded = child.stop()
    finally:
        child.kill()
    assert "shoal.server.loop" in loaded and "sqlalchemy" in loaded  # the probe saw its imports
    heavy = {m for m in loaded if any(m == h or m.startswith(f"{h}.") for h in NOT_IN_SCHEDULER)}
    assert not heavy, f"the scheduler process imported {sorted(heavy)}"
