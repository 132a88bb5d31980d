"""What agents and the server say to each other (``/api/v1/agent``), shared by both sides; the
sessions an agent relays (exec, tunnels) are in ``shoal.protocol.sessions``, re-exported here.

The agent imports this module and nothing of the server, the store, the planner or the core, so
an agent machine needs only the agent. These wire models are separate from the REST bodies
(``shoal.server.schemas``): a REST change never changes what agents speak.

Every agent request carries ``PROTOCOL_HEADER: PROTOCOL_VERSION`` and every answer of the agent
API carries the server's. Either side refuses a missing or different version with
``mismatch_message``; raise ``PROTOCOL_VERSION`` whenever a change here would break the other
side (a field renamed, removed or newly required, a meaning changed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from shoal.protocol.sessions import (
    DEFAULT_EXEC_ARGV,
    EXEC_ATTACH_S,
    EXEC_CONTROLS,
    EXEC_MARKER,
    EXEC_STDERR,
    EXEC_STDIN,
    EXEC_STDOUT,
    TUNNEL_CONTROLS,
    ExecOrder,
    TunnelOrder,
    exec_control,
    exec_data,
    exec_path,
    read_control,
    tunnel_control,
    tunnel_path,
)

# exec and tunnel sessions live in protocol/sessions.py: one protocol, both sides import it here
__all__ = [
    "DEFAULT_EXEC_ARGV",
    "EXEC_ATTACH_S",
    "EXEC_CONTROLS",
    "EXEC_MARKER",
    "EXEC_STDERR",
    "EXEC_STDIN",
    "EXEC_STDOUT",
    "TUNNEL_CONTROLS",
    "ExecOrder",
    "TunnelOrder",
    "exec_control",
    "exec_data",
    "exec_path",
    "read_control",
    "tunnel_control",
    "tunnel_path",
]

PROTOCOL_VERSION = 2  # 2: node epochs, attempt leases (fencing), fenced exits
NODE_NAME_CHARS = 253  # a Kubernetes Node name (a DNS subdomain); the store's node columns
TEXT_CHARS = 255  # the store's VARCHAR(255) columns (PostgreSQL enforces them; SQLite does not)
PROTOCOL_HEADER = "X-Shoal-Protocol"
# The HTTP status of a refused version (426 Upgrade Required) and the error code in its body.
MISMATCH_STATUS = 426
MISMATCH_CODE = "ProtocolMismatchError"

# Each simulated node of one machine gets this many task ports, the first from FIRST_SIMULATED_PORT
# (agents describe their nodes this way; the planner simulates nodes the same way).
PORTS_PER_SIMULATED_NODE = 1000
FIRST_SIMULATED_PORT = 20000


def parse_version(text: str | None) -> int | None:
    """The version a header names; None when it is absent or not a number."""
    if text is None or not text.strip().isdigit():
        return None
    return int(text)


def mismatch_message(agent: str | None, server: str | None) -> str:
    """Why an agent and a server cannot talk, naming both versions (as sent: None = absent) and
    which side to upgrade."""
    agent_version, server_version = parse_version(agent), parse_version(server)

    def speaks(version: int | None, text: str | None) -> str:
        if version is not None:
            return f"protocol {version}"
        if text is None:
            return "no protocol version (it predates protocol 1)"
        return f"an unknown protocol {text!r}"

    older = "agent" if (agent_version or 0) < (server_version or 0) else "server"
    return (
        f"the agent speaks {speaks(agent_version, agent)}, the server speaks "
        f"{speaks(server_version, server)}: upgrade the {older}"
    )


class ProtocolMismatch(Exception):
    """The other side speaks another protocol version: retrying cannot help."""


# A server on the network refuses a node credential for good with 403 and one of these codes:
# the node was removed (its certificate revoked), or the certificate is not one it signed for a
# node. The agent treats them as it treats a mismatch: it stops calling and exits.
NODE_REMOVED_CODE = "NodeRemovedError"
UNKNOWN_NODE_CERT_CODE = "UnknownNodeCertificateError"
REFUSED_FOR_GOOD = (NODE_REMOVED_CODE, UNKNOWN_NODE_CERT_CODE)


class CredentialRefused(ProtocolMismatch):
    """The server refuses this agent's credential for good (its node was removed): retrying
    cannot help either, so it is handled like a mismatch."""


# ---- joining a server on the network (``shoal agent join``) ----


class JoinRequest(BaseModel):
    """Sent over TLS verified against the CA the token pins; the key stays on the node."""

    token_id: str
    secret: str
    node: str
    csr: str = Field(description="PEM certificate signing request; CN = the node's name.")
    labels: dict[str, str] = Field(default_factory=dict)


class JoinResponse(BaseModel):
    node: str
    certificate: str = Field(description="The node's client certificate, PEM, signed by the CA.")
    ca: str = Field(
        description="The CA certificates to trust, PEM: the cluster's CA (and, while the CA "
        "rotates, the next one after it)."
    )
    expires_at: float


# ---- certificate renewal (docs/cluster.md, "Certificate renewal and CA rotation") ----


class RenewalRequest(BaseModel):
    """Sent over mutual TLS with the node's current certificate, which must be its newest."""

    csr: str = Field(
        description="PEM certificate signing request for a new key made on the node; CN = the "
        "node's name."
    )


class RenewalResponse(JoinResponse):
    """The renewed certificate (same node, new key and serial) and the CAs to trust now."""


class CertificateStatus(BaseModel):
    """What the server asks of the certificate the agent presented."""

    renew: bool = Field(
        description="Renew now, whatever its age: a CA rotation is under way and another CA "
        "signed it."
    )
    reason: str | None = None
    signing_ca: str = Field(
        description="SHA-256 of the public key of the CA that signs node certificates now."
    )


# ---- the agent's report (also its registration: the first report is its join) ----


class GpuMetrics(BaseModel):
    """One GPU as NVML sees it (a node whose GPUs are simulated reports none)."""

    index: int
    utilization_pct: float = Field(description="Busy share of the last sample period, 0-100.")
    memory_used_mib: float
    memory_total_mib: float


class NodeMetrics(BaseModel):
    """What a node uses, sampled by its agent (docs/metrics.md): its shoal tasks (from their
    cgroups or process trees) and its host. None: not measured (yet, or not here)."""

    tasks_cpu_millis: float | None = Field(
        None, description="CPU the node's tasks used since the previous report, in millicores."
    )
    tasks_memory_mib: float | None = Field(None, description="Memory the node's tasks hold now.")
    host_cpu_pct: float | None = Field(
        None, description="The host's busy CPU since the previous report, 0-100 (all cores)."
    )
    host_memory_used_mib: float | None = None
    host_memory_total_mib: float | None = None
    gpus: list[GpuMetrics] = Field(default_factory=list, description="Empty: no NVML here.")


class PreemptionNotice(BaseModel):
    """The machine's cloud said it will take the machine back (Azure Scheduled Events'
    ``Preempt``; docs/cloud.md): the server drains the node and requeues its jobs."""

    event_id: str
    not_before: float | None = Field(None, description="When, at the earliest (epoch seconds).")


def _clip(text: str | None) -> str | None:
    """Free text from a platform, cut to what the store's column holds."""
    return text if text is None or len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


class AgentNode(BaseModel):
    # identifiers longer than the store's columns are refused (422 naming the field), not cut
    name: str = Field(min_length=1, max_length=NODE_NAME_CHARS)
    address: str = Field(max_length=TEXT_CHARS)
    cpu_millis: int
    memory_mib: int
    gpu_indices: list[int]
    gpu_type: str | None = Field(None, max_length=64)
    port_low: int
    port_high: int
    usage: dict[str, Any] = Field(default_factory=dict)
    busy_ports: list[int] = Field(
        default_factory=list,
        description="Ports of the range held by processes that are not this agent's tasks.",
    )
    labels: dict[str, str] | None = Field(
        None, description="The node's labels (given at join); None: keep those stored."
    )
    unsupported: dict[str, str] | None = Field(
        None,
        description="What this node cannot do, with why: the runtime 'container' and the limits "
        "'memory', 'cpu', 'pids', 'shm'. None: an agent that does not say (keep those stored).",
    )
    metrics: NodeMetrics | None = Field(None, description="None: an agent that does not sample.")
    preemption: PreemptionNotice | None = Field(
        None, description="A notice that the machine's cloud will preempt it."
    )
    ready: bool = Field(
        True,
        description="False: the platform running the node says it is not ready (a Kubernetes "
        "Node's Ready condition). The node is NOT_READY, but its tasks are not lost: the agent "
        "says when each ends.",
    )
    platform_hold: Annotated[str | None, AfterValidator(_clip)] = Field(
        None,
        description="Why the platform keeps new tasks off the node (a cordoned Kubernetes Node, "
        "a NoSchedule taint); None: it does not.",
    )
    task_address: str | None = Field(
        None,
        max_length=TEXT_CHARS,
        description="How peers reach a task placed here, a pattern of {job}, {role} and {index} "
        "(each a dns_label): a Kubernetes Pod's DNS name in the pod-network mode. None: at the "
        "node's address.",
    )


def dns_label(text: str, limit: int = 40) -> str:
    """``text`` as (part of) one DNS label: lower case letters, digits and dashes. The server
    fills ``AgentNode.task_address`` with these and the agent names what it creates with them."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return cleaned[:limit].strip("-") or "x"


def task_address(pattern: str, job_id: str, role: str, index: int) -> str:
    return pattern.format(job=dns_label(job_id), role=dns_label(role), index=index)


class RunningReport(BaseModel):
    attempt_id: str
    pid: int
    started_at: float
    epoch: int = Field(0, description="The node epoch the attempt was launched under.")
    usage: dict[str, Any] = Field(default_factory=dict)
    held_exit_code: int | None = Field(
        None, description="Held for debugging (docs/debug-jobs.md): its command's exit code."
    )
    held_until: float | None = Field(None, description="When the agent ends the hold by itself.")


# Where, in an attempt's directory, a task's command may leave one line on why it failed (the
# OpenPAI runtime plugins' steps do, shoal.spec.openpai_plugin_script): reported with its exit.
EXIT_MESSAGE_FILE = ".shoal/exit-message"


class ExitReport(BaseModel):
    attempt_id: str
    exit_code: int | None
    signal: int | None = None
    stop_requested: bool = False
    timed_out: bool = False
    launch_error: str | None = None
    agent_shutdown: bool = Field(
        False, description="The agent stopped it because the agent itself was shutting down."
    )
    busy_port: int | None = Field(
        None, description="The launch was refused: this port of the task was already in use."
    )
    fenced: bool = Field(
        False,
        description="Stopped because no report of its agent was acknowledged within the lease.",
    )
    epoch: int | None = Field(
        0,
        description="The node epoch the attempt was launched under; None: it was never launched "
        "here (killed or refused before its launch order was taken).",
    )
    started_at: float | None = None
    finished_at: float
    usage: dict[str, Any] = Field(default_factory=dict)
    oom_killed: bool = Field(
        False, description="The memory limit's OOM killer ended the task's command."
    )
    oom_kills: int = Field(0, description="Processes of the task the OOM killer ended.")
    lost: bool = Field(
        False,
        description="The platform ended it, not its command: an evicted Pod, a Pod deleted "
        "by someone else, a removed node (a platform failure, retried).",
    )
    lost_reason: str | None = Field(None, description="What the platform said, for the user.")
    message: str | None = Field(
        None,
        description="What the task's command left for the user about its failure (its "
        f"{EXIT_MESSAGE_FILE}, or a Pod's termination message): a runtime plugin's step, say.",
    )


# How an agent's tasks are kept from running twice (docs/cluster.md, docs/kubernetes.md).
# "lease": each task's keeper stops it once the agent's lease runs out, so a silent agent's
# tasks are lost after the node timeout. "confirmed": nothing stops them on the agent's silence
# (Kubernetes Pods): the server never declares them lost; they end when the agent says so.
Fencing = Literal["lease", "confirmed"]


class ReportRequest(BaseModel):
    agent_id: str = Field(min_length=1, max_length=128)
    nodes: list[AgentNode]
    running: list[RunningReport] = Field(default_factory=list)
    exited: list[ExitReport] = Field(default_factory=list)
    agent_version: str | None = Field(
        None, max_length=64, description="The shoal version the agent runs."
    )
    fencing: Fencing = Field("lease", description="How this agent's tasks are fenced.")


class ReportResponse(BaseModel):
    acked: list[str] = Field(default_factory=list)
    kill: list[str] = Field(default_factory=list, description="Attempts that must not run.")
    lease_s: float = Field(
        description="The agent's lease: if no later report is acknowledged within this long of "
        "sending this one (the agent's monotonic clock), the agent stops its tasks (fencing)."
    )
    heartbeat_s: float | None = Field(
        None,
        description="How often to report when nothing changed (a third of the lease, 2-10 s); "
        "an agent reports at once when something did. None: the agent's own default.",
    )


# ---- orders ----


class OrdersRequest(BaseModel):
    agent_id: str
    nodes: list[str]
    known: list[str] = Field(default_factory=list, description="Attempts the agent already has.")
    wait_s: float = Field(0.0, ge=0, le=30)


class DataMount(BaseModel):
    """A data set a task reads: fetched to the node (cached by ``sha256``) before the task starts
    and found at ``$SHOAL_DATA_DIR/<ref>``."""

    ref: str = Field(description="The data set as the job names it: NAME or OWNER/NAME.")
    sha256: str
    kind: Literal["file", "dir"] = Field(description="dir: the blob is a tar of the directory.")
    size: int


DEFAULT_TASK_PIDS = 4096  # a task's processes and threads when its role does not say


class TaskLimits(BaseModel):
    """What a task is held to (cgroups in both runtimes; docs/containers.md)."""

    cpu_millis: int = Field(description="CPU quota (CFS): 500 is half a CPU.")
    memory_mib: int = Field(description="Memory, and memory plus swap: an OOM kill beyond it.")
    pids: int = Field(description="The most processes and threads the task may have at once.")
    shm_mib: int | None = Field(None, description="/dev/shm size; None: the runtime's default.")
    gpu_indices: list[int] = Field(default_factory=list, description="The GPUs it may see.")


class ImageRef(BaseModel):
    """A pushed image a container task runs (``shoal image push``)."""

    name: str = Field(description="As the job named it (NAME:TAG).")
    image_id: str = Field(description="The image's ID: the sha256 of its config, hex.")
    blob_sha256: str = Field(description="The pushed archive's sha256: how agents fetch it.")
    size: int = Field(description="The archive's size in bytes.")


def image_blob_path(attempt_id: str, sha256: str) -> str:
    """Where an agent downloads the image archive of an attempt it was told to launch."""
    return f"/api/v1/agent/attempts/{attempt_id}/image/{sha256}"


class LaunchOrder(BaseModel):
    attempt_id: str
    job_id: str
    role: str
    index: int
    node: str
    command: str
    env: dict[str, str]
    hostfile: str
    has_code: bool
    code_hash: str | None = Field(
        None,
        description="The sha256 of the code archive (fetched by attempt, cached by hash); None "
        "with has_code: a job stored before code was content-addressed (GET code/{job_id}).",
    )
    data: list[DataMount] = Field(default_factory=list, description="Data sets to fetch first.")
    deadline_s: float | None = None
    kill_grace_s: float
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="Each secret reference in the command, as written, and its value: filled in "
        "by the agent when it starts the task, never stored or logged.",
    )
    inherited_env: dict[str, str] | None = Field(
        None, description="The environment the task starts from (None: the agent's minimal one)."
    )
    workdir: str | None = Field(
        None, description="Where to start a task that has no code archive, if it exists here."
    )
    ports: dict[str, list[int]] = Field(
        default_factory=dict, description="The task's ports by label, probed before launch."
    )
    epoch: int = Field(description="The node's epoch: it rises each time the node goes NOT_READY.")
    runtime: Literal["process", "container"] = "process"
    image: ImageRef | None = Field(None, description="The image of a container task.")
    image_name: str | None = Field(
        None,
        description="The role's image as the job file names it, whatever its runtime; what a "
        "Kubernetes Pod runs (None: the agent's default image).",
    )
    limits: TaskLimits | None = Field(None, description="None: an order from an older server.")
    owner: str | None = Field(
        None, description="The job's user: whose identity the task runs under on the node."
    )
    owner_number: int | None = Field(
        None,
        description="The user's number in the store (stable, unique): an agent that maps users "
        "to a uid range gives this user uid base + number (None: an order of an older server).",
    )
    fetch_token: str | None = Field(
        None,
        repr=False,
        description="Kubernetes agents only: the attempt's credential for GET "
        "/api/v1/attempts/{id}/code and /data/{sha256}, given to its Pod through a Secret.",
    )
    debug_hold_s: float | None = Field(
        None,
        description="A debug task (docs/debug-jobs.md): held this long once its command fails "
        "(None: not held). A kill order for a held attempt releases it.",
    )


class OrdersResponse(BaseModel):
    launch: list[LaunchOrder] = Field(default_factory=list)
    kill: list[str] = Field(default_factory=list)
    exec: list[ExecOrder] = Field(
        default_factory=list, description="Sessions to attach to (`shoal job exec`, a terminal)."
    )
    tunnels: list[TunnelOrder] = Field(
        default_factory=list,
        description="Connections to a task's port to relay (port-forward, ssh, the task proxy).",
    )


def code_path(attempt_id: str) -> str:
    """Where an agent downloads the code archive of an attempt it was told to launch."""
    return f"/api/v1/agent/attempts/{attempt_id}/code"


def data_path(attempt_id: str, sha256: str) -> str:
    """Where an agent downloads a data set of an attempt it was told to launch."""
    return f"/api/v1/agent/attempts/{attempt_id}/data/{sha256}"


def fill_in(text: str, values: Mapping[str, str]) -> str:
    """``text`` with every key of ``values`` replaced by its value, in one pass (a value that
    looks like a reference is not substituted again): how the agent renders a launch order's
    ``secrets`` into its command."""
    if not values:
        return text
    pattern = re.compile("|".join(re.escape(key) for key in sorted(values, key=len, reverse=True)))
    return pattern.sub(lambda match: values[match.group(0)], text)


# ---- logs ----


class LogUpload(BaseModel):
    attempt_id: str
    stream: Literal["stdout", "stderr"]
    offset: int = Field(ge=0)
    data: str = Field(description="Base64 of the bytes at this offset.")
    at: float | None = Field(
        None, description="When the agent read these bytes (epoch s); the server's clock if absent."
    )


class LogUploadRequest(BaseModel):
    chunks: list[LogUpload]


class LogUploadResponse(BaseModel):
    sizes: dict[str, dict[str, int]]
