"""The agent: owns the processes on its node(s); the server owns the decisions.

Three threads: a monitor reaps exits and enforces deadlines; a reporter ships logs and reports
starts and exits (repeating exits until acknowledged); an order taker long-polls the server for
launches and kills. If the server goes away, tasks keep running and reports wait for it.

Fencing (docs/cluster.md): each acknowledged report extends the agent's lease (``HOME/lease``, a
deadline on the boot-time clock measured from when the report was sent); every task's keeper stops
its task once the lease runs out, so a task never outlives its node being declared NOT_READY, even
if this agent is dead. The order taker takes orders only while the lease holds and after a report
that followed the agent's start (or a lapse of its lease) has been answered and every attempt the
server called stale is dead: a new attempt never starts beside a stale one.

Agent restarts keep the tasks: attempts are saved under ``HOME/attempts`` and re-adopted by the
next agent on the same home (``Runner.recover``).

Every request carries the agent's protocol version (``shoal.protocol``). A server that answers
with another version (or refuses ours) cannot be talked to: the agent logs one error naming both
versions, stops calling the server and sets ``must_stop``; ``shoal agent`` then stops the tasks and
exits with status 2, since a server that cannot hear this agent treats its nodes as lost.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import httpx

from shoal import __version__
from shoal.agent.cache import NodeCache
from shoal.agent.exec_relay import ExecRelays
from shoal.agent.identity import Connection
from shoal.agent.images import ImageStore
from shoal.agent.journal import boot_clock
from shoal.agent.metrics import NodeSampler
from shoal.agent.renewal import CertificateRenewer
from shoal.agent.resources import NodeSpec, open_nvml
from shoal.agent.runner import Runner, default_runtimes
from shoal.agent.scheduled_events import ScheduledEvents
from shoal.agent.shipper import LogShipper
from shoal.agent.task_users import TaskUsers
from shoal.agent.tunnel_relay import TunnelRelays
from shoal.agent.workspace import Workspace
from shoal.protocol import (
    MISMATCH_STATUS,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    REFUSED_FOR_GOOD,
    AgentNode,
    CredentialRefused,
    ExitReport,
    LogUploadRequest,
    LogUploadResponse,
    OrdersRequest,
    OrdersResponse,
    ProtocolMismatch,
    ReportRequest,
    ReportResponse,
    mismatch_message,
    parse_version,
)

log = logging.getLogger("shoal.agent")
HEARTBEAT_S = 2.0
SHIP_EVERY_S = 0.25
ORDER_WAIT_S = 10.0
POLL_S = 0.01  # how often the monitor reaps exits
# Reports are at least this far apart: a burst of starts and exits goes in a few reports rather
# than one request each (every request costs the server's interpreter about a millisecond).
REPORT_GAP_S = 0.025
# While the server is unreachable, retry at most this far apart: a restarted server then hears
# of the running tasks (and adopts them) within half a second of coming back.
RETRY_MAX_S = 0.5
# Exits the server never acknowledged before this agent stopped: delivered by its next run.
UNREPORTED = "unreported-exits.json"
LOCK_FILE = "agent.lock"  # flock-ed by the agent that owns the home
# Stale attempts still alive this long after their kill (their grace, then SIGKILL) are logged
# as an error: orders keep waiting for them.
STALE_WAIT_S = 60.0
# After a certificate renewal, the clients of the old certificate are closed this much later
# (calls under way on them, a long download included, finish first).
RETIRE_S = 600.0


class AgentHomeInUse(RuntimeError):
    """Another agent process holds this agent home."""


class Agent:
    def __init__(
        self,
        connection: Connection,
        home: Path,
        nodes: list[NodeSpec],
        agent_id: str,
        task_users: TaskUsers | None = None,
        task_root: Path | None = None,
    ) -> None:
        self.connection = connection  # bearer token (local mode) or mutual TLS (joined node)
        self.server = connection.server
        self.home = home
        self.nodes = nodes
        self.agent_id = agent_id
        self._file_client = self._client(60.0)  # code and data downloads (streamed)
        images = ImageStore(home, self._download)  # pushed images, loaded into podman on use
        # where tasks' files live, and as whom tasks run (docs/security.md)
        workspace = Workspace(home, task_users or TaskUsers.default(), task_root)
        cache = NodeCache(home / "cache", self._download, workspace.data)
        self.runner = Runner(home, cache, default_runtimes(home, images), workspace=workspace)
        log.info("%s", workspace.users.describe())
        self.shipper = LogShipper(self.runner, self._upload_logs)
        self.metrics = NodeSampler(self.runner.live_usage, open_nvml())  # sent with reports
        self.exec_relays = ExecRelays(self.runner, connection)  # `shoal job exec`, terminals
        self.tunnel_relays = TunnelRelays(self.runner, connection)  # port-forward, ssh, proxy
        # a cloud machine's preemption notices (docs/cloud.md), when the bootstrap says where
        self.events = ScheduledEvents.from_env([n.name for n in nodes])
        # a joined node's certificate, renewed before it expires (agent/renewal.py)
        self.renewer = (
            None
            if connection.identity is None
            else CertificateRenewer(connection.identity, self._reconnect)
        )
        self.report_now = threading.Event()
        self.stopping = threading.Event()
        # Set when the agent must end: the server speaks another protocol version (``refusal``
        # says so), or (in ``shoal agent``) a signal asked it to.
        self.must_stop = threading.Event()
        self.refusal: str | None = None
        # Set once a report answered since this agent started (or since its lease lapsed) has
        # had every attempt the server called stale killed: orders may be taken.
        self.synced = threading.Event()
        self._stale_since: float | None = None  # since when stale attempts outlive a kill
        self._stale_said = False
        self._home_lock: TextIO | None = None  # HOME/agent.lock, held while this agent lives
        self._refusal_lock = threading.Lock()
        self._report_client = self._client(10.0)
        self._order_client = self._client(ORDER_WAIT_S + 10.0)
        self._threads = [
            threading.Thread(target=self._monitor, name="agent-monitor", daemon=True),
            threading.Thread(target=self._reporter, name="agent-reporter", daemon=True),
            threading.Thread(target=self._order_taker, name="agent-orders", daemon=True),
        ]

    def _client(self, timeout: float) -> httpx.Client:
        return httpx.Client(
            **self.connection.httpx_settings(timeout),
            event_hooks={"response": [self._check_protocol]},
        )

    def _reconnect(self, connection: Connection) -> None:
        """A renewed certificate: new connections present it; calls under way finish on theirs
        (the old certificate stays valid until it expires)."""
        old = (self._file_client, self._report_client, self._order_client)
        self.connection = self.exec_relays.connection = connection
        self.tunnel_relays.connection = connection
        self._file_client = self._client(60.0)
        self._report_client = self._client(10.0)
        self._order_client = self._client(ORDER_WAIT_S + 10.0)
        closer = threading.Timer(RETIRE_S, _close_all, (old,))
        closer.daemon = True
        closer.start()

    def _check_protocol(self, response: httpx.Response) -> None:
        """Refuse a server of another protocol version: one that says so (426), answers with
        another version, or answers a success without one (it predates the protocol)."""
        theirs = response.headers.get(PROTOCOL_HEADER)
        if (
            response.status_code == MISMATCH_STATUS
            or (theirs is not None and parse_version(theirs) != PROTOCOL_VERSION)
            or (theirs is None and response.is_success)
        ):
            raise ProtocolMismatch(mismatch_message(str(PROTOCOL_VERSION), theirs))
        if response.status_code == 403:  # a removed node: its certificate is refused for good
            response.read()
            try:
                body = response.json()
            except ValueError:
                return
            if isinstance(body, dict) and body.get("code") in REFUSED_FOR_GOOD:
                raise CredentialRefused(str(body.get("message")))

    def _refuse(self, exc: ProtocolMismatch) -> None:
        with self._refusal_lock:
            first = self.refusal is None
            self.refusal = self.refusal or f"cannot talk to the server at {self.server}: {exc}"
        if first:
            log.error("%s; this agent stops calling it", self.refusal)
        self.must_stop.set()

    def start(self) -> None:
        self._lock_home()
        recovered = self.runner.recover()
        if recovered:
            log.info("found %d attempt(s) of an earlier run: %s", len(recovered), recovered)
        self._restore_unreported()
        for thread in self._threads:
            thread.start()
        if self.renewer is not None:
            self.renewer.start()
        if self.events is not None:
            self.events.start()

    def _lock_home(self) -> None:
        """Hold ``HOME/agent.lock`` for this process's life: two agents on one home would both
        adopt the same attempts and launch the same orders twice."""
        self.home.mkdir(parents=True, exist_ok=True)
        handle = open(self.home / LOCK_FILE, "a+")  # noqa: SIM115  held until the process ends
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise AgentHomeInUse(
                f"another agent runs with the home {self.home} (pid {holder}); stop it first, "
                "or give this one another --home"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._home_lock = handle

    def stop(self, grace: float = 10.0) -> None:
        """Stop every task, report the exits if the server listens, and end the threads."""
        self.exec_relays.stop_all()  # before the tasks: what a session started ends with it
        self.tunnel_relays.stop_all()
        self.runner.stop_all(grace)
        self.runner.poll()
        try:
            self.shipper.ship()
            self._report()
        except (httpx.HTTPError, ProtocolMismatch):
            pass
        self._save_unreported()
        self.runner.workspace.close()
        self.stopping.set()
        self.report_now.set()
        if self.renewer is not None:
            self.renewer.stop()
        if self.events is not None:
            self.events.stop()
        for thread in self._threads:
            thread.join(timeout=0.5)  # the order taker may sit in a long poll: it is a daemon

    def _save_unreported(self) -> None:
        exits = self.runner.unreported_exits()
        path = self.home / UNREPORTED
        if exits:
            self.home.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps([e.model_dump() for e in exits]))
            log.warning("%d exit(s) not acknowledged; saved to %s", len(exits), path)
        else:
            path.unlink(missing_ok=True)

    def _restore_unreported(self) -> None:
        path = self.home / UNREPORTED
        if not path.exists():
            return
        try:
            exits = [ExitReport.model_validate(e) for e in json.loads(path.read_text())]
        except ValueError as exc:
            log.warning("ignoring %s: %s", path, exc)
        else:
            known = set(self.runner.known())  # recovered from the saved attempts already
            self.runner.restore_exits([e for e in exits if e.attempt_id not in known])
        path.unlink()

    # ---- threads ----

    def _monitor(self) -> None:
        last_sample = 0.0
        while not self.stopping.is_set():
            if self.runner.poll():
                self.report_now.set()
            if time.monotonic() - last_sample > 1.0:
                self.runner.sample_usage()
                self.metrics.sample()
                last_sample = time.monotonic()
            time.sleep(POLL_S)

    def _reporter(self) -> None:
        last_report = 0.0
        last_running: set[str] = set()
        backoff = 0.1
        while not self.stopping.is_set():
            urgent = self.report_now.wait(SHIP_EVERY_S)
            gap = REPORT_GAP_S - (time.monotonic() - last_report)
            if urgent and gap > 0:
                self.stopping.wait(gap)  # let more starts and exits join this report
            self.report_now.clear()
            try:
                self.shipper.ship()
                running = {r.attempt_id for r in self.runner.running_reports()}
                due = time.monotonic() - last_report > HEARTBEAT_S
                self._check_lease()
                syncing = not self.synced.is_set()
                changed = running != last_running or self.runner.exit_reports()
                if urgent or due or changed or syncing:
                    stale = self._report()
                    last_report, last_running = time.monotonic(), running
                    if stale and not syncing:  # the server gave up on some: no new work beside
                        self.synced.clear()
                        syncing = True
                    if syncing:
                        self._resync(stale)
                backoff = 0.1
            except ProtocolMismatch as exc:
                self._refuse(exc)
                return
            except httpx.HTTPError as exc:
                log.warning("server unreachable (%s); tasks keep running, retrying", exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)
            except Exception:  # a full disk, a malformed answer: never end the reporter
                log.exception("report failed; retrying")
                time.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)

    def _check_lease(self) -> None:
        """Note a lapsed lease: the keepers are stopping the tasks; orders wait for a resync."""
        if self.synced.is_set() and not self._lease_holds():
            self.synced.clear()
            log.warning(
                "no report acknowledged within the lease: the tasks are being stopped (fencing); "
                "orders wait until the server answers again"
            )

    def _lease_holds(self) -> bool:
        deadline = self.runner.journal.lease_deadline()
        return deadline is not None and boot_clock() < deadline

    def _resync(self, stale: list[str]) -> None:
        """After a start, a lapsed lease or a report that named stale attempts: take orders again
        only once every stale attempt is dead, so no new attempt starts beside one the server
        has given up on. It never blocks: the reporter goes on reporting (the lease is renewed,
        the healthy tasks live on) and calls it again with the next answer's stale attempts."""
        alive = self.runner.alive(stale)
        if alive:
            waited = time.monotonic() - (self._stale_since or time.monotonic())
            self._stale_since = self._stale_since or time.monotonic()
            if waited > STALE_WAIT_S and not self._stale_said:
                log.error(
                    "stale attempts %s are still alive after %.0fs; orders wait", alive, waited
                )
                self._stale_said = True
            return
        if stale:
            log.info("stale attempts %s are dead; taking orders", stale)
        self._stale_since, self._stale_said = None, False
        self.synced.set()

    def _order_taker(self) -> None:
        backoff = 0.1
        while not self.stopping.is_set():
            if not self.synced.wait(0.25):
                if self.refusal is not None:
                    return  # this server cannot be talked to
                continue
            try:
                orders = self._orders()
                backoff = 0.1
            except ProtocolMismatch as exc:
                self._refuse(exc)
                return
            except httpx.HTTPError:
                time.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)
                continue
            if not (self.synced.is_set() and self._lease_holds()):
                continue  # the lease lapsed meanwhile: these orders come again after the resync
            for order in orders.launch:
                self.runner.launch(order)
            for session in orders.exec:
                self.exec_relays.start(session)
            for tunnel in orders.tunnels:
                self.tunnel_relays.start(tunnel)
            for attempt_id in orders.kill:
                self.runner.kill(attempt_id)
            if orders.launch or orders.kill:
                self.report_now.set()

    # ---- calls ----

    def _node_reports(self) -> list[AgentNode]:
        own = self.runner.own_ports()
        busy = self.runner.busy_ports
        unsupported = self.runner.unsupported()
        metrics = self.metrics.take([(n.name, n.gpu_indices) for n in self.nodes])
        return [
            AgentNode(
                name=n.name,
                address=n.address,
                cpu_millis=n.cpu_millis,
                memory_mib=n.memory_mib,
                gpu_indices=list(n.gpu_indices),
                gpu_type=n.gpu_type,
                port_low=n.port_low,
                port_high=n.port_high,
                busy_ports=busy.busy(n.port_low, n.port_high, own),
                labels=n.labels,
                unsupported=unsupported,
                metrics=metrics.get(n.name),
                preemption=None if self.events is None else self.events.notice,
            )
            for n in self.nodes
        ]

    def _report(self) -> list[str]:
        """Send a report; extend the lease from its send time; kill what the server calls stale
        (returned)."""
        exits = self.runner.exit_reports()
        request = ReportRequest(
            agent_id=self.agent_id,
            nodes=self._node_reports(),
            running=self.runner.running_reports(),
            exited=exits,
            agent_version=__version__,
        )
        sent = boot_clock()
        response = self._report_client.post("/api/v1/agent/report", json=request.model_dump())
        response.raise_for_status()
        result = ReportResponse.model_validate(response.json())
        self.runner.journal.extend_lease(sent + result.lease_s)
        # The server's advice (result.heartbeat_s, a third of the lease) is not followed yet: a
        # debug hold and a full disk's lease checks still count on a report every 2 s.
        self.runner.acknowledge(result.acked)
        for attempt_id in result.kill:
            self.runner.kill(attempt_id)
        return result.kill

    def _orders(self) -> OrdersResponse:
        request = OrdersRequest(
            agent_id=self.agent_id,
            nodes=[n.name for n in self.nodes],
            known=self.runner.known(),
            wait_s=ORDER_WAIT_S,
        )
        response = self._order_client.post("/api/v1/agent/orders", json=request.model_dump())
        response.raise_for_status()
        return OrdersResponse.model_validate(response.json())

    def _upload_logs(self, request: LogUploadRequest) -> LogUploadResponse:
        response = self._report_client.post("/api/v1/agent/logs", json=request.model_dump())
        response.raise_for_status()
        return LogUploadResponse.model_validate(response.json())

    def _download(self, path: str, sink: Callable[[bytes], None]) -> None:
        """Stream the body at ``path`` into ``sink`` (a code archive or a data set)."""
        with self._file_client.stream("GET", path) as response:
            if response.status_code != 200:
                response.read()
                raise RuntimeError(
                    f"the server answered {response.status_code}: {_message(response)}"
                )
            for chunk in response.iter_bytes(1 << 20):
                sink(chunk)


def _close_all(clients: tuple[httpx.Client, ...]) -> None:
    for client in clients:
        client.close()


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json().get("message", response.text[:200]))
    except ValueError:
        return response.text[:200]
