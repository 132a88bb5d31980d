"""The REST API's request and response bodies (``/api/v1``). Changing them changes the OpenAPI
snapshot, which a test guards."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FormatName = Literal["auto", "native", "pai", "pai-v1", "maro"]


class ErrorBody(BaseModel):
    code: str
    message: str
    problems: list[dict[str, Any]] = Field(default_factory=list)


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: str = Field(description="The job file's text (any supported format).")
    format: FormatName = "auto"
    params: dict[str, str] = Field(default_factory=dict)
    name: str | None = Field(None, description="Override the job name.")
    virtual_cluster: str | None = None
    code_archive: str | None = Field(
        None, description="Base64 of a .tar.gz of the job's code directory."
    )


class ProblemOut(BaseModel):
    path: str
    message: str
    hint: str | None = None
    line: int | None = None


class SubmittedJob(BaseModel):
    id: str
    name: str
    state: str
    warnings: list[ProblemOut] = Field(default_factory=list)


class PendingReasonOut(BaseModel):
    code: str
    message: str
    position: int | None = None


class PendingDetail(BaseModel):
    id: str
    state: str
    virtualCluster: str
    code: str | None
    message: str | None
    position: int | None
    blockers: list[str] | None = Field(
        description="Running jobs that would have to finish or be preempted for it to fit "
        "(null: it would not fit even on an idle cluster)."
    )
    preempting: list[str] = Field(description="Jobs being preempted to make room for it.")


class TaskOut(BaseModel):
    role: str
    index: int
    attempt: int
    job_attempt: int
    state: str
    node: str
    address: str
    gpus: list[int]
    ports: dict[str, list[int]]
    pid: int | None
    exitCode: int | None
    exitClass: str | None
    diagnostics: str
    startedAt: float | None
    finishedAt: float | None
    usage: dict[str, Any]


class JobSummary(BaseModel):
    id: str
    name: str
    user: str
    virtualCluster: str
    state: str
    priorityClass: str
    submittedAt: float
    launchedAt: float | None
    completedAt: float | None
    attempt: int
    taskCount: int
    gpus: int
    exitClass: str | None
    exitCode: int | None
    pending: PendingReasonOut | None = None


class JobDetail(JobSummary):
    diagnostics: str
    format: str
    roles: list[dict[str, Any]]
    tasks: list[TaskOut]


class EventOut(BaseModel):
    at: float
    kind: str
    message: str
    role: str | None = None
    index: int | None = None


class LogChunk(BaseModel):
    role: str
    index: int
    attempt: int
    stream: Literal["stdout", "stderr"]
    offset: int
    nextOffset: int
    data: str
    complete: bool = Field(description="True once the task has finished and all of it was read.")


class NodeOut(BaseModel):
    name: str
    address: str
    state: str
    schedulable: bool
    cpus: float
    memoryMiB: int
    gpus: int
    gpuType: str | None
    allocated: dict[str, float]
    lastSeen: float
    usage: dict[str, Any]
    busyPorts: list[int] = Field(
        default_factory=list,
        description="Ports of the node's task-port range held by other processes (not handed out).",
    )


class ClusterStatus(BaseModel):
    url: str
    version: str
    nodes: list[NodeOut]
    totals: dict[str, float]
    allocated: dict[str, float]
    jobs: dict[str, int]


class StopResult(BaseModel):
    id: str
    state: str


# ---- agent protocol ----


class AgentNode(BaseModel):
    name: str
    address: str
    cpu_millis: int
    memory_mib: int
    gpu_indices: list[int]
    gpu_type: str | None = None
    port_low: int
    port_high: int
    usage: dict[str, Any] = Field(default_factory=dict)
    busy_ports: list[int] = Field(
        default_factory=list,
        description="Ports of the range held by processes that are not this agent's tasks.",
    )


class RunningReport(BaseModel):
    attempt_id: str
    pid: int
    started_at: float
    usage: dict[str, Any] = Field(default_factory=dict)


class ExitReport(BaseModel):
    attempt_id: str
    exit_code: int | None
    signal: int | None = None
    stop_requested: bool = False
    timed_out: bool = False
    launch_error: str | None = None
    busy_port: int | None = Field(
        None, description="The launch was refused: this port of the task was already in use."
    )
    started_at: float | None = None
    finished_at: float
    usage: dict[str, Any] = Field(default_factory=dict)


class ReportRequest(BaseModel):
    agent_id: str
    nodes: list[AgentNode]
    running: list[RunningReport] = Field(default_factory=list)
    exited: list[ExitReport] = Field(default_factory=list)


class ReportResponse(BaseModel):
    acked: list[str] = Field(default_factory=list)
    kill: list[str] = Field(default_factory=list, description="Attempts that must not run.")


class OrdersRequest(BaseModel):
    agent_id: str
    nodes: list[str]
    known: list[str] = Field(default_factory=list, description="Attempts the agent already has.")
    wait_s: float = Field(0.0, ge=0, le=30)


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
    deadline_s: float | None = None
    kill_grace_s: float
    ports: dict[str, list[int]] = Field(
        default_factory=dict, description="The task's ports by label, probed before launch."
    )


class OrdersResponse(BaseModel):
    launch: list[LaunchOrder] = Field(default_factory=list)
    kill: list[str] = Field(default_factory=list)


class LogUpload(BaseModel):
    attempt_id: str
    stream: Literal["stdout", "stderr"]
    offset: int = Field(ge=0)
    data: str = Field(description="Base64 of the bytes at this offset.")


class LogUploadRequest(BaseModel):
    chunks: list[LogUpload]


class LogUploadResponse(BaseModel):
    sizes: dict[str, dict[str, int]]


# ---- virtual clusters ----


class VirtualClusterIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    guarantee_cpu: float | None = Field(None, ge=0, description="None: cores are not limited.")
    guarantee_memory_mib: int | None = Field(None, ge=0, description="None: not limited.")
    guarantee_gpu: int = Field(0, ge=0)
    guarantee_gpu_by_type: dict[str, int] = Field(
        default_factory=dict, description="Guaranteed GPUs per GPU type, e.g. {A100: 4}."
    )
    borrow_cpu: float | None = Field(None, ge=0, description="None: may borrow any idle cores.")
    borrow_memory_mib: int | None = Field(None, ge=0)
    borrow_gpu: int | None = Field(None, ge=0, description="None: may borrow any idle GPUs.")
    user_gpu_cap: int | None = Field(None, ge=0, description="GPUs one user may hold in it.")
    preempt_within: bool = Field(True, description="Higher classes may preempt lower ones.")
    members: list[str] = Field(default_factory=list, description="Users and groups.")


class VirtualClusterOut(BaseModel):
    name: str
    description: str
    guarantee: dict[str, float]
    gpuByType: dict[str, int]
    borrowLimit: dict[str, float] | None
    used: dict[str, float]
    userGpuCap: int | None
    preemptWithin: bool
    members: list[str]
    clusterTotal: dict[str, float]


# ---- users and tokens ----


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    admin: bool = False
    groups: list[str] = Field(default_factory=list)
    password: str | None = Field(None, description="For OpenPAI-style basic login.")


class UserOut(BaseModel):
    name: str
    admin: bool
    groups: list[str]


class NewUser(UserOut):
    token: str = Field(description="The user's first API token; shown once.")


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = ""
    expires_in_s: float | None = Field(None, gt=0, description="None: does not expire.")
    application: bool = Field(False, description="Limited to job operations.")


class TokenOut(BaseModel):
    id: int
    user: str
    kind: str
    label: str
    createdAt: float
    expiresAt: float | None
    revoked: bool


class NewToken(TokenOut):
    token: str = Field(description="The secret; shown once, stored only as a hash.")


class Me(BaseModel):
    name: str
    admin: bool
    groups: list[str]
    tokenKind: str
