"""A fake Azure Resource Manager on loopback, for the Azure provider's tests.

It serves HTTPS on 127.0.0.1 (azure-core sends bearer tokens over TLS only) with a certificate
of a throwaway CA (``ca_file``, given to the SDK as ``connection_verify``), answers the routes
the SDK calls — virtual machines (create, get, list, delete, deallocate, instance view), network
interfaces (create, get, list, delete), resource SKUs, and the status URLs of long-running
operations (``Azure-AsyncOperation`` and ``Location``) — and checks what the SDK sends: an
``api-version``, the bearer token, and the bodies' shape (tags, Spot settings, base64 custom
data, the NIC the VM names). What it finds wrong is answered as ARM would (400) and kept in
``problems``, which the tests require empty.

Faults are injected: ``inject`` answers the next matching requests with an ARM error (429 with
``Retry-After``, quota and capacity codes); ``fail_next_creation`` accepts a VM and fails its
creation midway (``InProgress`` then ``Failed``); ``evict`` takes a spot VM back.

Its TLS and credential are in ``fake_arm_tls.py``; SKUs and the VM body's checks in
``fake_arm_shapes.py``.
"""

from __future__ import annotations

import base64
import datetime
import itertools
import json
import re
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.cloud.fake_arm_shapes import SHOAL_TAGS, check_vm_body, nic_name
from tests.cloud.fake_arm_tls import TOKEN, make_certificates

RG_PATH = re.compile(r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/([^/]+)/([^/]+)")


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    at: float


@dataclass
class Fault:
    method: str
    path_part: str
    status: int
    code: str
    message: str
    retry_after: float | None
    times: int


@dataclass
class Operation:
    """A long-running operation: ``polls`` answers of InProgress, then its end."""

    polls: int
    on_end: Callable[[], None]
    error: dict[str, str] | None = None
    ended: bool = False
    canceled: bool = False  # its resource was deleted before it ended


@dataclass
class State:
    vms: dict[str, dict[str, Any]] = field(default_factory=dict)
    power: dict[str, str] = field(default_factory=dict)  # VM name -> PowerState/...
    nics: dict[str, dict[str, Any]] = field(default_factory=dict)
    disks: set[str] = field(default_factory=set)
    operations: dict[str, Operation] = field(default_factory=dict)


class ArmError(Exception):
    def __init__(
        self, status: int, code: str, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


class FakeArm:
    """The fake ARM endpoint; use as a context manager (``with FakeArm(tmp) as arm``)."""

    def __init__(
        self,
        directory: Path,
        *,
        subscription: str = "sub-0001",
        resource_group: str = "rg-shoal",
        location: str = "westeurope",
        subnet_id: str = "/subscriptions/sub-0001/resourceGroups/rg-net/providers/"
        "Microsoft.Network/virtualNetworks/vnet/subnets/nodes",
        lro_polls: int = 2,
    ) -> None:
        self.subscription, self.resource_group, self.location = (
            subscription,
            resource_group,
            location,
        )
        self.subnet_id = subnet_id
        self.lro_polls = lro_polls
        self.ca_file, cert, key = make_certificates(directory)
        self.state = State()
        self.skus: list[dict[str, Any]] = []
        self.requests: list[Seen] = []
        self.problems: list[str] = []
        self.custom_data: dict[str, str] = {}  # VM name -> its decoded cloud-init script
        self._creations: dict[str, str] = {}  # VM name -> its creation's operation id
        self._faults: list[Fault] = []
        self._creation_failures: list[tuple[str, str]] = []
        self._lock = threading.RLock()
        self._addresses = itertools.count(4)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeArm:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ faults

    def inject(
        self,
        method: str,
        path_part: str,
        status: int,
        code: str,
        message: str = "",
        *,
        retry_after: float | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests of ``method`` whose path holds ``path_part``
        with ARM's error JSON (and ``Retry-After`` when given)."""
        with self._lock:
            self._faults.append(
                Fault(method, path_part, status, code, message or code, retry_after, times)
            )

    def fail_next_creation(self, code: str, message: str) -> None:
        """Accept the next VM creation (201), then fail it midway: InProgress, then Failed."""
        with self._lock:
            self._creation_failures.append((code, message))

    def evict(self, name: str) -> None:
        """Take a spot VM back as Azure does: deallocate or delete it, per its eviction policy."""
        with self._lock:
            vm = self.state.vms[name]
            if vm["properties"].get("priority") != "Spot":
                raise AssertionError(f"{name} is not a spot VM")
            if vm["properties"].get("evictionPolicy") == "Delete":
                self._delete_vm(name)
            else:
                self.state.power[name] = "PowerState/deallocated"

    def requests_to(self, method: str, path_part: str) -> list[Seen]:
        with self._lock:
            return [r for r in self.requests if r.method == method and path_part in r.path]

    # ------------------------------------------------------------------ dispatch

    def handle(
        self, method: str, raw_path: str, headers: Any, body: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        document = json.loads(body) if body else None
        with self._lock:
            self.requests.append(Seen(method, parts.path, query, document, time.monotonic()))
            if headers.get("Authorization") != f"Bearer {TOKEN}":
                raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")
            if not query.get("api-version"):
                self.problems.append(f"{method} {parts.path}: no api-version")
                raise ArmError(400, "MissingApiVersionParameter", "The api-version is missing.")
            self._fault(method, parts.path)
            return self._route(method, parts.path, query, document)

    def _fault(self, method: str, path: str) -> None:
        for fault in self._faults:
            if fault.method == method and fault.path_part in path and fault.times > 0:
                fault.times -= 1
                raise ArmError(fault.status, fault.code, fault.message, fault.retry_after)

    def _route(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        sub = f"/subscriptions/{self.subscription}"
        if path == f"{sub}/providers/Microsoft.Compute/skus":
            return self._list_skus(query)
        op = re.fullmatch(
            rf"{sub}/providers/[^/]+/locations/[^/]+/(operations|operationresults)/([^/]+)", path
        )
        if op:
            return self._operation(op.group(1), op.group(2))
        match = RG_PATH.match(path)
        if not match or match.group(1) != self.subscription:
            raise ArmError(404, "SubscriptionNotFound", f"no subscription in {path}")
        if match.group(2) != self.resource_group:
            raise ArmError(
                404,
                "ResourceGroupNotFound",
                f"Resource group '{match.group(2)}' could not be found.",
            )
        rest = path[match.end() :].strip("/").split("/")
        kind = f"{match.group(3)}/{match.group(4)}"
        if kind == "Microsoft.Compute/virtualMachines":
            return self._vm_route(method, rest, query, body)
        if kind == "Microsoft.Network/networkInterfaces":
            return self._nic_route(method, rest, body)
        raise ArmError(404, "NoRegisteredProviderFound", f"no route for {method} {path}")

    # ------------------------------------------------------------------ operations

    def _start_operation(
        self,
        on_end: Callable[[], None],
        *,
        polls: int | None = None,
        error: dict[str, str] | None = None,
    ) -> dict[str, str]:
        op_id = uuid.uuid4().hex
        self.state.operations[op_id] = Operation(
            self.lro_polls if polls is None else polls, on_end, error
        )
        base = (
            f"{self.url}/subscriptions/{self.subscription}"
            f"/providers/Microsoft.Compute/locations/{self.location}"
        )
        return {
            "Azure-AsyncOperation": f"{base}/operations/{op_id}?api-version=2024-07-01",
            "Location": f"{base}/operationresults/{op_id}?api-version=2024-07-01",
        }

    def _operation(self, route: str, op_id: str) -> tuple[int, Any, dict[str, str]]:
        op = self.state.operations.get(op_id)
        if op is None:
            raise ArmError(404, "NotFound", f"no operation {op_id}")
        if not op.ended and op.polls > 0:
            op.polls -= 1
            return (200, {"status": "InProgress"}, {}) if route == "operations" else (202, None, {})
        if not op.ended:
            op.ended = True
            op.on_end()
        if route == "operationresults":
            return 200, None, {}
        if op.canceled:
            canceled = {"code": "OperationCanceled", "message": "The resource was deleted."}
            return 200, {"name": op_id, "status": "Canceled", "error": canceled}, {}
        if op.error is not None:
            return 200, {"name": op_id, "status": "Failed", "error": op.error}, {}
        return 200, {"name": op_id, "status": "Succeeded"}, {}

    # ------------------------------------------------------------------ SKUs

    def _list_skus(self, query: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        wanted = query.get("$filter", "")
        found = re.fullmatch(r"location eq '([^']+)'", wanted)
        if not found:
            self.problems.append(f"resource SKUs listed without a location filter ({wanted!r})")
            return 200, {"value": self.skus}, {}
        place = found.group(1).lower()
        return (
            200,
            {"value": [s for s in self.skus if place in (loc.lower() for loc in s["locations"])]},
            {},
        )

    # ------------------------------------------------------------------ VMs

    def _vm_route(
        self, method: str, rest: list[str], query: dict[str, str], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        expand = query.get("$expand") == "instanceView"
        if rest == [""] and method == "GET":
            views = [self._vm_view(name, expand) for name in sorted(self.state.vms)]
            return 200, {"value": views}, {}
        name, action = rest[0], (rest[1] if len(rest) > 1 else "")
        if method == "PUT" and not action:
            return self._create_vm(name, body)
        if name not in self.state.vms:
            if method == "DELETE" and not action:
                return 204, None, {}
            raise ArmError(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under resource group "
                f"'{self.resource_group}' was not found.",
            )
        if method == "GET" and not action:
            return 200, self._vm_view(name, expand), {}
        if method == "GET" and action == "instanceView":
            return 200, self._instance_view(name), {}
        if method == "DELETE" and not action:
            self.state.vms[name]["properties"]["provisioningState"] = "Deleting"
            return 202, None, self._start_operation(lambda: self._delete_vm(name))
        if method == "POST" and action == "deallocate":
            self.state.power[name] = "PowerState/deallocating"
            return (
                202,
                None,
                self._start_operation(
                    lambda: self.state.power.__setitem__(name, "PowerState/deallocated")
                ),
            )
        self.problems.append(f"unexpected {method} on VM {name}/{action}")
        raise ArmError(400, "InvalidRequest", f"the fake does not serve {method} {action}")

    def _create_vm(self, name: str, body: Any) -> tuple[int, Any, dict[str, str]]:
        if name in self.state.vms:
            return 200, self._vm_view(name, False), {}
        problems = check_vm_body(name, body, self.location, self.state.nics)
        if problems:
            self.problems.extend(problems)
            raise ArmError(400, "InvalidParameter", "; ".join(problems))
        props = dict(body["properties"])
        props["osProfile"] = {k: v for k, v in props["osProfile"].items() if k != "customData"}
        props.update(
            provisioningState="Creating",
            vmId=str(uuid.uuid4()),
            timeCreated=datetime.datetime.now(datetime.UTC).isoformat(),
        )
        vm = {
            "id": self._id("Microsoft.Compute/virtualMachines", name),
            "name": name,
            "type": "Microsoft.Compute/virtualMachines",
            "location": body["location"],
            "tags": body.get("tags", {}),
            "properties": props,
        }
        if body.get("zones"):
            vm["zones"] = body["zones"]
        self.custom_data[name] = base64.b64decode(
            body["properties"]["osProfile"]["customData"]
        ).decode()
        self.state.vms[name] = vm
        self.state.disks.add(f"{name}-osdisk")
        for ref in props["networkProfile"]["networkInterfaces"]:
            self._nic_by_id(ref["id"])["properties"]["virtualMachine"] = {"id": vm["id"]}
        self.state.power[name] = "PowerState/starting"
        if self._creation_failures:
            code, message = self._creation_failures.pop(0)

            def failed() -> None:
                if self.state.vms.get(name, {}).get("properties") is props:
                    props["provisioningState"] = "Failed"
                    self.state.power.pop(name, None)

            headers = self._start_operation(failed, error={"code": code, "message": message})
        else:

            def succeeded() -> None:
                if self.state.vms.get(name, {}).get("properties") is props:
                    props["provisioningState"] = "Succeeded"
                    self.state.power[name] = "PowerState/running"

            headers = self._start_operation(succeeded)
        status_url = headers["Azure-AsyncOperation"]
        self._creations[name] = urlsplit(status_url).path.rsplit("/", 1)[1]
        return 201, self._vm_view(name, False), {"Azure-AsyncOperation": status_url}

    def _vm_view(self, name: str, expand: bool) -> dict[str, Any]:
        vm = json.loads(json.dumps(self.state.vms[name]))
        if expand:
            vm["properties"]["instanceView"] = self._instance_view(name)
        return vm

    def _instance_view(self, name: str) -> dict[str, Any]:
        state = self.state.vms[name]["properties"]["provisioningState"].lower()
        statuses = [{"code": f"ProvisioningState/{state}"}]
        if name in self.state.power:
            statuses.append({"code": self.state.power[name]})
        return {"statuses": statuses}

    def _delete_vm(self, name: str) -> None:
        creation = self.state.operations.get(self._creations.pop(name, ""))
        if creation is not None and not creation.ended:
            creation.canceled, creation.polls = True, 0
        vm = self.state.vms.pop(name, None)
        self.state.power.pop(name, None)
        self.state.disks.discard(f"{name}-osdisk")
        if vm is None:
            return
        for ref in vm["properties"]["networkProfile"]["networkInterfaces"]:
            nic = self.state.nics.get(nic_name(ref["id"]))
            if nic is None:
                continue
            nic["properties"].pop("virtualMachine", None)
            if ref.get("properties", {}).get("deleteOption") == "Delete":
                del self.state.nics[nic["name"]]

    # ------------------------------------------------------------------ NICs

    def _nic_route(
        self, method: str, rest: list[str], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        if rest == [""] and method == "GET":
            return 200, {"value": [self.state.nics[n] for n in sorted(self.state.nics)]}, {}
        name = rest[0]
        if method == "PUT":
            return self._create_nic(name, body)
        if name not in self.state.nics:
            if method == "DELETE":
                return 204, None, {}
            raise ArmError(404, "NotFound", f"Resource {name} not found.")
        if method == "GET":
            return 200, self.state.nics[name], {}
        if method == "DELETE":
            if "virtualMachine" in self.state.nics[name]["properties"]:
                raise ArmError(400, "NicInUse", f"Network Interface {name} is used by a VM.")
            return (
                202,
                None,
                self._start_operation(lambda: self.state.nics.pop(name, None), polls=0),
            )
        raise ArmError(400, "InvalidRequest", f"the fake does not serve {method} on NICs")

    def _create_nic(self, name: str, body: Any) -> tuple[int, Any, dict[str, str]]:
        configs = (body or {}).get("properties", {}).get("ipConfigurations", [])
        subnet = configs[0].get("properties", {}).get("subnet", {}).get("id") if configs else None
        if subnet != self.subnet_id:
            self.problems.append(f"NIC {name}: subnet {subnet!r}, not {self.subnet_id!r}")
            raise ArmError(400, "InvalidResourceReference", f"subnet {subnet} not found")
        if not all((body.get("tags") or {}).get(t) for t in SHOAL_TAGS):
            self.problems.append(f"NIC {name}: the shoal tags are missing")
        config = json.loads(json.dumps(configs[0]))
        config["properties"]["privateIPAddress"] = f"10.0.0.{next(self._addresses)}"
        config["properties"]["provisioningState"] = "Succeeded"
        nic = {
            "id": self._id("Microsoft.Network/networkInterfaces", name),
            "name": name,
            "location": body.get("location"),
            "tags": body.get("tags", {}),
            "properties": {"provisioningState": "Succeeded", "ipConfigurations": [config]},
        }
        self.state.nics[name] = nic
        return (
            201,
            nic,
            {
                "Azure-AsyncOperation": self._start_operation(lambda: None, polls=0)[
                    "Azure-AsyncOperation"
                ]
            },
        )

    def _nic_by_id(self, nic_id: str) -> dict[str, Any]:
        return self.state.nics[nic_name(nic_id)]

    def _id(self, kind: str, name: str) -> str:
        group = f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
        return f"{group}/providers/{kind}/{name}"


def _handler_for(arm: FakeArm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers: dict[str, str] = {}
            try:
                status, document, headers = arm.handle(self.command, self.path, self.headers, body)
            except ArmError as exc:
                status = exc.status
                document = {"error": {"code": exc.code, "message": exc.message}}
                if exc.retry_after is not None:
                    headers = {"Retry-After": f"{exc.retry_after:g}"}
            except Exception as exc:  # a bug in the fake: say so rather than hang the SDK
                arm.problems.append(f"fake ARM failed on {self.command} {self.path}: {exc!r}")
                status, document = 500, {"error": {"code": "InternalError", "message": repr(exc)}}
            payload = b"" if document is None else json.dumps(document).encode()
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("x-ms-request-id", str(uuid.uuid4()))
            if payload:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _serve

    return Handler
