"""The REST API's bodies for administration (``/api/v1``): virtual clusters, users, tokens and
usage. The other bodies are in server/schemas.py; the OpenAPI snapshot guards both."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shoal.core.aging import MAX_LEVELS, AgingError, check_thresholds
from shoal.server.schemas import UsableText

# ---- virtual clusters ----


class AgingSetting(BaseModel):
    """Attained-service aging inside a VC (Tiresias' LAS): a job drops one priority step, within
    its class, each time the GPU-hours it has had cross a threshold (docs/scheduling.md)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    policy: Literal["las"] = Field("las", description="las: least attained service first.")
    thresholds_gpu_hours: list[float] = Field(
        min_length=1,
        max_length=MAX_LEVELS,
        description="Increasing GPU-hours (GPUs x run time, all attempts) at which a job drops "
        "one step, e.g. [1, 10].",
    )
    max_preemptions: int | None = Field(
        None,
        ge=1,
        description="A job preempted (or requeued for its resources) this many times is no "
        "longer aged, so aging preempts no job more often (null: no limit).",
    )

    @field_validator("thresholds_gpu_hours")
    @classmethod
    def _increasing(cls, value: list[float]) -> list[float]:
        try:
            check_thresholds(value, "thresholds_gpu_hours")
        except AgingError as error:
            raise ValueError(str(error)) from None
        return value


class VirtualClusterIn(UsableText):  # no NUL: no store can keep it (PostgreSQL refuses)
    # 1e400 reads as inf: no amount of cores (it was an OverflowError, a 500)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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
    strict_fifo: bool = Field(False, description="No job of the VC passes one that waits.")
    aging: AgingSetting | None = Field(
        None, description="Jobs with less GPU time first (None: priority, then submission)."
    )
    members: list[str] = Field(default_factory=list, description="Users and groups.")
    idle_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Interactive jobs (`interactive: true`: notebooks) are stopped after this "
        "many seconds without a request through the task proxy (None: never).",
    )


class VirtualClusterPatch(UsableText):  # no NUL: no store can keep it (PostgreSQL refuses)
    """The settings to change; a field left out stays as it is, an explicit null returns it
    to its default (not limited, no cap, open to everyone ...)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    description: str | None = None
    guarantee_cpu: float | None = Field(None, ge=0)
    guarantee_memory_mib: int | None = Field(None, ge=0)
    guarantee_gpu: int | None = Field(None, ge=0)
    guarantee_gpu_by_type: dict[str, int] | None = None
    borrow_cpu: float | None = Field(None, ge=0)
    borrow_memory_mib: int | None = Field(None, ge=0)
    borrow_gpu: int | None = Field(None, ge=0)
    user_gpu_cap: int | None = Field(None, ge=0)
    preempt_within: bool | None = None
    strict_fifo: bool | None = None
    aging: AgingSetting | None = None
    members: list[str] | None = None
    idle_timeout_s: float | None = Field(None, gt=0)


class FieldChange(BaseModel):
    field: str
    before: Any
    after: Any


class ChangeResult(BaseModel):
    """An edit's effect: the settings before and after, and what differs."""

    name: str
    dryRun: bool
    before: dict[str, Any]
    after: dict[str, Any]
    changes: list[FieldChange]


class VirtualClusterOut(BaseModel):
    name: str
    description: str
    guarantee: dict[str, float | None] = Field(description="null: that resource is not limited.")
    gpuByType: dict[str, int]
    borrowLimit: dict[str, float | None] | None = Field(
        description="null: may borrow any idle capacity (per resource: any of that resource)."
    )
    used: dict[str, float]
    userGpuCap: int | None
    preemptWithin: bool
    strictFifo: bool = False
    aging: AgingSetting | None = Field(None, description="null: no attained-service aging.")
    members: list[str]
    clusterTotal: dict[str, float]
    idleTimeoutS: float | None = Field(
        None, description="Interactive jobs idle this long are stopped (null: never)."
    )


# ---- users and tokens ----


class UserIn(UsableText):  # no NUL: no store can keep it (PostgreSQL refuses)
    unchecked_text: ClassVar[frozenset[str]] = frozenset({"name"})  # 400 NameInvalid, as ever
    model_config = ConfigDict(extra="forbid")

    name: str
    admin: bool = False
    groups: list[str] = Field(default_factory=list)
    password: str | None = Field(None, description="For OpenPAI-style basic login.")


class UserPatch(UsableText):  # no NUL: no store can keep it (PostgreSQL refuses)
    """The user's settings to change; a field left out stays, ``password: null`` removes it."""

    model_config = ConfigDict(extra="forbid")

    admin: bool | None = None
    groups: list[str] | None = None
    password: str | None = Field(None, description="For OpenPAI-style basic login.")


class UserDeleted(BaseModel):
    name: str
    stoppedJobs: list[str] = Field(description="Active jobs stopped first (with stopJobs).")


class UsageRow(BaseModel):
    key: str = Field(description="The user or virtual cluster.")
    jobs: int
    gpuHours: float
    cpuHours: float
    elapsedHours: float
    peakMemoryMiB: float
    poolNodeHours: float = Field(
        0.0, description="Cloud pool machine-hours its tasks held, by their share (docs/cloud.md)."
    )
    poolCost: float = Field(0.0, description="Those hours at the machines' offer prices.")


class UsageReport(BaseModel):
    by: Literal["user", "vc"]
    sinceS: float | None = Field(description="The window in seconds (null: all time).")
    scope: Literal["everyone", "own"] = Field(
        description="`own`: a non-admin sees only their own jobs' usage."
    )
    rows: list[UsageRow]


class UserOut(BaseModel):
    name: str
    admin: bool
    groups: list[str]


class NewUser(UserOut):
    token: str = Field(description="The user's first API token; shown once.")


class TokenIn(UsableText):  # no NUL: no store can keep it (PostgreSQL refuses)
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


# ---- the audit log ----


class AuditEventOut(BaseModel):
    """One security-relevant action (docs/audit.md)."""

    id: int
    at: float = Field(description="When, in seconds since the epoch.")
    actor: str = Field(description="Who: a user, `node:NAME`, or `-`.")
    action: str = Field(description="What, e.g. login, token.create, vc.update, exec.open.")
    target: str = Field(description="What it acted on, e.g. `user alice`, `job 12`.")
    outcome: Literal["ok", "refused"]
    client: str = Field(description="The caller's address, or `-`.")
    detail: dict[str, Any] = Field(description="What changed; never a secret.")
