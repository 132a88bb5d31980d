"""The provider interface: what shoal asks of any cloud, and the words it answers in.

After dstack's ``Compute`` (offers with a price and availability, tried in price order) and Ray
autoscaler v2 (launch and terminate asynchronous and idempotent by request id, errors polled):

* ``offers(pool)``: the machines that could serve a pool, with their price per hour, in any order;
* ``launch(request)``: start one machine; asking twice with the same request id starts one;
* ``terminate(request_id)``: remove it (delete or deallocate: never a power-off that bills on);
  terminating an unknown or already removed request is not an error;
* ``list_instances(cluster)``: every machine the provider holds for the cluster, from its tags:
  the source of truth after a server restart;
* ``poll_errors()``: what went wrong since the last poll (a launch that failed after it was
  accepted, a machine preempted), each with a kind from one fixed taxonomy.

Optional capabilities (stop/start, placement groups, preemption notices) are flags in
``capabilities``, not methods every provider must stub. A provider whose machines can read
notices of their coming preemption also has ``scheduled_events_url``: where, seen from the
machine, its agent reads them (Azure's instance metadata service).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable


class ErrorKind(StrEnum):
    """Every provider failure is one of these; the autoscaler acts on the kind alone."""

    CAPACITY = "capacity"  # the zone has no such machine now: try the next offer
    QUOTA = "quota"  # the account may not have more: block the offer for a while, say so
    AUTH = "auth"  # credentials refused: nothing will work until an admin acts
    PREEMPTED = "preempted"  # a spot machine was taken back
    TRANSIENT = "transient"  # throttled, timed out, 5xx: try again later


class Capability(StrEnum):
    STOP_START = "stop-start"  # machines can be deallocated and started again
    PLACEMENT_GROUPS = "placement-groups"
    SPOT = "spot"
    PREEMPTION_NOTICES = "preemption-notices"  # machines are told before they are preempted


class InstanceState(StrEnum):
    PENDING = "pending"  # accepted, not yet running (booting, or the long operation runs)
    RUNNING = "running"
    STOPPING = "stopping"  # being terminated or deallocated
    STOPPED = "stopped"  # deallocated: billed for disks only
    TERMINATED = "terminated"  # gone (or failed to start)


@dataclass(frozen=True, slots=True)
class Offer:
    """One kind of machine in one place at one price."""

    provider: str
    region: str
    zone: str
    instance_type: str
    price_per_hour: float
    cpu_millis: int
    memory_mib: int
    gpus: int = 0
    gpu_type: str | None = None
    spot: bool = False
    available: bool | None = None  # None: the provider cannot tell before trying

    @property
    def key(self) -> str:
        """Names the offer in blocks, events and messages: ``region/zone/type[/spot]``."""
        return f"{self.region}/{self.zone}/{self.instance_type}" + ("/spot" if self.spot else "")


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Start one machine of ``offer`` named ``name``; ``user_data`` is its cloud-init script."""

    request_id: str
    cluster: str
    pool: str
    name: str
    offer: Offer
    user_data: str
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Instance:
    """A machine as the provider reports it."""

    instance_id: str
    request_id: str
    cluster: str
    pool: str
    name: str
    state: InstanceState
    offer_key: str
    address: str | None = None
    launched_at: float | None = None
    spot: bool = False


class ProviderError(Exception):
    """A refused or failed call, with its kind; ``offer_key`` names the offer it concerns."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        offer_key: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.offer_key = offer_key
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    """Something that happened to a request after ``launch`` returned (polled)."""

    request_id: str
    kind: ErrorKind
    message: str
    at: float
    offer_key: str | None = None


@runtime_checkable
class Provider(Protocol):
    name: str
    capabilities: frozenset[Capability]

    def offers(self, instance_type: str | None, zones: tuple[str, ...], spot: bool) -> list[Offer]:
        """The offers matching a pool: its instance type (None: any) in its zones (empty: any)."""
        ...

    def launch(self, request: LaunchRequest) -> Instance:
        """Start one machine (idempotent by ``request.request_id``); raises ``ProviderError``."""
        ...

    def terminate(self, request_id: str) -> None:
        """Remove the machine of ``request_id`` (idempotent); raises ``ProviderError``."""
        ...

    def list_instances(self, cluster: str) -> list[Instance]:
        """Every machine of ``cluster`` the provider holds (terminated ones may be left out)."""
        ...

    def poll_errors(self) -> list[ProviderEvent]:
        """Failures and preemptions since the last poll."""
        ...

    def close(self) -> None: ...


# Tags every provider writes on a machine so that ``list_instances`` finds the truth again.
TAG_CLUSTER = "shoal-cluster"
TAG_POOL = "shoal-pool"
TAG_REQUEST = "shoal-request"
