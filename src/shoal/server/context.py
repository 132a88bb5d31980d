"""Everything a request handler or background loop needs, created once per server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shoal.core.snapshot import JobRequest
from shoal.protocol import ExecOrder, TunnelOrder
from shoal.server.exec_hub import ExecHub
from shoal.server.group_commit import GroupCommit
from shoal.server.metrics_history import MetricsHistory
from shoal.server.notify import NodeNews, Notifier
from shoal.server.positions import Positions, QueuePositions
from shoal.server.services.quiet_answers import QuietAnswers, QuietPolls
from shoal.server.settings import ServerSettings
from shoal.server.store_news import new_server_id
from shoal.store.db import Database


class ApiError(Exception):
    """A "no" with a status, a stable code and a message the user sees."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        problems: list[dict[str, object]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = problems or []
        self.headers = headers or {}


@dataclass
class ServerContext:
    settings: ServerSettings
    db: Database
    clock: Callable[[], float] = time.time
    scheduler_wake: Notifier = field(default_factory=Notifier)
    agent_work: NodeNews = field(default_factory=NodeNews)  # news for agents, per node
    exec_hub: ExecHub[ExecOrder] = field(default_factory=ExecHub)  # exec sessions in flight
    tunnel_hub: ExecHub[TunnelOrder] = field(default_factory=ExecHub)  # tunnels to task ports
    proxy_port: int | None = None  # where the task proxy listens, once bound (docs/proxy.md)
    proxy_key: bytes = b""  # HOME/proxy.key: what tasks' proxy tokens derive from
    shares_version: int = 0  # rises when a job's shares change: the proxy's checks are stale
    # the last request through the task proxy per job (wall clock), and the idle jobs warned
    # (services/idle_jobs.py); in memory: a restarted server counts from its start
    proxy_activity: dict[str, float] = field(default_factory=dict)
    idle_warned: set[str] = field(default_factory=set)
    # The cloud pools' autoscaler (server/autoscaling; None: no cloud file): what jobs wait for
    autoscaler: Any = None
    preemption_notices: dict[str, str] = field(default_factory=dict)  # node -> event acted on
    started_at: float = field(default_factory=time.time)
    requests: dict[tuple[str, int], JobRequest] = field(default_factory=dict)
    seen_attempts: set[str] = field(default_factory=set)
    held: dict[str, float] = field(default_factory=dict)  # attempts held for debugging: until
    closing: bool = False  # set when the server shuts down: long polls answer at once
    # as of the last cycle: the scheduler thread's own, or a proxy asking the scheduler process
    positions: Positions = field(default_factory=QueuePositions)
    # on a store shared by several servers: the leader's positions when this server's scheduler
    # does not lead (server/shared_positions.py; set by the app on PostgreSQL)
    shared_positions: Positions | None = None
    # the leading scheduler's writer of those (set by the scheduler loop on PostgreSQL)
    position_publisher: Any = None
    reasons: dict[str, tuple[str, str]] = field(default_factory=dict)  # last reason written
    # the scheduler's model, cache and resume point (server/loop.py; one owner: the loop)
    scheduler_state: Any = None
    # this server's claim to run cycles among servers on one store (services/scheduler_lease.py;
    # set by the scheduler loop; None: cycles run by hand, as tests do, check nothing)
    scheduler_lease: Any = None
    # job shapes that fitted the nodes at submission, and when (``submission._never_fits``)
    fits: dict[tuple[object, ...], float] = field(default_factory=dict)
    metrics: MetricsHistory = field(default_factory=MetricsHistory)  # what nodes use, lately
    # (token id, address, User-Agent) seen since start: the audit log's new-client check
    token_clients: set[tuple[int, str, str]] = field(default_factory=set)
    commits: GroupCommit = field(init=False)  # submissions, several per transaction
    quiet_answers: QuietAnswers = field(init=False)  # idle agents' reports, answered from memory
    quiet_polls: QuietPolls = field(default_factory=QuietPolls)  # and their orders polls
    # this process among the servers on one store (store_news.py: whose notifications are whose)
    server_id: str = field(default_factory=new_server_id)

    def __post_init__(self) -> None:
        self.commits = GroupCommit(self.db, ApiError, self.wake_scheduler)
        self.quiet_answers = QuietAnswers(self.db)

    def queue_positions(self) -> Positions:
        """The positions the API shows (``positions``, or the leader's on a shared store)."""
        return self.shared_positions or self.positions

    def wake_scheduler(self) -> None:
        self.scheduler_wake.notify()

    def wake_agents(self, nodes: Iterable[str] | None = None) -> None:
        """Wake the long polls of the agents of ``nodes`` (of every agent if None)."""
        self.agent_work.news(nodes)

    def close(self) -> None:
        self.closing = True
        self.agent_work.news()
        self.scheduler_wake.notify()
