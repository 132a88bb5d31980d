"""The cloud pools' REST shapes (docs/cloud.md): ``GET /api/v1/pools`` and a pool's target."""

from __future__ import annotations

from pydantic import BaseModel, Field


class PoolInstanceOut(BaseModel):
    """A machine of a cloud pool (docs/cloud.md)."""

    node: str
    requestId: str
    phase: str = Field(description="launching, joined, draining or terminating.")
    offer: str | None = Field(description="region/zone/type[/spot]; null: not started yet.")
    address: str | None
    spot: bool
    pricePerHour: float
    launchedAt: float
    joinedAt: float | None
    idleSince: float | None
    lastError: str | None


class PoolOut(BaseModel):
    name: str
    provider: str
    min: int
    max: int
    target: int | None = Field(description="Set by `shoal cluster scale`; null: min and max rule.")
    size: int = Field(description="Machines launching, joined or draining.")
    idleTimeoutS: int
    joinTimeoutS: int
    pricePerHour: float | None = Field(description="The cheapest offer's; null: no offer.")
    offerError: str | None = Field(description="Why the last ask for offers failed, if it did.")
    nodeHours: float = Field(description="Machine-hours of the pool since it was first used.")
    cost: float = Field(description="Those hours at each machine's offer price.")
    machines: list[PoolInstanceOut]
    blockedOffers: list[str] = Field(
        default_factory=list,
        description="Offers of its provider not tried for now, with why (quota; never joined).",
    )


class PoolTargetIn(BaseModel):
    target: int | None = Field(
        ge=0, description="The pool's size from now on (held as its min); null: the file's min."
    )
