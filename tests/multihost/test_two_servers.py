"""Issue #28's acceptance test: two API servers on namespace hosts share one PostgreSQL database,
two agents and a client are given both servers' URLs (docs/postgresql.md, "Several servers").
Under a load of submissions, ``kill -9`` of the server whose scheduler holds the lease (its
whole process group, its scheduler process with it): the other server's scheduler holds the
lease within the target; every job the client got an acknowledgement for exists exactly once
and succeeds; no task ran twice; the tasks that were running finish with their whole logs, and
every task's log reads whole through either server (both keep logs in one shared directory,
`shoal server init --files-dir`); the killed server, started again on its home, answers and
follows.

Proof that no task ran twice, beside the store's attempt counters: each task appends its job's
id to a stamp file named after its job (on the filesystem the namespace hosts share) before it
does anything else, so a second run of any task, or a second job of one submission, leaves a
second line."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from shoal.agent.workspace import TASK_ROOT_VARIABLE
from shoal.client import ShoalClient
from shoal.store.db import Database
from shoal.store.models import Job, SchedulerLeaseRow, Task
from tests.envs import without_shoal
from tests.multihost.netns import NET_PREFIX, Host, NetnsLab, namespaces_usable
from tests.multihost.rack import SERVER_PORT, TASK_PORT_BASE
from tests.postgresql import PgCluster, start_cluster, unusable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
    ),
]
TAKEOVER_S = 10.0  # the target (docs/postgresql.md, "One scheduler")
MAX_SUBMISSIONS = 200
SUBMIT_EVERY_S = 0.15
LOAD_AFTER_TAKEOVER_S = 4.0  # submissions go on this long once the other server leads
LONG_TICKS = 15  # the long tasks' seconds: they run across the kill
SHORT = """\
version: 1
name: {name}
roles:
  w:
    resources: {{cpu: 0.25, memory: 16Mi}}
    command: >-
      echo "$SHOAL_JOB_ID" >> {stamps}/{name};
      echo begin-{n}; sleep 2; for i in 1 2 3; do echo line-$i-{n}; done; echo done-{n}
"""
LONG = """\
version: 1
name: {name}
roles:
  w:
    resources: {{cpu: 0.25, memory: 16Mi}}
    command: >-
      echo "$SHOAL_JOB_ID" >> {stamps}/{name};
      for i in $(seq 1 {ticks}); do echo tick-$i; sleep 1; done; echo long-done
"""


def short_output(n: int) -> list[str]:
    return [f"begin-{n}", *(f"line-{i}-{n}" for i in (1, 2, 3)), f"done-{n}"]


def long_output() -> list[str]:
    return [*(f"tick-{i}" for i in range(1, LONG_TICKS + 1)), "long-done"]


@dataclass
class Head:
    """One API server: its namespace host and its home."""

    host: Host
    home: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host.address}:{SERVER_PORT}"

    def holds(self, holder: str) -> bool:
        """Whether a lease holder (``hostname:home``) names this server."""
        return holder.endswith(":" + str(self.home))


@dataclass
class Pair:
    """Servers s1, s2 on hosts 1 and 2, agents n1, n2 on hosts 3 and 4, one PostgreSQL."""

    lab: NetnsLab
    root: Path
    store: str
    stamps: Path
    env: dict[str, str]
    heads: list[Head] = field(default_factory=list)
    clients: list[ShoalClient] = field(default_factory=list)
    _db: Database | None = None

    @property
    def db(self) -> Database:
        if self._db is None:
            self._db = Database(self.store)
        return self._db

    @property
    def ca(self) -> Path:
        return self.heads[0].home / "pki" / "ca.crt"

    def token(self) -> str:
        return (self.heads[0].home / "admin.token").read_text().strip()

    def shoal(self, host: Host | None, *args: str) -> subprocess.CompletedProcess[str]:
        """The CLI in ``host``'s namespace (None: the root namespace, the admin's machine)."""
        command = [sys.executable, "-m", "shoal", *args]
        if host is not None:
            return self.lab.run(host, command, timeout_s=120, env=self.env)
        return subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=120, check=False
        )

    def client(self, *heads: Head) -> ShoalClient:
        for head in heads:
            self.lab.require_route(head.host.address)
        urls = ",".join(head.url for head in heads)
        made = ShoalClient(urls, self.token(), timeout=30, ca=str(self.ca))
        self.clients.append(made)
        return made

    def lease(self) -> tuple[str, int]:
        with self.db.read() as session:
            row = session.get(SchedulerLeaseRow, "scheduler")
            return ("", 0) if row is None else (row.holder, row.token)

    def init_server(self, head: Head) -> None:
        """`shoal server init` on the shared store; a later server gets the first's CA first."""
        if self.heads and not (head.home / "pki").exists():
            (head.home / "pki").mkdir(parents=True, mode=0o700)
            for part in ("ca.crt", "ca.key"):
                shutil.copy2(self.heads[0].home / "pki" / part, head.home / "pki" / part)
        init = self.shoal(None, "server", "init", "--home", str(head.home),
                          "--host", head.host.address, "--store", self.store,
                          "--files-dir", str(self.root / "shared-files"))  # fmt: skip
        assert init.returncode == 0, init.stdout + init.stderr
        self.heads.append(head)

    def start_server(self, head: Head) -> None:
        head.process = self.lab.spawn(
            head.host,
            [sys.executable, "-m", "shoal", "server", "start", "--home", str(head.home),
             "--host", head.host.address, "--port", str(SERVER_PORT)],
            head.log,
            env=self.env,
        )  # fmt: skip
        self.lab.wait_reachable(head.host.address, SERVER_PORT, timeout_s=60)
        until(lambda: healthy(self, head), 60, f"{head.home.name} healthy", self)

    def join_agents(self, joins: dict[str, tuple[Host, list[Head]]]) -> None:
        """Join each node (on its host, with its servers' URLs in that order) and run it."""
        made = self.shoal(None, "node", "token", "create", "--ttl", "10m", "--uses", "2")
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip().splitlines()[-1].split("--token ", 1)[1].split()[0]
        for node, (host, heads) in joins.items():
            urls = ",".join(head.url for head in heads)
            joined = self.shoal(
                host, "agent", "join", urls, "--token", token, "--name", node,
                "--address", host.address, "--home", str(self.root / node), "--cpus", "3",
                "--memory", "4Gi", "--gpus", "0", "--port-base", str(TASK_PORT_BASE),
            )  # fmt: skip
            assert joined.returncode == 0, joined.stdout + joined.stderr
            self.lab.spawn(
                host,
                [sys.executable, "-m", "shoal", "agent", "run", "--home", str(self.root / node)],
                self.root / f"{node}.log",
                env=self.env,
            )

    def tail_logs(self) -> str:
        parts = []
        for log in sorted(self.root.glob("*.log")):
            parts.append(f"--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)


def healthy(pair: Pair, head: Head) -> bool:
    assert head.process is not None and head.process.poll() is None, pair.tail_logs()
    try:
        trust = ssl.create_default_context(cafile=str(pair.ca))
        answer = httpx.get(f"{head.url}/api/v1/health", verify=trust, timeout=5)
    except httpx.TransportError:
        return False
    return answer.status_code == 200


def until(check: Callable[[], bool], timeout_s: float, what: str, pair: Pair) -> float:
    """Wait until ``check()``; the seconds it took."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s\n{pair.tail_logs()}")
        time.sleep(0.1)
    return time.monotonic() - began


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    """The lab (4 hosts), PostgreSQL listening on the lab's root-side address too, both servers
    started and both agents READY; all of it ended and removed after the test, pass or fail."""
    reason = unusable()
    if reason is not None:
        pytest.skip(reason)
    lab = NetnsLab.create(4)
    cluster: PgCluster | None = None
    built: Pair | None = None
    # the tasks' stamps: where tasks running as their own users can write (the task root)
    task_root = Path(os.environ.get(TASK_ROOT_VARIABLE, "/tmp"))
    stamps = task_root / f"stamps-{uuid.uuid4().hex[:12]}"
    try:
        subnet = f"{NET_PREFIX}{lab.octet}.0/24"
        cluster = start_cluster(also_listen_on=lab.root_address, trusted_net=subnet)
        stamps.mkdir(parents=True)
        stamps.chmod(0o1777)
        env = without_shoal(os.environ)  # but where and as whom the run's tasks run
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
        env["SHOAL_CONFIG"] = str(tmp_path / "config.yaml")
        env["SHOAL_HOME"] = str(tmp_path / "cli-home")
        built = Pair(lab, tmp_path, cluster.new_database("two"), stamps, env)
        build(built)
        yield built
    finally:
        try:
            if built is not None:
                for client in built.clients:
                    client.close()
                if built._db is not None:
                    built._db.dispose()
            lab.destroy()  # the servers and agents by process group, then the namespaces
        finally:
            if cluster is not None:
                cluster.stop()
            shutil.rmtree(stamps, ignore_errors=True)


def build(pair: Pair) -> None:
    s1 = Head(pair.lab.host(1), pair.root / "s1", pair.root / "s1.log")
    s2 = Head(pair.lab.host(2), pair.root / "s2", pair.root / "s2.log")
    pair.init_server(s1)
    pair.init_server(s2)
    pair.start_server(s1)
    until(lambda: s1.holds(pair.lease()[0]), 30, "s1 holds the lease", pair)
    pair.start_server(s2)
    pair.env.update(SHOAL_URL=f"{s1.url},{s2.url}", SHOAL_TOKEN=pair.token(), SHOAL_CA=str(pair.ca))
    # one agent asks the first server first, the other the second
    pair.join_agents({"n1": (pair.lab.host(3), [s1, s2]), "n2": (pair.lab.host(4), [s2, s1])})
    admin = pair.client(s1, s2)
    until(
        lambda: sorted(n["name"] for n in admin.nodes() if n["state"] == "READY") == ["n1", "n2"],
        60,
        "both nodes READY",
        pair,
    )


class Load(threading.Thread):
    """Submits short jobs ``load-<n>`` one after another until told to stop (at most
    ``MAX_SUBMISSIONS``), keeping the ids it was acknowledged and the submissions it was not."""

    def __init__(self, client: ShoalClient, stamps: Path) -> None:
        super().__init__(name="load", daemon=True)
        self.client = client
        self.stamps = stamps
        self.acked: dict[str, str] = {}  # job name -> id
        self.unacked: dict[str, str] = {}  # job name -> what the client raised
        self.last_acked_at = 0.0
        self.halt = threading.Event()

    def run(self) -> None:
        for n in range(MAX_SUBMISSIONS):
            if self.halt.is_set():
                return
            name = f"load-{n}"
            spec = SHORT.format(name=name, n=n, stamps=self.stamps)
            try:
                self.acked[name] = str(self.client.submit(spec)[0]["id"])
                self.last_acked_at = time.monotonic()
            except Exception as exc:  # kept, and judged by the test
                self.unacked[name] = f"{type(exc).__name__}: {exc}"
            self.halt.wait(SUBMIT_EVERY_S)


def job_rows(pair: Pair, names: list[str]) -> dict[str, list[Job]]:
    """The store's jobs of each name (expected: one each)."""
    found: dict[str, list[Job]] = {name: [] for name in names}
    with pair.db.read() as session:
        for job in session.scalars(select(Job).where(Job.name.in_(names))):
            found[job.name].append(job)
    return found


def all_ended(pair: Pair, ids: list[str]) -> bool:
    with pair.db.read() as session:
        states = session.scalars(select(Job.state).where(Job.id.in_(ids))).all()
    return len(states) == len(ids) and all(s in ("SUCCEEDED", "FAILED", "STOPPED") for s in states)


def whole_log(client: ShoalClient, job_id: str) -> list[str]:
    text: str = ""
    offset = 0
    for _ in range(50):
        chunk = client.logs(job_id, role="w", offset=offset)
        text += chunk["data"]
        offset = chunk["nextOffset"]
        if chunk["complete"]:
            return text.split()
    raise AssertionError(f"the log of {job_id} never said complete: {text!r}")


def assert_once_each(pair: Pair, acked: dict[str, str], submitted: list[str]) -> None:
    """Every acknowledged job exists once, under its id, SUCCEEDED with one attempt of one task
    that started once; no submission made two jobs."""
    rows = job_rows(pair, submitted)
    doubled = {name: [j.id for j in jobs] for name, jobs in rows.items() if len(jobs) > 1}
    assert not doubled, f"submissions stored twice: {doubled}"
    with pair.db.read() as session:
        tasks = session.scalars(select(Task).where(Task.job_id.in_(list(acked.values())))).all()
    by_job: dict[str, list[Task]] = {}
    for task in tasks:
        by_job.setdefault(task.job_id, []).append(task)
    for name, job_id in acked.items():
        assert [j.id for j in rows[name]] == [job_id], f"{name}: acked {job_id}, {rows[name]}"
        job = rows[name][0]
        assert job.state == "SUCCEEDED", f"{name} {job_id}: {job.state} {job.diagnostics}"
        assert job.attempt == 1, f"{name} {job_id}: job attempt {job.attempt}"
        runs = [(t.job_attempt, t.attempt, t.state) for t in by_job.get(job_id, [])]
        assert runs == [(1, 1, "SUCCEEDED")], f"{name} {job_id}: tasks {runs}"
        stamped = (pair.stamps / name).read_text().split()
        assert stamped == [job_id], f"{name} {job_id}: its task started {stamped}"
    stray = {p.name for p in pair.stamps.iterdir()} - set(submitted)
    assert not stray, stray


def test_kill_9_of_the_leading_server_under_load_loses_nothing_and_runs_nothing_twice(
    pair: Pair,
) -> None:
    leader, other = pair.heads  # s1 leads (build): n1 ships logs to it, n2 to s2
    holder, token_before = pair.lease()
    assert leader.holds(holder), holder
    client = pair.client(leader, other)  # submissions go through the leader until it dies
    longs = {}
    for n in (1, 2):
        name = f"long-{n}"
        spec = LONG.format(name=name, stamps=pair.stamps, ticks=LONG_TICKS)
        longs[name] = str(client.submit(spec)[0]["id"])
    until(
        lambda: all(client.job(i)["state"] == "RUNNING" for i in longs.values()),
        60,
        "the long tasks running",
        pair,
    )
    load = Load(pair.client(leader, other), pair.stamps)
    load.start()
    try:
        # the leader holds the whole logs of tasks that ended on n1
        until(
            lambda: len(load.acked) >= 15 and ended_on(pair, "n1") >= 2,
            60,
            "15 submissions acknowledged and 2 tasks ended on n1",
            pair,
        )
        assert leader.process is not None
        os.killpg(leader.process.pid, 9)  # kill -9: the server and its scheduler process
        killed_at, killed_wall = time.monotonic(), time.time()
        leader.process.wait(timeout=10)
        took = until(lambda: other.holds(pair.lease()[0]), 30, "the other takes the lease", pair)
        print(f"\nlease taken over {took:.1f} s after kill -9 (target {TAKEOVER_S:.0f} s)")
        assert took <= TAKEOVER_S, f"takeover after {took:.1f} s\n{pair.tail_logs()}"
        assert pair.lease()[1] > token_before
        until(lambda: load.last_acked_at > killed_at, 30, "a submission acked after", pair)
        time.sleep(LOAD_AFTER_TAKEOVER_S)
    finally:
        load.halt.set()
        load.join(timeout=60)
    assert not load.is_alive()
    print(f"{len(load.acked)} submissions acknowledged, {len(load.unacked)} not: {load.unacked}")
    assert len(load.unacked) <= 2, load.unacked  # only those in flight at the kill
    acked = {**load.acked, **longs}
    waited = until(lambda: all_ended(pair, list(acked.values())), 150, "every job ends", pair)
    print(f"every acknowledged job ended {waited:.1f} s after the load stopped")
    submitted = [*acked, *load.unacked]
    assert_once_each(pair, acked, submitted)
    restarted = rejoin_as_follower(pair, leader, other, acked)
    expected = {name: (i, short_output(int(name.split("-")[1]))) for name, i in load.acked.items()}
    expected.update({name: (job_id, long_output()) for name, job_id in longs.items()})
    logs = read_logs(pair, expected, {"survivor": pair.client(other), "restarted": restarted})
    ended_after = {job_id for job_id, ended in ended_at(pair).items() if ended >= killed_wall}
    assert_running_logs_whole(logs, expected, ended_after)
    # both servers keep logs in one shared directory (`init --files-dir`): each serves them all
    gaps = log_gaps(logs, expected)
    assert not gaps, gaps


def rejoin_as_follower(
    pair: Pair, killed: Head, leader: Head, acked: dict[str, str]
) -> ShoalClient:
    """The killed server, started again on its home, answers, serves the jobs, and leaves the
    lease to the leader; a job submitted through it runs. Returns a client of it alone."""
    holder, token = pair.lease()
    pair.start_server(killed)  # waits for /api/v1/health to answer 200
    via = pair.client(killed)
    listed = {job["id"] for job in via.jobs(limit=1000)}
    missing = set(acked.values()) - listed
    assert not missing, f"not listed by the restarted server: {missing}"
    spec = SHORT.format(name="after-0", n=0, stamps=pair.stamps)
    after = str(via.submit(spec)[0]["id"])
    done = via.wait(after, timeout_s=60)
    assert done["state"] == "SUCCEEDED", done
    time.sleep(3)  # longer than the 2 s between a follower's requests for the lease
    assert pair.lease() == (holder, token), "the restarted server took the lease"
    assert leader.holds(holder)
    return via


def ended_on(pair: Pair, node: str) -> int:
    """How many tasks on ``node`` have succeeded."""
    with pair.db.read() as session:
        found = session.scalars(
            select(Task.id).where(Task.node == node, Task.state == "SUCCEEDED")
        ).all()
    return len(found)


def ended_at(pair: Pair) -> dict[str, float]:
    """When each job's (one) task ended, by the server's clock."""
    with pair.db.read() as session:
        rows = session.execute(select(Task.job_id, Task.finished_at)).all()
    return {job_id: finished or 0.0 for job_id, finished in rows}


def read_logs(
    pair: Pair, expected: dict[str, tuple[str, list[str]]], via: dict[str, ShoalClient]
) -> dict[tuple[str, str], list[str]]:
    """(job name, which server) -> the lines of the job's log read through that server."""
    return {
        (name, how): whole_log(client, job_id)
        for name, (job_id, _) in expected.items()
        for how, client in via.items()
    }


def assert_running_logs_whole(
    logs: dict[tuple[str, str], list[str]],
    expected: dict[str, tuple[str, list[str]]],
    ended_after: set[str],
) -> None:
    """The issue's criterion: every task still running at the kill (the long ones included)
    or started after it has its whole log on the surviving server."""
    for name in ("long-1", "long-2"):
        assert expected[name][0] in ended_after, f"{name} ended before the kill"
    cut = {
        name: logs[(name, "survivor")]
        for name, (job_id, lines) in expected.items()
        if job_id in ended_after and logs[(name, "survivor")] != lines
    }
    assert not cut, f"logs of tasks that ran across the kill, incomplete: {cut}"


def log_gaps(
    logs: dict[tuple[str, str], list[str]], expected: dict[str, tuple[str, list[str]]]
) -> str:
    """What the servers' logs miss, in words ("": nothing)."""

    def short(how: str, cut: bool) -> list[str]:
        return sorted(
            name
            for name, (_, lines) in expected.items()
            if logs[(name, how)] != lines and bool(logs[(name, how)]) == cut
        )

    missing = short("survivor", False) + short("survivor", True)
    cut_short = short("restarted", True)
    if not missing and not cut_short and not short("restarted", False):
        return ""
    return (
        f"the surviving server lacks the whole logs of {missing} (tasks that ended before the "
        f"kill, shipped to the killed server); the restarted server serves as complete the "
        f"cut-off logs of {cut_short} and has none of {len(short('restarted', False))} others"
    )
