"""The REST API's request and response bodies (``/api/v1``). Changing them changes the OpenAPI
snapshot, which a test guards."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

FormatName = Literal["auto", "native", "pai", "pai-v1", "maro"]
# JSON's \u0000 and a lone \ud800 decode to text that cannot be stored, printed or exec'd
_UNUSABLE = re.compile(r"[\x00\ud800-\udfff]")


class UsableText(BaseModel):
    """A job request whose text besides the job file can be stored, printed and exec'd: no NUL
    and no lone UTF-16 surrogate (JSON's \\u0000 and \\ud800 decode to them). The job file's
    own are refused by its reader, naming the field."""

    # fields checked elsewhere, naming them (the job file by its reader, names by their rules)
    unchecked_text: ClassVar[frozenset[str]] = frozenset({"spec"})

    @model_validator(mode="after")
    def _usable_text(self) -> Self:
        for name, value in self:
            texts = value.items() if isinstance(value, dict) else [(value, None)]
            for key, item in texts:
                if name not in self.unchecked_text and any(
                    isinstance(t, str) and _UNUSABLE.search(t) for t in (key, item)
                ):
                    raise ValueError(
                        f"{name} holds a NUL character or a lone UTF-16 surrogate; remove it"
                    )
        return self


class ErrorBody(BaseModel):
    code: str
    message: str
    problems: list[dict[str, Any]] = Field(default_factory=list)


class SubmitRequest(UsableText):
    model_config = ConfigDict(extra="forbid")

    spec: str = Field(description="The job file's text (any supported format).")
    format: FormatName = "auto"
    params: dict[str, str] = Field(default_factory=dict)
    name: str | None = Field(None, description="Override the job name.")
    virtual_cluster: str | None = None
    code_archive: str | None = Field(
        None,
        description="Base64 of a .tar.gz of the job's code directory (small archives; "
        "`shoal job submit` uploads it with PUT /api/v1/code/{sha256} and sends code_hash).",
    )
    code_hash: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="The sha256 of the job's code archive, uploaded before (PUT /api/v1/code).",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables for every task (`--env`); they override the job file's env.",
    )
    environment: dict[str, str] | None = Field(
        None,
        description="The submitting shell's variables the tasks start from (local mode); stored "
        "with the job, never returned. Absent: the agent's minimal environment, with the "
        "agent's own Python first on PATH.",
    )
    workdir: str | None = Field(
        None,
        description="The directory the job was submitted from: tasks of a job without a code "
        "archive start there when it exists on their node (absent: an empty directory).",
    )
    array: str | None = Field(
        None,
        max_length=1000,
        description="Submit the job as an array (`--array`, docs/arrays.md): `0-999`, "
        "`1,3,5-9` or `0-99:2`, with `%N` to run at most N elements at once. Overrides the "
        "job file's `array`.",
    )
    runtime: Literal["process", "container"] | None = Field(
        None,
        description="How the job runs when its file does not say (`--runtime`): as processes or "
        "in containers from its roles' images. Absent: the server's default runtime.",
    )
    strict_images: bool = Field(
        False,
        description="Refuse the job (404 ImageNotFound, nothing stored) if an image it needs has "
        "not been pushed, instead of accepting it to wait for the image (`--strict-images`).",
    )


class ProblemOut(BaseModel):
    path: str
    message: str
    hint: str | None = None
    line: int | None = None


class ArrayOut(BaseModel):
    """A job array's elements (docs/arrays.md)."""

    expression: str = Field(description="As submitted, e.g. `0-999%50`.")
    size: int = Field(description="How many elements it has.")
    cap: int | None = Field(description="At most this many elements at once (null: no cap).")
    counts: dict[str, int] = Field(
        default_factory=dict, description="Elements per state (WAITING includes the held ones)."
    )
    held: int = Field(0, description="Waiting elements held back by the cap.")


class SubmittedJob(BaseModel):
    id: str
    name: str
    state: str
    warnings: list[ProblemOut] = Field(default_factory=list)
    array: ArrayOut | None = Field(None, description="Set when the job is an array's parent.")


class PendingReasonOut(BaseModel):
    code: str
    message: str
    position: int | None = None


class BlockerOut(BaseModel):
    id: str
    user: str
    name: str
    virtualCluster: str
    gpus: int = Field(description="GPUs the job holds now.")


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
    blockerDetails: list[BlockerOut] | None = Field(
        None, description="The blockers with their user, name and GPUs (null as for blockers)."
    )
    preemptingDetails: list[BlockerOut] = Field(default_factory=list)
    pools: list[str] = Field(
        default_factory=list,
        description="What it waits for from the cloud pools (docs/cloud.md), in words.",
    )


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


class Accounting(BaseModel):
    """A job's use, like Slurm's ``sacct``: see docs/scheduling.md#accounting."""

    elapsedS: float = Field(description="First task start to last task end (or now).")
    gpuHours: float = Field(description="Sum over task attempts of GPUs x run time.")
    cpuSeconds: float = Field(description="CPU time of the tasks' process trees.")
    peakMemoryMiB: float = Field(description="Largest resident memory of one task.")


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
    accounting: Accounting | None = Field(
        None, description="What the job used so far (all its attempts)."
    )
    nodes: list[str] = Field(
        default_factory=list, description="Nodes of the current attempt's tasks."
    )
    array: ArrayOut | None = Field(None, description="An array's parent: its elements.")
    arrayJobId: str | None = Field(None, description="An array element: its array's id.")
    arrayIndex: int | None = Field(None, description="An array element: its index.")


class Retries(BaseModel):
    """How often the job went back to the queue, by cause (OpenPAI's ``retryDetails``)."""

    user: int = Field(description="After its own failure (counts against `retries`).")
    platform: int = Field(description="After a platform failure (counts against `retries`).")
    resource: int = Field(description="Preempted, or its ports were taken (does not count).")


class ElementOut(BaseModel):
    """One element of a job array, as its parent's detail lists it."""

    id: str
    index: int
    state: str
    pending: PendingReasonOut | None = None
    launchedAt: float | None
    completedAt: float | None
    exitClass: str | None
    exitCode: int | None
    nodes: list[str] = Field(default_factory=list)


class JobDetail(JobSummary):
    diagnostics: str
    format: str
    roles: list[dict[str, Any]]
    tasks: list[TaskOut]
    retries: Retries
    elements: list[ElementOut] | None = Field(
        None, description="An array's parent: every element, by index (null for other jobs)."
    )


class PlanRequest(UsableText):
    model_config = ConfigDict(extra="forbid")

    spec: str = Field(description="The job file's text (any supported format).")
    format: FormatName = "auto"
    params: dict[str, str] = Field(default_factory=dict)
    virtual_cluster: str | None = None
    task: str | None = Field(None, description="ROLE/INDEX whose environment to return.")


class PlannedTask(BaseModel):
    role: str
    index: int
    node: str
    address: str
    gpus: list[int]
    ports: dict[str, list[int]]


class PlanOut(BaseModel):
    name: str
    admitted: bool = Field(description="It would start now on the cluster as it is.")
    reason: PendingReasonOut | None = None
    placements: list[PlannedTask] = Field(default_factory=list)
    preempting: list[str] = Field(
        default_factory=list, description="Jobs that would be preempted to make room for it."
    )
    env: dict[str, str] | None = None
    nodes: int = Field(description="Nodes planned against (the server's, not simulated).")


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


class LogLine(BaseModel):
    at: float = Field(description="When the agent shipped it (epoch s, within 250 ms of writing).")
    text: str


class LogStreamLines(BaseModel):
    role: str
    index: int
    taskAttempt: int
    stream: Literal["stdout", "stderr"]
    lines: list[LogLine]
    nextOffset: int = Field(description="Continue with cursor ROLE/INDEX/STREAM/TRY:nextOffset.")
    size: int
    more: bool = Field(description="More complete lines are stored now; read again at once.")
    complete: bool = Field(description="The task attempt has ended and all of it was read.")


class LogLines(BaseModel):
    id: str
    state: str
    jobAttempt: int
    currentAttempt: int
    attempts: list[int] = Field(description="The job attempts that have tasks (and logs).")
    streams: list[LogStreamLines]


class NodeOut(BaseModel):
    name: str
    address: str
    state: str = Field(
        description="READY, NOT_READY (missed heartbeats), CORDONED, DRAINING or DRAINED "
        "(draining, no task left)."
    )
    hold: str = Field("NONE", description="The administrator's hold: NONE, CORDONED, DRAINING.")
    schedulable: bool
    tasks: int = Field(0, description="Tasks holding resources on the node.")
    agentVersion: str | None = Field(None, description="The shoal version its agent reports.")
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
    unsupported: dict[str, str] = Field(
        default_factory=dict,
        description="What the node cannot do, with why: the runtime 'container', the limits "
        "'memory', 'cpu', 'pids', 'shm' (docs/containers.md).",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Given at join.")
    platformHold: str | None = Field(
        None,
        description="Why the platform running the node keeps new tasks off it (a cordoned or "
        "tainted Kubernetes Node); it shows as CORDONED. None: it does not.",
    )
    fencing: str = Field(
        "lease",
        description="lease: its tasks stop with its agent's lease; confirmed (Kubernetes): they "
        "end only when its agent confirms it (docs/kubernetes.md).",
    )


class NodeEventOut(BaseModel):
    at: float
    kind: str
    message: str
    by: str | None = None


class ClusterStatus(BaseModel):
    url: str
    version: str
    nodes: list[NodeOut]
    totals: dict[str, float]
    allocated: dict[str, float]
    jobs: dict[str, int]
    proxyPort: int | None = Field(
        None,
        description="The task proxy's port on this host (docs/proxy.md): a task's labelled port "
        "is at http(s)://HOST:proxyPort/proxy/JOB/ROLE/INDEX/LABEL/; null when it is off.",
    )


class StopResult(BaseModel):
    id: str
    state: str
    array: ArrayOut | None = Field(None, description="An array's parent: its elements now.")


class ReleaseRequest(BaseModel):
    task: str | None = Field(
        None, description="ROLE/INDEX: only this task (none: every held task of the job)."
    )


class ReleaseResult(BaseModel):
    id: str
    released: list[str] = Field(description="The tasks whose hold ends, as ROLE/INDEX.")


class CodeArchiveOut(BaseModel):
    sha256: str
    size: int


class DataSetOut(BaseModel):
    owner: str
    name: str
    ref: str = Field(description="How other users name it: OWNER/NAME.")
    kind: Literal["file", "dir"]
    sha256: str
    size: int
    createdAt: float
    shares: dict[str, list[str]] | None = Field(
        None, description="users, groups and vcs it is shared with (shown to its owner and admins)."
    )


class ShareIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    vcs: list[str] = Field(default_factory=list)


class ImageOut(BaseModel):
    """A pushed container image (docs/containers.md, "Images")."""

    name: str = Field(description="NAME:TAG, as jobs name it.")
    imageId: str = Field(description="The sha256 of the image's config (podman's image ID).")
    blobSha256: str = Field(description="The sha256 of the pushed archive.")
    size: int = Field(description="The archive's size in bytes.")
    pushedBy: str
    pushedAt: float


class ImagePushed(ImageOut):
    replaced: str | None = Field(
        None, description="The image ID the name had before this push (null: a new name)."
    )
    releasedJobs: list[str] = Field(
        default_factory=list, description="Jobs that waited for this image and may now start."
    )


class ImageRemoved(BaseModel):
    name: str
    heldJobs: list[str] = Field(
        default_factory=list,
        description="Queued jobs that need this image: they wait (ImageNotFound) until it is "
        "pushed again.",
    )


class JobSource(BaseModel):
    """The job file as submitted: the dashboard's "clone and resubmit" starts from it."""

    id: str
    name: str
    format: str
    text: str
    virtualCluster: str
