"""The Kubernetes agent: to the server, an agent whose nodes are a cluster's Nodes; to Kubernetes,
a client that creates, watches and deletes Pods (docs/kubernetes.md).

Threads: two watch caches (Nodes; Pods of every namespace, for what other Pods request), a
reporter and an order taker like shoal's own agent, a log follower per started Pod and one
thread per exec session. Nothing is kept on disk: after a restart the Pods themselves, found by
label, say which attempts run, and the server's answer says which of them are stale (orphans,
deleted then).

Reports are sent only once both caches have listed, so the first report names every Pod that
runs. An attempt is reported running from its task container's start until its exit is
reported; its exit is reported once its log has been shipped (or after ``LOG_WAIT_S``), and its
Pod is deleted once the server acknowledges the exit, so logs outlive Pods.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from shoal import __version__
from shoal.agent.identity import Connection
from shoal.kubernetes import status
from shoal.kubernetes.exec import PodExec
from shoal.kubernetes.launcher import Launcher, LaunchFailed
from shoal.kubernetes.logs import Follower
from shoal.kubernetes.nodes import ForeignHolds, Requests, agent_node, is_ours, wanted
from shoal.kubernetes.options import JOB, KubernetesOptions
from shoal.kubernetes.tunnel import PodTunnel
from shoal.kubernetes.watch import Cache
from shoal.protocol import (
    AgentNode,
    ExitReport,
    LaunchOrder,
    LogUploadRequest,
    OrdersRequest,
    OrdersResponse,
    ReportRequest,
    ReportResponse,
    RunningReport,
)

log = logging.getLogger("shoal.kubernetes")
HEARTBEAT_S = 2.0
ORDER_WAIT_S = 10.0
RETRY_S = 0.5
LOG_WAIT_S = 10.0  # an ended Pod's exit waits at most this long for its log to be shipped
REPORT_GAP_S = 0.05
LAUNCHERS = 8  # Pods created at once (each create is one request, ~10 ms on the API server)
DELETERS = 4  # ended Pods deleted at once, off the reporter thread


class KubernetesAgent:
    def __init__(
        self, connection: Connection, core: Any, options: KubernetesOptions, agent_id: str
    ) -> None:
        self.connection = connection
        self.core = core  # kubernetes.client.CoreV1Api
        self.options = options
        self.agent_id = agent_id
        self.launcher = Launcher(core, options)
        self.stopping = threading.Event()
        self.report_now = threading.Event()
        self.synced = threading.Event()  # a report naming every Pod has been answered
        self.nodes = Cache(
            "nodes",
            core.list_node,
            self._on_node,
            self.stopping,
            label_selector=options.node_selector,
        )
        self.pods = Cache("pods", core.list_pod_for_all_namespaces, self._on_pod, self.stopping)
        self._lock = threading.Lock()
        self._exits: dict[str, ExitReport] = {}  # ended attempts, until the server acknowledges
        self._ended_at: dict[str, float] = {}  # when each exit was found (for LOG_WAIT_S)
        self._followers: dict[str, Follower] = {}
        self._launching: set[str] = set()
        self._acked: set[str] = set()  # exits acknowledged: their Pods are being deleted
        # attempt -> (job, Pod name, whether it has a Secret of its own), until acked
        self._where: dict[str, tuple[str, str, bool]] = {}
        # shoal's own Pods as the watch last served them: by attempt, and the attempts of each job
        self._own: dict[str, Any] = {}
        self._of_job: dict[str, set[str]] = {}
        # what other Pods hold on each node; each node's report, while neither changes
        self._foreign = ForeignHolds(options)
        self._node_reports: dict[str, tuple[str, tuple[int, int, int], AgentNode]] = {}
        self._http = httpx.Client(**connection.httpx_settings(ORDER_WAIT_S + 10.0))
        self._launches = ThreadPoolExecutor(LAUNCHERS, thread_name_prefix="k8s-launch")
        self._deletes = ThreadPoolExecutor(DELETERS, thread_name_prefix="k8s-delete")
        self._threads = [
            threading.Thread(target=self._reporter, name="k8s-reporter", daemon=True),
            threading.Thread(target=self._order_taker, name="k8s-orders", daemon=True),
        ]

    # ---- life ----

    def start(self) -> None:
        self.nodes.start()
        self.pods.start()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop talking to both sides; the Pods run on (a restarted agent adopts them)."""
        self.stopping.set()
        self.report_now.set()
        self.nodes.stop()
        self.pods.stop()
        for thread in self._threads:
            thread.join(timeout=15)
        self._launches.shutdown(wait=True, cancel_futures=True)
        self._deletes.shutdown(wait=True, cancel_futures=True)
        self._http.close()

    # ---- watch events ----

    def _on_node(self, kind: str, old: Any, new: Any) -> None:
        if kind == "DELETED":
            self._node_reports.pop(new.metadata.name, None)
        self.report_now.set()

    def _on_pod(self, kind: str, old: Any, new: Any) -> None:
        if not is_ours(new, self.options):
            with self._lock:
                held_changed = self._foreign.update(kind, new)
            if held_changed:
                self.report_now.set()  # what other Pods request on a node changed
            return
        facts = status.facts(new)
        if not facts.attempt_id:
            return
        now = time.time()
        job = (new.metadata.annotations or {}).get(JOB, "")
        with self._lock:
            self._index(kind, facts.attempt_id, job, new)
            if facts.attempt_id in self._acked:
                if kind == "DELETED":  # its Pod is gone for good: nothing more will be heard
                    self._acked.discard(facts.attempt_id)
                return
            secret = status.has_own_secret(new)
            self._where[facts.attempt_id] = (job, new.metadata.name, secret)
            if kind == "DELETED":
                ended: ExitReport | None = status.gone_report(facts, now)
                if not facts.stop_requested:  # behind shoal's back: its owner may be gone too
                    self.launcher.forget(job)
            else:
                ended = status.exit_report(facts, now)
                if facts.started_at is not None and self.options.follow_logs:
                    self._follow(new.metadata.name, facts.attempt_id)
            if ended is not None and facts.attempt_id not in self._exits:
                self._exits[facts.attempt_id] = ended
                self._ended_at[facts.attempt_id] = time.monotonic()
        self.report_now.set()

    def _index(self, kind: str, attempt_id: str, job: str, pod: Any) -> None:
        """Keep the index of shoal's own Pods (under the lock)."""
        if kind == "DELETED":
            self._own.pop(attempt_id, None)
            attempts = self._of_job.get(job)
            if attempts is not None:
                attempts.discard(attempt_id)
                if not attempts:
                    del self._of_job[job]
            return
        self._own[attempt_id] = pod
        self._of_job.setdefault(job, set()).add(attempt_id)

    def _follow(self, name: str, attempt_id: str) -> None:
        if attempt_id in self._followers:
            return
        follower = Follower(
            self.core,
            self.options.namespace,
            name,
            attempt_id,
            self._upload_logs,
            lambda: self._pod_ended(attempt_id),
            self.stopping,
        )
        self._followers[attempt_id] = follower
        follower.start()

    def _pod_ended(self, attempt_id: str) -> bool:
        with self._lock:
            return attempt_id in self._exits or attempt_id in self._acked

    # ---- reports ----

    def _own_pods(self) -> list[Any]:
        with self._lock:
            return list(self._own.values())

    def report_request(self) -> ReportRequest:
        with self._lock:
            held = {name: sums.copy() for name, sums in self._foreign.by_node.items()}
        nodes = [
            self._node_report(node, held.get(node.metadata.name))
            for node in self.nodes.items()
            if wanted(node)
        ]
        now = time.monotonic()
        running: list[RunningReport] = []
        with self._lock:
            exited = []
            for attempt_id, ended in self._exits.items():
                if self._log_shipped(attempt_id, now):
                    exited.append(ended)
                elif ended.started_at is not None:  # ended, its log still shipping: running
                    running.append(_still_running(ended))
        reported = {e.attempt_id for e in exited} | {r.attempt_id for r in running}
        for pod in self._own_pods():
            facts = status.facts(pod)
            if facts.attempt_id in reported or facts.attempt_id in self._acked:
                continue
            report = status.running_report(facts)
            if report is None and facts.started_at is not None:  # ended: its exit comes next
                report = RunningReport(
                    attempt_id=facts.attempt_id,
                    pid=0,
                    started_at=facts.started_at,
                    epoch=facts.epoch,
                )
            if report is not None:
                running.append(report)
        return ReportRequest(
            agent_id=self.agent_id,
            nodes=nodes,
            running=running,
            exited=exited,
            agent_version=__version__,
            fencing="confirmed",
        )

    def _node_report(self, node: Any, held: Requests | None) -> AgentNode:
        """The node as reported: made again only when the Node or what others hold changed."""
        version = node.metadata.resource_version or ""
        held_key = held.key() if held is not None else (0, 0, 0)
        known = self._node_reports.get(node.metadata.name)
        if known is not None and known[:2] == (version, held_key):
            return known[2]
        made = agent_node(node, held, self.options)
        self._node_reports[node.metadata.name] = (version, held_key, made)
        return made

    def _log_shipped(self, attempt_id: str, now: float) -> bool:
        follower = self._followers.get(attempt_id)
        if follower is None or follower.done.is_set():
            return True
        return now - self._ended_at.get(attempt_id, now) > LOG_WAIT_S

    def _reporter(self) -> None:
        while not self.stopping.is_set():
            if not (self.nodes.synced.is_set() and self.pods.synced.is_set()):
                self.stopping.wait(0.1)
                continue
            began = time.monotonic()
            try:
                self._report()
                self.synced.set()
            except Exception as exc:
                log.warning("report to %s failed: %s", self.connection.server, exc)
                self.stopping.wait(RETRY_S)
                continue
            took = time.monotonic() - began
            self.report_now.wait(HEARTBEAT_S)
            self.report_now.clear()
            # events come faster than a report of a thousand nodes is made and applied: gather
            # them for a while, so reports take at most a third of the time (of both sides)
            self.stopping.wait(min(max(REPORT_GAP_S, 2 * took), HEARTBEAT_S))

    def _report(self) -> None:
        request = self.report_request()
        response = self._http.post("/api/v1/agent/report", json=request.model_dump())
        response.raise_for_status()
        answer = ReportResponse.model_validate(response.json())
        for attempt_id in answer.acked:  # deleted in the pool: reports must not wait on it
            self._finish(attempt_id)
        for attempt_id in answer.kill:  # stale: an orphan, or an attempt declared lost
            pod = self._pod_of(attempt_id)
            if pod is not None and pod.metadata.deletion_timestamp is None:
                log.info("deleting Pod %s: the server says it must not run", pod.metadata.name)
                self.launcher.stop(pod.metadata.name, 0)

    def _finish(self, attempt_id: str) -> None:
        """The server has the exit: delete the Pod (and the job's owner, if it was its last),
        in the pool of deleters."""
        with self._lock:
            self._exits.pop(attempt_id, None)
            self._ended_at.pop(attempt_id, None)
            follower = self._followers.pop(attempt_id, None)
            if follower is not None:
                follower.abandon()  # before the deletion: the kubelet's error is not the log
            self._acked.add(attempt_id)
            where = self._where.pop(attempt_id, None)
            if where is None:  # never created (refused, or killed before its launch)
                return
            job, name, with_secret = where
            others = self._of_job.get(job, set()) - self._acked
        self._deletes.submit(self._remove, job, name, not others, with_secret)

    def _remove(self, job: str, name: str, last_of_job: bool, with_secret: bool) -> None:
        try:
            self.launcher.remove(job, name, last_of_job=last_of_job, with_secret=with_secret)
        except Exception as exc:
            log.warning("could not delete Pod %s: %s", name, exc)

    def _pod_of(self, attempt_id: str) -> Any | None:
        with self._lock:
            return self._own.get(attempt_id)

    # ---- orders ----

    def _order_taker(self) -> None:
        while not self.stopping.is_set():
            if not self.synced.is_set():
                self.stopping.wait(0.1)
                continue
            try:
                orders = self._orders()
            except Exception as exc:
                log.warning("orders from %s failed: %s", self.connection.server, exc)
                self.stopping.wait(RETRY_S)
                continue
            for order in orders.launch:  # jobs in parallel; a job's Pods under its lock
                with self._lock:
                    self._launching.add(order.attempt_id)
                self._launches.submit(self._launch, order)
            for attempt_id in orders.kill:
                self._kill(attempt_id)
            for session in orders.exec:
                pod = self._pod_of(session.attempt_id)
                name = pod.metadata.name if pod is not None else None
                relay = PodExec(session, self.core, self.options.namespace, name, self.connection)
                threading.Thread(target=relay.run, name="k8s-exec", daemon=True).start()
            for tunnel in orders.tunnels:  # docs/proxy.md
                pod = self._pod_of(tunnel.attempt_id)
                forward = PodTunnel(tunnel, self.core, self.options.namespace, pod, self.connection)
                threading.Thread(target=forward.run, name="k8s-tunnel", daemon=True).start()

    def _known(self) -> list[str]:
        with self._lock:
            return sorted(set(self._exits) | self._launching | set(self._own))

    def _orders(self) -> OrdersResponse:
        names = [n.metadata.name for n in self.nodes.items() if wanted(n)]
        request = OrdersRequest(
            agent_id=self.agent_id, nodes=names, known=self._known(), wait_s=ORDER_WAIT_S
        )
        response = self._http.post("/api/v1/agent/orders", json=request.model_dump())
        response.raise_for_status()
        return OrdersResponse.model_validate(response.json())

    def _launch(self, order: LaunchOrder) -> None:
        try:
            self.launcher.launch(order)
        except LaunchFailed as exc:
            self._refused(order.attempt_id, str(exc))
        except Exception as exc:  # the API server is away: the order comes again
            log.warning("could not create the Pod of %s: %s", order.attempt_id, exc)
        finally:
            with self._lock:
                self._launching.discard(order.attempt_id)

    def _refused(self, attempt_id: str, why: str) -> None:
        with self._lock:
            self._exits[attempt_id] = ExitReport(
                attempt_id=attempt_id,
                exit_code=None,
                launch_error=why,
                epoch=None,  # never launched: no Pod was created
                finished_at=time.time(),
            )
            self._ended_at[attempt_id] = time.monotonic()
        self.report_now.set()

    def _kill(self, attempt_id: str) -> None:
        pod = self._pod_of(attempt_id)
        if pod is None:
            with self._lock:
                if attempt_id in self._exits or attempt_id in self._acked:
                    return
                self._exits[attempt_id] = ExitReport(
                    attempt_id=attempt_id,
                    exit_code=None,
                    stop_requested=True,
                    epoch=None,
                    finished_at=time.time(),
                )
            self.report_now.set()
            return
        if pod.metadata.deletion_timestamp is not None:
            return  # being deleted already
        grace = pod.spec.termination_grace_period_seconds or 0
        self.launcher.stop(pod.metadata.name, grace)

    # ---- logs ----

    def _upload_logs(self, request: LogUploadRequest) -> None:
        response = self._http.post("/api/v1/agent/logs", json=request.model_dump())
        response.raise_for_status()


def _still_running(report: ExitReport) -> RunningReport:
    """An ended attempt whose exit waits for its log: the server must not think it vanished."""
    assert report.started_at is not None
    return RunningReport(
        attempt_id=report.attempt_id, pid=0, started_at=report.started_at, epoch=report.epoch or 0
    )
