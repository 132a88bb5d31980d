"""``LocalProvider``: the provider interface over the local cloud daemon's HTTP API.

Refusals come back as ``ProviderError`` with the daemon's kind; a daemon that cannot be reached,
times out or answers 5xx is ``transient`` (try again later), as a cloud's API would be.
"""

from __future__ import annotations

from typing import Any

import httpx

from shoal.cloud.provider import (
    Capability,
    ErrorKind,
    Instance,
    InstanceState,
    LaunchRequest,
    Offer,
    ProviderError,
    ProviderEvent,
)

SCHEDULED_EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"


class LocalProvider:
    """Machines are network namespaces made by ``shoal cloud local serve`` at ``endpoint``.

    ``cursor``: the last event already seen (``poll_errors`` reports the ones after it); keep
    ``self.cursor`` to resume after a restart without seeing events twice.
    """

    capabilities = frozenset({Capability.SPOT, Capability.PREEMPTION_NOTICES})

    def __init__(self, name: str, endpoint: str, timeout_s: float = 30.0, cursor: int = 0) -> None:
        self.name = name  # the provider's name in the cloud file
        self.endpoint = endpoint.rstrip("/")
        self.cursor = cursor
        self._http = httpx.Client(base_url=self.endpoint, timeout=timeout_s)

    @property
    def scheduled_events_url(self) -> str:
        """Where a machine of this cloud reads its Scheduled Events (Azure's shape)."""
        return self.endpoint + SCHEDULED_EVENTS

    def offers(self, instance_type: str | None, zones: tuple[str, ...], spot: bool) -> list[Offer]:
        params: dict[str, Any] = {"zone": list(zones), "spot": spot}
        if instance_type is not None:
            params["instance_type"] = instance_type
        body = self._call("GET", "/v1/offers", params=params)
        return [_offer(o) for o in body["offers"]]

    def launch(self, request: LaunchRequest) -> Instance:
        offer = request.offer
        payload = {
            "cluster": request.cluster,
            "pool": request.pool,
            "name": request.name,
            "zone": offer.zone,
            "instance_type": offer.instance_type,
            "spot": offer.spot,
            "user_data": request.user_data,
            "tags": dict(request.tags),
        }
        body = self._call(
            "PUT", f"/v1/instances/{request.request_id}", json=payload, offer_key=offer.key
        )
        return _instance(body["instance"])

    def terminate(self, request_id: str) -> None:
        self._call("DELETE", f"/v1/instances/{request_id}")

    def list_instances(self, cluster: str) -> list[Instance]:
        body = self._call("GET", "/v1/instances", params={"cluster": cluster})
        return [_instance(i) for i in body["instances"]]

    def describe(self, request_id: str) -> dict[str, Any]:
        """The daemon's whole record of one machine (its namespace, pid, times): for tests."""
        return dict(self._call("GET", f"/v1/instances/{request_id}")["instance"])

    def poll_errors(self) -> list[ProviderEvent]:
        body = self._call("GET", "/v1/events", params={"since": self.cursor})
        events = [
            ProviderEvent(
                request_id=e["request_id"],
                kind=ErrorKind(e["kind"]),
                message=e["message"],
                at=float(e["at"]),
                offer_key=e.get("offer_key"),
            )
            for e in body["events"]
        ]
        self.cursor = max(self.cursor, int(body["cursor"]))
        return events

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, offer_key: str | None = None, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ProviderError(
                ErrorKind.TRANSIENT,
                f"the local cloud at {self.endpoint} did not answer: {exc}",
                offer_key=offer_key,
            ) from None
        if response.is_success:
            return response.json()
        raise _error(response, offer_key)


def _error(response: httpx.Response, offer_key: str | None) -> ProviderError:
    try:
        body = response.json()
        kind = ErrorKind(body["kind"])
        message = str(body["message"])
    except (ValueError, KeyError, TypeError):
        kind = ErrorKind.TRANSIENT
        message = f"HTTP {response.status_code}: {response.text[:200]}"
        body = {}
    if response.status_code == 429 or response.status_code >= 500:
        kind = ErrorKind.TRANSIENT
    retry = response.headers.get("Retry-After") or body.get("retry_after_s")
    return ProviderError(
        kind,
        message,
        offer_key=body.get("offer_key") or offer_key,
        retry_after_s=float(retry) if retry is not None else None,
    )


def _offer(body: dict[str, Any]) -> Offer:
    return Offer(
        provider=body["provider"],
        region=body["region"],
        zone=body["zone"],
        instance_type=body["instance_type"],
        price_per_hour=float(body["price_per_hour"]),
        cpu_millis=int(body["cpu_millis"]),
        memory_mib=int(body["memory_mib"]),
        gpus=int(body["gpus"]),
        gpu_type=body.get("gpu_type"),
        spot=bool(body["spot"]),
        available=body.get("available"),
    )


def _instance(body: dict[str, Any]) -> Instance:
    return Instance(
        instance_id=body["instance_id"],
        request_id=body["request_id"],
        cluster=body["cluster"],
        pool=body["pool"],
        name=body["name"],
        state=InstanceState(body["state"]),
        offer_key=body["offer_key"],
        address=body.get("address"),
        launched_at=body.get("launched_at"),
        spot=bool(body.get("spot")),
    )
