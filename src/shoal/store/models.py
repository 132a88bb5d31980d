"""Tables of the store: the single source of truth for users, nodes, jobs, tasks and events."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# A node's name may be as long as a Kubernetes Node's (a DNS subdomain); the agents' protocol
# checks the same length (protocol.NODE_NAME_CHARS)
NODE_NAME_CHARS = 253


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    groups: Mapped[list[Any]] = mapped_column(JSON, default=list)
    password_hash: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # OpenPAI's profile fields (/api/v2/users): shoal keeps them, nothing else reads them
    email: Mapped[str] = mapped_column(String(255), default="", server_default="")
    extension: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")


class UserGroup(Base):
    """A group's own attributes, as OpenPAI's ``/api/v2/groups`` has them. Who is in a group is
    ``users.groups``; which VCs it may use is ``virtual_clusters.members``. A name in some user's
    ``groups`` with no row here is a group too, with empty attributes."""

    __tablename__ = "user_groups"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    external_name: Mapped[str] = mapped_column(String(255), default="")
    extension: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[float] = mapped_column(Float)


class Token(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # user | application | agent
    label: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Node(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(NODE_NAME_CHARS), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(128))
    address: Mapped[str] = mapped_column(String(255))
    cpu_millis: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    gpu_indices: Mapped[list[Any]] = mapped_column(JSON)
    gpu_type: Mapped[str | None] = mapped_column(String(64), nullable=True)
    port_low: Mapped[int] = mapped_column(Integer)
    port_high: Mapped[int] = mapped_column(Integer)
    # ports of the range held by processes that are not shoal's tasks, as the agent last saw them
    busy_ports: Mapped[list[Any]] = mapped_column(JSON, default=list, server_default="[]")
    # shoal.core.nodestates: ``state`` is the liveness (READY | NOT_READY), ``hold`` the
    # administrator's NONE | CORDONED | DRAINING; ``schedulable`` is true when ``hold`` is NONE
    schedulable: Mapped[bool] = mapped_column(Boolean, default=True)
    state: Mapped[str] = mapped_column(String(16), default="READY")
    hold: Mapped[str] = mapped_column(String(16), default="NONE", server_default="NONE")
    agent_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # rises each time the node goes NOT_READY: launches carry it, reports of older ones are stale
    epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_seen: Mapped[float] = mapped_column(Float)
    registered_at: Mapped[float] = mapped_column(Float)
    usage: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    # what the agent cannot do here, with why: "container", "memory", "cpu", "pids", "shm"
    unsupported: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    # "lease" (shoal's agents) or "confirmed" (Kubernetes: tasks end only when the agent says)
    fencing: Mapped[str] = mapped_column(String(16), default="lease", server_default="lease")
    # why the platform keeps new tasks off it (a cordoned Kubernetes Node); None: it does not
    platform_hold: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # how peers reach its tasks: a pattern of {job}, {role}, {index}; None: the node's address
    task_address: Mapped[str | None] = mapped_column(String(255), nullable=True)


class JoinTokenRow(Base):
    """A token agents join with (``shoal node token create``): only its secret's hash is kept."""

    __tablename__ = "join_tokens"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_uses: Mapped[int | None] = mapped_column(Integer, nullable=True)  # None: any number
    uses: Mapped[int] = mapped_column(Integer, default=0)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class NodeCertRow(Base):
    """A client certificate signed for a node at join or at a renewal; ``revoked_at`` set by
    ``node remove`` (every certificate of the node) and by a CA rotation's finish (those of the
    old CA). A node's newest unrevoked certificate is its current one: only it may renew."""

    __tablename__ = "node_certs"
    __table_args__ = (Index("ix_node_certs_node", "node"),)

    serial: Mapped[str] = mapped_column(String(64), primary_key=True)  # hex
    node: Mapped[str] = mapped_column(String(NODE_NAME_CHARS))
    fingerprint: Mapped[str] = mapped_column(String(64))  # SHA-256 of the DER, hex
    join_token: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    issued_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The CA that signed it and the node key it certifies (public-key hashes; migration 0025:
    # NULL for certificates recorded before it, all signed by the first CA).
    ca_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    key_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state", "state"),
        Index("ix_jobs_user_name", "user", "name"),
        # `job list` by state, newest first, parents and plain jobs only: answered from this
        # index alone (sorting 10,000 active jobs' rows to keep 100 took ~5 ms, this ~0.05 ms)
        Index("ix_jobs_listing", "state", "array_job_id", "seq", "id"),
        # elements only (partial): a listing's "array_job_id IS NULL" keeps the seq index
        Index(
            "ix_jobs_array",
            "array_job_id",
            "state",
            "array_held",
            "array_index",  # the held elements in index order, without a sort
            sqlite_where=text("array_job_id IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # submission order; the job's id is its seq. An array element's is negative
    # (-(parent's seq x 10^6 + index)): it takes no id, and listings by seq never scan elements.
    seq: Mapped[int] = mapped_column(Integer, unique=True)
    name: Mapped[str] = mapped_column(String(255))
    user: Mapped[str] = mapped_column(String(64))
    virtual_cluster: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer, default=1)
    priority: Mapped[int] = mapped_column(Integer)
    priority_class: Mapped[str] = mapped_column(String(8))
    submitted_at: Mapped[float] = mapped_column(Float)
    launched_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    completed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    job_retry_count: Mapped[int] = mapped_column(Integer, default=0)
    source_format: Mapped[str] = mapped_column(String(16))
    source_text: Mapped[str] = mapped_column(Text)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    secrets: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    has_code: Mapped[bool] = mapped_column(Boolean, default=False)
    # the sha256 of the job's code archive (the server's blob store); None for a job without
    # code or one stored before code was content-addressed (its archive is code/{id}.tar.gz)
    code_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # the data sets the job declares, pinned at submission: reference as written ->
    # {owner, name, sha256, kind, size}
    data_sets: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    # the submitting shell's variables (None: the agent's minimal environment); like secrets,
    # never returned by the API
    inherited_env: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    submit_dir: Mapped[str | None] = mapped_column(Text, nullable=True)
    stop_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    completing: Mapped[str | None] = mapped_column(String(16), nullable=True)
    exit_class: Mapped[str | None] = mapped_column(String(32), nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    diagnostics: Mapped[str] = mapped_column(Text, default="")
    pending_code: Mapped[str | None] = mapped_column(String(32), nullable=True)
    pending_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    preempted_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Attempts that went back to the queue, by cause (OpenPAI's retryDetails).
    retries_user: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    retries_platform: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    retries_resource: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Job arrays (docs/arrays.md). A parent has ``array_size`` (its element count) and
    # ``array_cap`` (None: no cap) and no tasks of its own; an element has ``array_job_id`` (the
    # parent's id) and ``array_index``, and its id is ``PARENT_INDEX``. ``array_held``: the job is
    # not for the scheduler: a parent, or an element held back by its array's cap.
    array_job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    array_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    array_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    array_cap: Mapped[int | None] = mapped_column(Integer, nullable=True)
    array_held: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # A container job that names an image no one has pushed yet waits for it (``ImageNotFound``)
    # outside the scheduler's queue: the first such image (services/image_holds.py). None: the
    # job is the scheduler's to place.
    missing_image: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # who else may reach the job's tasks' ports (docs/proxy.md): {"users": [...], "groups": [...]}
    shares: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")


class Task(Base):
    """One instance of a role in one job attempt; ``attempt`` counts in-place task retries."""

    __tablename__ = "tasks"
    __table_args__ = (
        Index("ix_tasks_job", "job_id"),
        Index("ix_tasks_state", "state"),
        Index("ix_tasks_node", "node"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    job_attempt: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(64))
    index: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(16))
    node: Mapped[str] = mapped_column(String(NODE_NAME_CHARS))
    address: Mapped[str] = mapped_column(String(255))
    cpu_millis: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    gpu_indices: Mapped[list[Any]] = mapped_column(JSON)
    ports: Mapped[list[Any]] = mapped_column(JSON)
    launch_acked: Mapped[bool] = mapped_column(Boolean, default=False)
    kill_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_class: Mapped[str | None] = mapped_column(String(32), nullable=True)
    diagnostics: Mapped[str] = mapped_column(Text, default="")
    usage: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # what the earlier attempts of a task retried in place used (accounting.fold_attempt)
    earlier_usage: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    log_bytes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    @property
    def attempt_id(self) -> str:
        return f"{self.id}.{self.attempt}"


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (Index("ix_events_job", "job_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    role: Mapped[str | None] = mapped_column(String(64), nullable=True)
    index: Mapped[int | None] = mapped_column(Integer, nullable=True)


class NodeEventRow(Base):
    """What happened to a node and when (state changes, joins), in words."""

    __tablename__ = "node_events"
    __table_args__ = (Index("ix_node_events_node", "node"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(NODE_NAME_CHARS))
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    by: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the user, for admin acts


class VirtualClusterRow(Base):
    """A team's share of the cluster. ``guarantee_cpu/memory`` None: not limited by the quota;
    ``borrow_*`` None: may borrow any idle capacity."""

    __tablename__ = "virtual_clusters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    guarantee_cpu_millis: Mapped[int | None] = mapped_column(Integer, nullable=True)
    guarantee_memory_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    guarantee_gpu: Mapped[int] = mapped_column(Integer, default=0)
    borrow_cpu_millis: Mapped[int | None] = mapped_column(Integer, nullable=True)
    borrow_memory_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    borrow_gpu: Mapped[int | None] = mapped_column(Integer, nullable=True)
    user_gpu_cap: Mapped[int | None] = mapped_column(Integer, nullable=True)
    preempt_within: Mapped[bool] = mapped_column(Boolean, default=True)
    strict_fifo: Mapped[bool] = mapped_column(Boolean, default=False)
    # attained-service aging, {"policy": "las", "thresholds_gpu_hours": [...]}; None: off
    aging: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    members: Mapped[list[Any]] = mapped_column(JSON, default=list)  # user and group names
    gpu_by_type: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # type -> GPUs
    created_at: Mapped[float] = mapped_column(Float)
    # interactive jobs idle this long are stopped (docs/notebooks.md); None: never
    idle_timeout_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class DataSetRow(Base):
    """A data set: a file or a directory (stored as a tar) in the server's blob store under its
    sha256; named per owner. ``shares``: {"users": [...], "groups": [...], "vcs": [...]}."""

    __tablename__ = "data_sets"
    __table_args__ = (Index("ix_data_sets_owner_name", "owner", "name", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(128))
    sha256: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(8))  # file | dir
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)
    shares: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class SchedChange(Base):
    """One changed job, node or VC for the scheduler's model to reload; written by triggers
    (migration 0017), deleted once the model has read it."""

    __tablename__ = "sched_changes"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012 (SQLAlchemy reads it)

    seq: Mapped[int] = mapped_column(  # SQLite's rowid is 64 bits; PostgreSQL's BIGINT (0030)
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    kind: Mapped[str] = mapped_column(String(8))  # job | node | vc
    key: Mapped[str] = mapped_column(String(255))


class JobTag(Base):
    """A free-form label on a job (OpenPAI's job tags; migration 0019)."""

    __tablename__ = "job_tags"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(256), primary_key=True)


class ImageRow(Base):
    """A pushed container image (``shoal image push``): its archive is in the blob store under
    ``blob_sha256``; ``name`` is NAME:TAG and moves to the new image when pushed again."""

    __tablename__ = "images"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    image_id: Mapped[str] = mapped_column(String(64))  # the sha256 of the image's config
    blob_sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    pushed_by: Mapped[str] = mapped_column(String(64))
    pushed_at: Mapped[float] = mapped_column(Float)


class JobImage(Base):
    """An image a container job's roles run (an array's parent stands for its elements)."""

    __tablename__ = "job_images"
    __table_args__ = (Index("ix_job_images_image", "image"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    image: Mapped[str] = mapped_column(String(255), primary_key=True)


class ExecSessionRow(Base):
    """One `shoal job exec` or dashboard terminal session (the audit log, migration 0022):
    written when it starts and again when it ends (``end_reason``; docs/terminal.md)."""

    __tablename__ = "exec_sessions"
    __table_args__ = (
        Index("ix_exec_sessions_started", "started_at"),
        Index("ix_exec_sessions_user", "user"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(64))  # no foreign key: the log outlives the job
    role: Mapped[str] = mapped_column(String(64))
    index: Mapped[int] = mapped_column(Integer)
    attempt_id: Mapped[str] = mapped_column(String(32))
    node: Mapped[str] = mapped_column(String(NODE_NAME_CHARS))
    argv: Mapped[list[Any]] = mapped_column(JSON)
    tty: Mapped[bool] = mapped_column(Boolean)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    end_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)


class AuditEventRow(Base):
    """One security-relevant action (the audit log, migration 0023; docs/audit.md), written in
    the same transaction as the change it records. ``detail`` never holds a secret."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("ix_audit_events_at", "at"),
        Index("ix_audit_events_actor", "actor", "at"),
        Index("ix_audit_events_action_target", "action", "target"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))  # a user, `node:NAME`, or `-` (nobody)
    action: Mapped[str] = mapped_column(String(48))  # e.g. login, token.create, vc.update
    target: Mapped[str] = mapped_column(String(256))  # what it acted on, e.g. `user alice`
    outcome: Mapped[str] = mapped_column(String(16))  # ok | refused
    client: Mapped[str] = mapped_column(String(64))  # the caller's address, or `-`
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class SshKeyRow(Base):
    """An SSH public key a user registered (migration 0026; docs/ssh.md): installed in the
    ``authorized_keys`` of the tasks of the user's jobs that run the ``ssh`` runtime plugin."""

    __tablename__ = "ssh_keys"

    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    public_key: Mapped[str] = mapped_column(Text)  # one line, as OpenSSH writes it
    fingerprint: Mapped[str] = mapped_column(String(64))  # SHA256:base64, as ssh-keygen -l says
    created_at: Mapped[float] = mapped_column(Float)


class CloudInstanceRow(Base):
    """A machine a pool asked a provider for (migration 0029; docs/cloud.md). Written before the
    provider is asked; ``ended_at`` set once it is gone; kept for node-hours and cost."""

    __tablename__ = "cloud_instances"
    __table_args__ = (
        Index("ix_cloud_instances_pool", "pool", "ended_at"),
        Index("ix_cloud_instances_node", "node"),
    )

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool: Mapped[str] = mapped_column(String(32))
    provider: Mapped[str] = mapped_column(String(32))
    node: Mapped[str] = mapped_column(String(NODE_NAME_CHARS))  # the name its agent joins as
    phase: Mapped[str] = mapped_column(String(16))  # shoal.core.autoscale.Phase, or "ended"
    offer_key: Mapped[str | None] = mapped_column(String(160), nullable=True)
    instance_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    price_per_hour: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # what the machine's offer has: a task's share of it is its share of the price (costs.py)
    cpu_millis: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    memory_mib: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    gpus: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    spot: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    launched_at: Mapped[float] = mapped_column(Float)
    joined_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    idle_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    removal_cause: Mapped[str | None] = mapped_column(String(32), nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)


class CloudOfferBlockRow(Base):
    """An offer not to try until ``until`` (``provider:offer key``): quota refused, or a
    machine of it never joined."""

    __tablename__ = "cloud_offer_blocks"

    offer: Mapped[str] = mapped_column(String(200), primary_key=True)
    until: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text)


class CloudPoolTargetRow(Base):
    """A pool's size set by `shoal cluster scale POOL N`: held as the pool's minimum."""

    __tablename__ = "cloud_pool_targets"

    pool: Mapped[str] = mapped_column(String(32), primary_key=True)
    target: Mapped[int] = mapped_column(Integer)
    set_by: Mapped[str] = mapped_column(String(64))
    set_at: Mapped[float] = mapped_column(Float)


class SchedulerLeaseRow(Base):
    """Who runs scheduling cycles (migration 0031; services/scheduler_lease.py). ``holder``: the
    server (host and home) whose scheduler holds it; ``incarnation``: that scheduler's run;
    ``token``: raised at every takeover, checked by every plan's write."""

    __tablename__ = "scheduler_lease"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(512))
    incarnation: Mapped[str] = mapped_column(String(64))
    token: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[float] = mapped_column(Float)
    acquired_at: Mapped[float] = mapped_column(Float)


class PublishedPositionsRow(Base):
    """The leading scheduler's queue positions for the other servers on the store (migration
    0033; server/shared_positions.py): each queue's job ids in order, one queue per line block.
    ``token``: the lease's, so a stale leader cannot overwrite a newer one's."""

    __tablename__ = "published_positions"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)
    published_at: Mapped[float] = mapped_column(Float)
    queues: Mapped[str] = mapped_column(Text)
