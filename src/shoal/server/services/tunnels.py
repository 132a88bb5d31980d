"""Tunnels' use cases (docs/proxy.md): who may reach which port of which task, and the secret
each task is given so that only the server's proxy (not another user's task on the same node)
gets past an app's own token check.

The socket side (the rendezvous with the agent, the byte streams) is ``server.proxy``."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from shoal.core.envcontract import PRIMARY_PORT_LABEL
from shoal.core.states import State
from shoal.protocol import TunnelOrder
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import exec_sessions
from shoal.server.services.job_shares import job_for_ports
from shoal.store.models import Task

PROXY_KEY_FILE = "proxy.key"
PROXY_PREFIX = "/proxy"


@dataclass(frozen=True)
class TunnelTarget:
    """A running task's port a connection goes to, and the node whose agent relays it."""

    job_id: str
    role: str
    index: int
    attempt_id: str
    node: str
    port: int
    label: str | None  # the port's label, when it was asked for by label

    def order(self, session_id: str) -> TunnelOrder:
        return TunnelOrder(session_id=session_id, attempt_id=self.attempt_id, port=self.port)

    @property
    def key(self) -> str:
        """A name for the target as a host name (the HTTP proxy's connection pool keys on it)."""
        return f"a{self.attempt_id.replace('.', '-')}-p{self.port}"


def resolve(
    ctx: ServerContext,
    principal: Principal,
    job_ref: str,
    task: tuple[str, int] | None,
    port: str,
) -> TunnelTarget:
    """The port ``port`` (a label or one of the task's port numbers) of a RUNNING task of
    ``job_ref`` (``task`` None: index 0 of its first role), if ``principal`` may reach it: the
    job's owner, an admin, or one it is shared with (``services.job_shares``)."""
    with ctx.db.read() as session:
        job = job_for_ports(session, principal, job_ref)
        row = exec_sessions.current_task(session, job, task)
        if row.state != State.RUNNING.value:
            raise ApiError(409, "TaskNotRunningError", exec_sessions.not_running_message(job, row))
        number, label = _port(row, port)
        return TunnelTarget(job.id, row.role, row.index, row.attempt_id, row.node, number, label)


def _port(task: Task, wanted: str) -> tuple[int, str | None]:
    """(number, label) of the task's port named by label or number; 422 otherwise."""
    ports = {str(label): [int(p) for p in numbers] for label, numbers in task.ports}
    if ports.get(wanted):
        return ports[wanted][0], wanted
    if wanted.isdigit():
        for label, numbers in ports.items():
            if int(wanted) in numbers:
                return int(wanted), label
    listed = ", ".join(f"{label} ({','.join(map(str, n))})" for label, n in ports.items())
    hint = (
        f"name one by label or number: {listed}"
        if listed
        else "the task has none; give its role labelled ports in the job file to reach them"
    )
    raise ApiError(
        422,
        "NotATaskPortError",
        f"port {wanted!r} is not one of task {task.role}/{task.index}'s ports: {hint}",
        [{"path": "port", "message": f"not a port of the task: {wanted}"}],
    )


def prefix(job_id: str, role: str, index: int, label: str) -> str:
    """Where the proxy serves a task's labelled port: what the task gets as its base URL."""
    return f"{PROXY_PREFIX}/{job_id}/{role}/{index}/{label}/"


def proxy_env(key: bytes, job_id: str, task: Task) -> dict[str, str]:
    """What a task is told of the proxy: its token, and the base path of each labelled port
    (``SHOAL_PROXY_PREFIX`` is its primary port's, as ``SHOAL_PORT``)."""
    env = {"SHOAL_PROXY_TOKEN": proxy_token(key, task.attempt_id)}
    labels = [str(label) for label, _ in task.ports]
    for label in labels:
        env[f"SHOAL_PROXY_PREFIX_{label}"] = prefix(job_id, task.role, task.index, label)
    if labels:
        primary = PRIMARY_PORT_LABEL if PRIMARY_PORT_LABEL in labels else labels[0]
        env["SHOAL_PROXY_PREFIX"] = prefix(job_id, task.role, task.index, primary)
    return env


def proxy_token(key: bytes, attempt_id: str) -> str:
    """The secret an attempt's apps may require (``SHOAL_PROXY_TOKEN``); the proxy sends it as
    ``Authorization: token ...`` (Jupyter's form) with every request it forwards."""
    return hmac.new(key, b"shoal-proxy\0" + attempt_id.encode(), hashlib.sha256).hexdigest()


def ensure_proxy_key(home: Path) -> bytes:
    """The server's proxy key (HOME/proxy.key, 0600), made on first start."""
    path = home / PROXY_KEY_FILE
    with contextlib.suppress(FileExistsError):  # made by an earlier start (or a peer just now)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())
