"""Server settings: where state lives and the timings of the control loops."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from shoal.paths import default_home

__all__ = ["FencingError", "ServerSettings", "default_home"]

# Fencing (docs/cluster.md, "Fencing"): an agent whose reports have not been acknowledged for its
# lease stops its tasks, and they are all dead before the server can declare its nodes NOT_READY
# and place their tasks elsewhere:
#
#     lease_s + kill_grace_s + heartbeat_write_s + FENCE_MARGIN_S <= node_timeout_s
#
# ``heartbeat_write_s``: the server writes a node's ``last_seen`` at most this often, so it may lag
# the last report by that much. The margin covers the tasks' lease checks (every 0.25 s), a
# signal's delivery and the two clocks' rates.
FENCE_MARGIN_S = 1.0
# Agents report at least every 2 s: a shorter lease would stop tasks of a healthy agent.
MIN_LEASE_S = 3.0
HEARTBEAT_MIN_S, HEARTBEAT_MAX_S = 2.0, 10.0  # ServerSettings.heartbeat_s


# How long a node certificate lasts (docs/cluster.md, "Certificate renewal"): a year, unless
# $SHOAL_NODE_CERT_LIFETIME_S (seconds) in the server's environment says otherwise (tests issue
# 20-second certificates to watch them renew).
NODE_CERT_LIFETIME_ENV = "SHOAL_NODE_CERT_LIFETIME_S"
NODE_CERT_LIFETIME_S = 365 * 86400.0
MIN_NODE_CERT_LIFETIME_S = 10.0


# How long a failed task of a debug role is held when its role does not say (docs/debug-jobs.md):
# a day, unless $SHOAL_DEBUG_HOLD_S (seconds) in the server's environment says otherwise.
DEBUG_HOLD_ENV = "SHOAL_DEBUG_HOLD_S"
DEBUG_HOLD_S = 24 * 3600.0


def debug_hold_from_env() -> float:
    """$SHOAL_DEBUG_HOLD_S, or a day; anything but a positive number of seconds is an error
    naming the variable."""
    text = os.environ.get(DEBUG_HOLD_ENV, "").strip()
    if not text:
        return DEBUG_HOLD_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(
            f"${DEBUG_HOLD_ENV}={text!r}: must be a positive number of seconds (unset: a day)"
        )
    return value


class FencingError(ValueError):
    """The node timeout leaves no room for a lease (see ``ServerSettings.check_fencing``)."""


def node_cert_lifetime_from_env() -> float:
    """$SHOAL_NODE_CERT_LIFETIME_S, or a year; a value that is not a number of seconds of at
    least 10 is an error naming the variable."""
    text = os.environ.get(NODE_CERT_LIFETIME_ENV, "").strip()
    if not text:
        return NODE_CERT_LIFETIME_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not MIN_NODE_CERT_LIFETIME_S <= value < float("inf"):
        raise ValueError(
            f"${NODE_CERT_LIFETIME_ENV}={text!r}: must be a number of seconds, at least "
            f"{MIN_NODE_CERT_LIFETIME_S:g} (unset: a year)"
        )
    return value


IDLE_SWEEP_ENV = "SHOAL_IDLE_SWEEP_S"


def idle_sweep_from_env() -> float:
    """$SHOAL_IDLE_SWEEP_S, or 30 s; anything but a positive number is an error naming it."""
    text = os.environ.get(IDLE_SWEEP_ENV, "").strip()
    try:
        value = float(text) if text else 30.0
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(f"${IDLE_SWEEP_ENV}={text!r}: must be a positive number of seconds")
    return value


AUTOSCALE_ENV = "SHOAL_AUTOSCALE_S"


def autoscale_interval_from_env() -> float:
    """$SHOAL_AUTOSCALE_S, or 10 s; anything but a positive number is an error naming it."""
    text = os.environ.get(AUTOSCALE_ENV, "").strip()
    try:
        value = float(text) if text else 10.0
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(f"${AUTOSCALE_ENV}={text!r}: must be a positive number of seconds")
    return value


@dataclass(frozen=True, slots=True)
class ServerSettings:
    home: Path
    host: str = "127.0.0.1"
    port: int = 8476
    database_url: str | None = None
    # where task logs and uploaded blobs live (None: the home). Several servers on one store
    # share one (a shared filesystem): docs/postgresql.md, "Several servers"
    files_dir: Path | None = None
    scheduler_interval_s: float = 2.0  # fallback wake-up; events wake the loop at once
    node_timeout_s: float = 30.0  # an agent silent this long loses its nodes
    kill_grace_s: float = 10.0  # SIGTERM, then SIGKILL after this long
    max_upload_bytes: int = 100 * 1024 * 1024  # a code archive (PUT /api/v1/code)
    # Request limits (docs/limits.md; 0 turns one off). Bodies: JSON and YAML (submissions,
    # users, VCs...); data set and image pushes, streamed to disk (no limit but the disk).
    max_body_bytes: int = 1024 * 1024
    max_push_bytes: int = 0
    # Rates per user (the admin, agents and nodes are not limited), per client address for
    # callers without a valid credential; kept in the server process's memory.
    rate_limit_requests_per_min: int = 3000
    rate_limit_submissions_per_hour: int = 1000
    rate_limit_anonymous_per_min: int = 600
    # A server on the network (`shoal server start`): HTTPS only with HOME/pki, agents join with
    # tokens and call with their node certificates. False: local mode, plain HTTP on loopback.
    tls: bool = False
    # The task proxy's own port (docs/proxy.md): None, no proxy; 0, any free port.
    proxy_port: int | None = None
    # True when proxy_port was a default (`shoal up`'s API port + 1), not the user's choice: if
    # it is taken by the time the server binds, the proxy listens on any free port instead.
    proxy_port_fallback: bool = False
    # One scheduling cycle's budget (core/budget.py; measured defaults in docs/benchmarks.md).
    cycle_deadline_ms: float = 40.0  # a cycle stops examining the deep queue after this long
    cycle_backfill_jobs: int = 2_000  # jobs examined past the VC heads per cycle
    model_verify_s: float = 60.0  # how often the scheduler's model is checked against the store
    # Several servers on one store (docs/postgresql.md, "One scheduler"): only the holder of the
    # scheduler lease runs cycles; it renews a third of the way through, and another server
    # takes over once it has expired (checked as often as it is renewed).
    scheduler_lease_s: float = 6.0
    # Where cycles run (docs/architecture.md, "The scheduler process"): "process", a child
    # process of the server's own, so no cycle holds the API's interpreter; "thread", a thread
    # of the server's process (a throw-away ``shoal run`` server, and tests driving cycles).
    scheduler: Literal["process", "thread"] = "process"
    # How a job runs when neither its file (``runtime:``) nor its submission (``--runtime``) says
    # (docs/containers.md): "process", child processes of the agent; "container", podman.
    default_runtime: Literal["process", "container"] = "process"
    # Free space kept under the home for the database (docs/disk.md): below the smaller of these,
    # submissions are refused with 507 StorageFull and stored task logs stop growing.
    storage_reserve_bytes: int = 64 * 1024 * 1024
    storage_reserve_fraction: float = 0.05  # of the filesystem holding the home
    # Nodes from a Kubernetes cluster (docs/kubernetes.md): the server keeps a token for the
    # Kubernetes agent (HOME/kubernetes.token), which it may start beside itself.
    kubernetes: bool = False
    kubeconfig: str | None = None  # None: in-cluster config, else $KUBECONFIG or ~/.kube/config
    kubernetes_namespace: str = "default"
    # How long the node certificates it signs (at join and renewal) last, in seconds.
    node_cert_lifetime_s: float = field(default_factory=node_cert_lifetime_from_env)
    # How long a failed debug task is held when its role does not say, in seconds.
    debug_hold_s: float = field(default_factory=debug_hold_from_env)
    # How often interactive jobs are checked against their VC's idle timeout (docs/notebooks.md):
    # 30 s, unless $SHOAL_IDLE_SWEEP_S says otherwise (tests check every second).
    idle_sweep_s: float = field(default_factory=idle_sweep_from_env)
    # Cloud node pools (docs/cloud.md): the cloud file (None: no pools), how often the
    # autoscaler looks ($SHOAL_AUTOSCALE_S, 10 s), the URL new machines join (None: ``url``),
    # and how long an offer refused for quota, or whose machine never joined, is not tried.
    cloud_file: Path | None = None
    autoscale_interval_s: float = field(default_factory=autoscale_interval_from_env)
    cloud_join_url: str | None = None
    offer_block_s: float = 600.0

    @property
    def heartbeat_write_s(self) -> float:
        """How often a node's heartbeat (``last_seen``) is written (a fraction of the timeout)."""
        return min(5.0, self.node_timeout_s / 4)

    @property
    def lease_s(self) -> float:
        """How long an agent's tasks may run on after its last acknowledged report was sent."""
        return self.node_timeout_s - self.heartbeat_write_s - self.kill_grace_s - FENCE_MARGIN_S

    @property
    def heartbeat_s(self) -> float:
        """How often an agent with nothing new reports: three reports per lease, so one lost
        report never lapses it; at least as often as it used to (2 s), at most every 10 s."""
        return min(max(self.lease_s / 3, HEARTBEAT_MIN_S), HEARTBEAT_MAX_S)

    def check_fencing(self) -> None:
        """Raise ``FencingError`` naming the settings when the lease would be too short."""
        if self.lease_s >= MIN_LEASE_S:
            return
        needed = MIN_LEASE_S + self.kill_grace_s + FENCE_MARGIN_S
        # the heartbeat write interval comes on top: a quarter of the timeout, at most 5 s
        needed = needed / 0.75 if needed / 0.75 <= 20.0 else needed + 5.0
        raise FencingError(
            f"--node-timeout {self.node_timeout_s:g}s is too short for --kill-grace "
            f"{self.kill_grace_s:g}s: agents stop their tasks {self.lease_s:g}s after their last "
            f"acknowledged report (node timeout - heartbeat write interval "
            f"{self.heartbeat_write_s:g}s - kill grace - margin {FENCE_MARGIN_S:g}s), and the "
            f"lease must be at least {MIN_LEASE_S:g}s; raise --node-timeout to "
            f"{_ceil_half(needed):g}s or more, or lower --kill-grace"
        )

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def logs_dir(self) -> Path:
        return (self.files_dir or self.home) / "logs"

    @property
    def code_dir(self) -> Path:
        """Code archives of jobs stored before code was content-addressed: {job_id}.tar.gz."""
        return (self.files_dir or self.home) / "code"

    @property
    def blobs_dir(self) -> Path:
        """Code archives and data sets by sha256 (``sha256/<hash>``; uploads under way: tmp/)."""
        return (self.files_dir or self.home) / "blobs"


def _ceil_half(value: float) -> float:
    return -(-value * 2 // 1) / 2
