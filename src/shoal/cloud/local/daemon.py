"""The local cloud's API (``shoal cloud local serve``): offers, launch and terminate by request
id, instances by cluster, events since a cursor, and Azure's Scheduled Events for the machines.

Every refusal is ``{"kind": ..., "message": ..., "offer_key": ..., "retry_after_s": ...}`` with
``kind`` from the provider taxonomy (capacity, quota, auth, preempted, transient).
"""

from __future__ import annotations

import email.utils
import ipaddress
import logging
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from shoal.cloud.local.catalog import Catalog
from shoal.cloud.local.cloud import CloudRefusal, LaunchSpec, LocalCloud, Network
from shoal.cloud.local.state import MachineRecord
from shoal.cloud.provider import ErrorKind

log = logging.getLogger("shoal.cloud.local")
ENDPOINT_FILE = "endpoint"  # DIR/endpoint: the URL the daemon answers at, once it listens
SCHEDULED_EVENTS_PATH = "/metadata/scheduledevents"
SCHEDULED_EVENTS_API_VERSION = "2020-07-01"


class LaunchBody(BaseModel):
    cluster: str = Field(..., min_length=1, max_length=64)
    pool: str = Field(..., min_length=1, max_length=64)
    name: str = Field(..., min_length=1, max_length=64)
    zone: str
    instance_type: str
    spot: bool = False
    user_data: str = Field("", max_length=1_000_000)
    tags: dict[str, str] = Field(default_factory=dict)


class StartRequest(BaseModel):
    EventId: str


class StartRequests(BaseModel):
    StartRequests: list[StartRequest]


def refusal(status: int, kind: ErrorKind, message: str, offer_key: str | None = None) -> Any:
    body = {"kind": kind.value, "message": message, "offer_key": offer_key, "retry_after_s": None}
    return JSONResponse(body, status_code=status)


def machine_json(machine: MachineRecord) -> dict[str, Any]:
    body = asdict(machine.to_instance())
    body.update(
        state=machine.state,
        tags=machine.tags,
        zone=machine.zone,
        instance_type=machine.instance_type,
        netns=machine.netns,
        pid=machine.pid,
        running_at=machine.running_at,
        ended_at=machine.ended_at,
        end_reason=machine.end_reason,
        preempt_at=machine.preempt_at,
    )
    return body


def scheduled_events(machine: MachineRecord) -> dict[str, Any]:
    """The machine's Scheduled Events document, shaped as Azure's (api-version 2020-07-01)."""
    events = []
    if machine.notice_shown and machine.preempt_at is not None:
        events.append(
            {
                "EventId": machine.event_id,
                "EventType": "Preempt",
                "ResourceType": "VirtualMachine",
                "Resources": [machine.name],
                "EventStatus": "Scheduled",
                "NotBefore": email.utils.formatdate(machine.preempt_at, usegmt=True),
                "Description": "The virtual machine is being evicted (spot capacity).",
                "EventSource": "Platform",
                "DurationInSeconds": -1,
            }
        )
    return {"DocumentIncarnation": machine.incarnation, "Events": events}


def build_app(cloud: LocalCloud) -> FastAPI:
    app = FastAPI(title="shoal local cloud", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(CloudRefusal)
    async def _refused(_: Request, exc: CloudRefusal) -> JSONResponse:
        return refusal(exc.status, exc.kind, exc.message, exc.offer_key)  # type: ignore[no-any-return]

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return refusal(422, ErrorKind.CAPACITY, f"invalid request: {where}")  # type: ignore[no-any-return]

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "region": cloud.catalog.region}

    @app.get("/v1/offers")
    def offers(
        instance_type: str | None = None,
        zone: list[str] = Query(default_factory=list),
        spot: bool = False,
    ) -> dict[str, Any]:
        found = cloud.catalog.offers(instance_type, tuple(zone), spot)
        return {"offers": [_offer_json(cloud, o) for o in found]}

    @app.put("/v1/instances/{request_id}")
    def launch(request_id: str, body: LaunchBody) -> JSONResponse:
        spec = LaunchSpec(request_id=request_id, **body.model_dump())
        machine, made = cloud.launch(spec)
        return JSONResponse({"instance": machine_json(machine)}, status_code=201 if made else 200)

    @app.get("/v1/instances/{request_id}")
    def one(request_id: str) -> Any:
        with cloud.lock:
            machine = cloud.state.machines.get(request_id)
        if machine is None:
            return refusal(404, ErrorKind.CAPACITY, f"no instance for request {request_id}")
        return {"instance": machine_json(machine)}

    @app.delete("/v1/instances/{request_id}", status_code=202)
    def terminate(request_id: str) -> dict[str, Any]:
        machine = cloud.terminate(request_id)
        return {"instance": None if machine is None else machine_json(machine)}

    @app.get("/v1/instances")
    def instances(cluster: str | None = None, all: bool = False) -> dict[str, Any]:
        return {"instances": [machine_json(m) for m in cloud.machines_of(cluster, all)]}

    @app.get("/v1/events")
    def events(since: int = 0) -> dict[str, Any]:
        with cloud.lock:
            found = [asdict(e) for e in cloud.state.events if e.seq > since]
            cursor = cloud.state.next_seq - 1
        return {"events": found, "cursor": cursor}

    @app.get(SCHEDULED_EVENTS_PATH)
    def get_scheduled_events(
        request: Request,
        api_version: str = Query(..., alias="api-version"),
        metadata: str | None = Header(None),
    ) -> Any:
        machine = _caller(cloud, request, metadata)
        if isinstance(machine, JSONResponse):
            return machine
        return scheduled_events(machine)

    @app.post(SCHEDULED_EVENTS_PATH)
    def start_events(
        request: Request,
        body: StartRequests,
        api_version: str = Query(..., alias="api-version"),
        metadata: str | None = Header(None),
    ) -> Any:
        machine = _caller(cloud, request, metadata)
        if isinstance(machine, JSONResponse):
            return machine
        approved = cloud.approve_preemption(
            machine.address, [r.EventId for r in body.StartRequests]
        )
        return JSONResponse({}, status_code=200 if approved else 400)

    return app


def _offer_json(cloud: LocalCloud, offer: Any) -> dict[str, Any]:
    body = asdict(offer)
    with cloud.lock:
        used = sum(
            1
            for m in cloud.state.machines.values()
            if m.active and m.zone == offer.zone and m.instance_type == offer.instance_type
        )
    body["available"] = used < cloud.catalog.zones[offer.zone][offer.instance_type]
    body["key"] = offer.key
    return body


def _caller(cloud: LocalCloud, request: Request, metadata: str | None) -> Any:
    if (metadata or "").lower() != "true":
        return JSONResponse(
            {"error": "Bad request. Required metadata header not specified"}, status_code=400
        )
    address = request.client.host if request.client else ""
    with cloud.lock:
        machine = cloud.state.by_address(address)
    if machine is None:
        return JSONResponse(
            {"error": f"no instance of this cloud has the address {address}"}, status_code=404
        )
    return machine


@dataclass(frozen=True)
class ServeOptions:
    directory: Path
    catalog: Catalog
    listen: str  # ADDR:PORT (PORT 0: any free port; DIR/endpoint names it)
    bridge_netns: str
    bridge: str
    subnet: str
    first_host: int = 10
    grace_s: float = 5.0
    cleanup_on_exit: bool = False


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen {listen!r}: write ADDRESS:PORT, e.g. 198.18.40.254:7600")
    return host.strip("[]"), int(port)


def network_of(options: ServeOptions) -> Network:
    try:
        subnet = ipaddress.IPv4Network(options.subnet, strict=True)
    except ValueError as exc:
        raise ValueError(f"--subnet {options.subnet!r}: {exc}") from None
    if not subnet.subnet_of(ipaddress.IPv4Network("198.18.0.0/15")):
        raise ValueError(f"--subnet {subnet}: must lie in 198.18.0.0/15 (benchmarking addresses)")
    return Network(options.bridge_netns, options.bridge, subnet, options.first_host)


def serve(options: ServeOptions) -> None:
    """Run the cloud until SIGTERM or Ctrl-C; its machines outlive it unless cleanup_on_exit."""
    network = network_of(options)
    host, port = parse_listen(options.listen)
    options.directory.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(128)
    cloud = LocalCloud(options.directory, options.catalog, network, options.grace_s)
    cloud.start()
    endpoint = f"http://{host}:{listener.getsockname()[1]}"
    _write_endpoint(options.directory, endpoint)
    log.info("local cloud at %s, machines on %s in %s", endpoint, network.bridge, network.subnet)
    config = uvicorn.Config(build_app(cloud), log_level="warning", access_log=False)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        began = time.monotonic()
        cloud.close(terminate_all=options.cleanup_on_exit)
        (options.directory / ENDPOINT_FILE).unlink(missing_ok=True)
        listener.close()
        log.info("local cloud stopped (%.1f s)", time.monotonic() - began)


def _write_endpoint(directory: Path, endpoint: str) -> None:
    temporary = directory / f".{ENDPOINT_FILE}.tmp"
    temporary.write_text(endpoint + "\n")
    temporary.replace(directory / ENDPOINT_FILE)
