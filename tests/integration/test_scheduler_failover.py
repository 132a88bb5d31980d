"""Two `shoal server start` processes, each with its own home, on one store (SQLite file, and a
PostgreSQL database when a throwaway cluster can be made): exactly one scheduler runs cycles
(docs/postgresql.md, "One scheduler"). Stopping the leader's scheduler process (SIGSTOP) past
its lease hands scheduling to the other server within the target; the stopped one, continued,
finds its lease taken and applies nothing; killing the new leader hands it back."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from shoal.client import ShoalClient
from shoal.local.supervisor import free_port
from shoal.store.db import Database, home_store
from shoal.store.models import SchedulerLeaseRow
from tests.envs import without_shoal
from tests.integration.conftest import port_base
from tests.postgresql import PgCluster, start_cluster, unusable

pytestmark = pytest.mark.slow
TAKEOVER_S = 10.0  # the target: the lease (6 s) runs out, the other asks within 2 s
INFEASIBLE = "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{gpu: 64}}\n    command: x\n"


@dataclass
class Server:
    home: Path
    process: subprocess.Popen[bytes]
    api: httpx.Client
    port: int

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def scheduler_pid(self) -> int:
        """The server's scheduler process (a child running shoal.server.scheduler_main)."""
        for child in psutil.Process(self.process.pid).children():
            if "shoal.server.scheduler_main" in " ".join(child.cmdline()):
                return child.pid
        raise AssertionError(f"no scheduler process under server {self.process.pid}")

    def log(self) -> str:
        return (self.home.parent / f"{self.home.name}.log").read_text(errors="replace")


def _shoal(*args: str) -> list[str]:
    return [sys.executable, "-m", "shoal", *args]


def _start(root: Path, name: str, store: str, ca_of: Path | None = None) -> Server:
    """`shoal server init` then `start` with home ROOT/NAME on ``store``; ``ca_of``: the home
    whose CA this server shares (copied before init, as docs/postgresql.md says)."""
    home, env = root / name, without_shoal(os.environ)
    if ca_of is not None and not (home / "pki").exists():
        (home / "pki").mkdir(parents=True, mode=0o700)
        for part in ("ca.crt", "ca.key"):
            shutil.copy2(ca_of / "pki" / part, home / "pki" / part)
    init = subprocess.run(
        _shoal("server", "init", "--home", str(home), "--host", "127.0.0.1", "--store", store),
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert init.returncode == 0, init.stdout + init.stderr
    return _run(home, env)


def _run(home: Path, env: dict[str, str], port: int | None = None) -> Server:
    """`shoal server start` for an initialised home (again: on the port it had)."""
    port = port or free_port()
    with open(home.parent / f"{home.name}.log", "ab") as log:
        process = subprocess.Popen(
            _shoal("server", "start", "--home", str(home), "--host", "127.0.0.1",
                   "--port", str(port), "--proxy-port", "0"),
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    token = (home / "admin.token").read_text().strip()
    trust = ssl.create_default_context(cafile=str(home / "pki" / "ca.crt"))
    api = httpx.Client(
        base_url=f"https://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {token}"},
        verify=trust,
        timeout=30,
    )
    server = Server(home, process, api, port)
    _until(lambda: _healthy(server), 60, f"server {home.name} answering")
    return server


def _healthy(server: Server) -> bool:
    assert server.process.poll() is None, f"the server exited:\n{server.log()}"
    try:
        return server.api.get("/api/v1/health").status_code == 200
    except httpx.TransportError:
        return False


def _stop(server: Server) -> None:
    """SIGTERM to the server's process group (SIGCONT first: a stopped scheduler hears it
    then), SIGKILL to whatever of it is left, the scheduler process of a killed server too."""
    server.api.close()
    group = server.process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGCONT)
        os.killpg(group, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    server.process.wait(timeout=10)


def _until(check: object, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < timeout_s, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.1)
    return time.monotonic() - started


def _lease(store: str) -> tuple[str, int]:
    db = Database(store)
    try:
        with db.read() as session:
            row = session.get(SchedulerLeaseRow, "scheduler")
            return ("", 0) if row is None else (row.holder, row.token)
    finally:
        db.dispose()


def _reason(server: Server, job_id: str) -> str:
    """The code the scheduler wrote for why the job waits ("": none written yet)."""
    answer = server.api.get(f"/api/v1/jobs/{job_id}/pending-reason").json()
    return str(answer.get("code") or "")


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.long), "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    reason = unusable()
    if reason is not None:
        pytest.skip(reason)
    cluster: PgCluster = start_cluster()
    try:
        yield cluster.new_database("failover")
    finally:
        cluster.stop()


def test_a_stopped_leader_hands_scheduling_over_and_applies_nothing_when_continued(
    tmp_path: Path, store: str
) -> None:
    first = _start(tmp_path, "first", store)
    second: Server | None = None
    try:
        url = home_store(first.home)
        _until(lambda: _lease(url)[0].endswith(":" + str(first.home)), 30, "first leads")
        second = _start(tmp_path, "second", store)
        time.sleep(3)  # the second asks for the lease and is told no
        holder, token = _lease(url)
        assert holder.endswith(":" + str(first.home)) and token == 1, (holder, token)

        paused = first.scheduler_pid()
        os.kill(paused, signal.SIGSTOP)
        try:
            took = _until(
                lambda: _lease(url)[0].endswith(":" + str(second.home)),
                TAKEOVER_S + 5,  # margin for a loaded 2-core machine; the time is reported
                "the second server takes the lease",
            )
            print(f"takeover after SIGSTOP: {took:.1f} s (target {TAKEOVER_S:.0f} s)")
            assert _lease(url)[1] == 2
            made = second.api.post("/api/v1/jobs", json={"spec": INFEASIBLE.format(name="b")})
            assert made.status_code == 201, made.text
            job_id = made.json()[0]["id"]
            _until(lambda: _reason(second, job_id) != "", 15, "the new leader's reason")
        finally:
            os.kill(paused, signal.SIGCONT)
        _until(lambda: "scheduler lease was taken over" in first.log(), 15, "the first hears")
        holder, token = _lease(url)  # continued, the first took nothing back
        assert holder.endswith(":" + str(second.home)) and token == 2, (holder, token)

        second.process.send_signal(signal.SIGKILL)  # the new leader dies: the first takes over
        second.process.wait(timeout=10)
        took = _until(
            lambda: _lease(url)[0].endswith(":" + str(first.home)),
            TAKEOVER_S + 5,
            "the first server takes the lease back",
        )
        print(f"takeover after kill -9: {took:.1f} s")
        assert _lease(url)[1] == 3
    finally:
        if second is not None:
            _stop(second)
        _stop(first)


@pytest.fixture
def pg_store_or_sqlite(tmp_path: Path) -> Iterator[str]:
    """The store of the agent's test: PostgreSQL when a throwaway cluster can be made here."""
    if unusable() is not None:
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    cluster = start_cluster()
    try:
        yield cluster.new_database("agents")
    finally:
        cluster.stop()


TASK = "version: 1\nname: {name}\nroles:\n  w:\n    command: {command}\n"


def _agent(root: Path, servers: str, first: Server) -> subprocess.Popen[bytes]:
    """Node n1 joined through the first server with both servers' URLs, its agent running."""
    env = without_shoal(os.environ)
    env.update(
        SHOAL_URL=first.url,
        SHOAL_TOKEN=(first.home / "admin.token").read_text().strip(),
        SHOAL_CA=str(first.home / "pki" / "ca.crt"),
        SHOAL_CONFIG=str(root / "config.yaml"),
    )
    made = subprocess.run(_shoal("node", "token", "create", "--ttl", "10m"), env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1].split("--token ", 1)[1].split()[0]
    joined = subprocess.run(
        _shoal("agent", "join", servers, "--token", token, "--name", "n1", "--home",
               str(root / "n1"), "--port-base", str(port_base()), "--cpus", "2"),
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert joined.returncode == 0, joined.stdout + joined.stderr
    with open(root / "n1.log", "ab") as log:
        return subprocess.Popen(
            _shoal("agent", "run", "--home", str(root / "n1")),
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip


@pytest.mark.long  # tests/multihost/test_two_servers.py covers it (and more) in the default run
def test_an_agent_and_a_client_of_both_servers_survive_the_leaders_kill_9(
    tmp_path: Path, pg_store_or_sqlite: str
) -> None:
    """The issue's test on loopback: two servers sharing a CA and a store, one agent and one
    client given both URLs. kill -9 of the leading server while a task runs: the other takes
    over within the target, the agent carries on with it, the task finishes once with its whole
    log, new work runs, and the killed server, started again, follows."""
    store = pg_store_or_sqlite
    first = _start(tmp_path, "first", store)
    second: Server | None = None
    agent: subprocess.Popen[bytes] | None = None
    client: ShoalClient | None = None
    try:
        second = _start(tmp_path, "second", store, ca_of=first.home)
        url = home_store(first.home)
        _until(lambda: _lease(url)[0].endswith(":" + str(first.home)), 30, "first leads")
        both = f"{first.url},{second.url}"
        agent = _agent(tmp_path, both, first)
        token = (first.home / "admin.token").read_text().strip()
        client = ShoalClient(both, token, timeout=30, ca=str(first.home / "pki" / "ca.crt"))
        _until(lambda: any(n["state"] == "READY" for n in client.nodes()), 60, "n1 ready")
        command = "echo begin; sleep 12; echo end"
        job = client.submit(TASK.format(name="long", command=command))[0]["id"]
        _until(lambda: client.job(job)["state"] == "RUNNING", 60, "the task runs")

        os.killpg(first.process.pid, signal.SIGKILL)  # the leader and its scheduler process
        first.process.wait(timeout=10)
        took = _until(
            lambda: _lease(url)[0].endswith(":" + str(second.home)),
            TAKEOVER_S + 5,
            "the second server takes the lease",
        )
        print(f"takeover after kill -9 of the leading server: {took:.1f} s")
        done = client.wait(job, timeout_s=90)  # through the second server now
        assert done["state"] == "SUCCEEDED", done
        assert done["attempt"] == 1, done  # never a second attempt
        chunk = client.logs(job, role="w")
        assert chunk["data"].split() == ["begin", "end"] and chunk["attempt"] == 1, chunk

        after = client.submit(TASK.format(name="after", command="echo again"))[0]["id"]
        assert client.wait(after, timeout_s=90)["state"] == "SUCCEEDED"

        first = _run(first.home, without_shoal(os.environ), first.port)  # started again
        time.sleep(3)
        holder, _ = _lease(url)
        assert holder.endswith(":" + str(second.home)), "the restarted server follows"
    finally:
        if client is not None:
            client.close()
        if agent is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent.pid, signal.SIGTERM)
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait(timeout=10)
        if second is not None:
            _stop(second)
        _stop(first)
