"""What the Azure provider says to ARM and how it reads the answers, without the SDK's clients:
resource names from request ids, the NIC and VM bodies (and the SSH key they need), SKUs into
offers, power states into instance states, ARM's errors into the provider's one taxonomy
(``ErrorKind``), and how long a throttled call may wait.

Bodies are ARM's JSON (the wire shape the REST reference documents), which every version of the
SDK accepts; answers are read through the SDK models' flattened attributes (``vm.priority``,
``vm.instance_view``), which the older and newer generations of the models both have.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from shoal.cloud.provider import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    ErrorKind,
    InstanceState,
    LaunchRequest,
    Offer,
    ProviderError,
)

TAG_NAME = "shoal-name"  # the node name the machine's agent joins as
TAG_OFFER = "shoal-offer"  # the offer key it was launched from

# ARM error codes, by the kind the autoscaler acts on
CAPACITY_CODES = frozenset(
    {
        "SkuNotAvailable",
        "ZonalAllocationFailed",
        "AllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
    }
)
QUOTA_CODES = frozenset({"QuotaExceeded", "SpotQuotaExceeded", "LowPriorityQuotaExceeded"})
AUTH_CODES = frozenset(
    {
        "AuthorizationFailed",
        "InvalidAuthenticationToken",
        "InvalidAuthenticationTokenTenant",
        "ExpiredAuthenticationToken",
        "LinkedAuthorizationFailed",
    }
)
_NAME_CHARS = re.compile(r"[^a-z0-9-]+")


def vm_name(request_id: str) -> str:
    """The VM's name for a request: the same every time (so a second launch finds the first),
    at most 64 characters of ``[a-z0-9-]``; a hash keeps cleaned-up ids apart."""
    clean = _NAME_CHARS.sub("-", request_id.lower()).strip("-")
    digest = hashlib.sha256(request_id.encode()).hexdigest()[:8]
    return f"shoal-{clean[:48]}-{digest}"


def nic_name(vm: str) -> str:
    return f"{vm}-nic"


def computer_name(node: str) -> str:
    """A Linux host name ARM accepts (letters, digits, '-'; at most 64)."""
    return (_NAME_CHARS.sub("-", node.lower()).strip("-") or "shoal-node")[:64]


def machine_tags(request: LaunchRequest) -> dict[str, str]:
    """The tags that let ``list_instances`` find the truth again after a restart."""
    return {
        **dict(request.tags),
        TAG_CLUSTER: request.cluster,
        TAG_POOL: request.pool,
        TAG_REQUEST: request.request_id,
        TAG_NAME: request.name,
        TAG_OFFER: request.offer.key,
    }


def nic_body(location: str, subnet_id: str, tags: Mapping[str, str]) -> dict[str, Any]:
    return {
        "location": location,
        "tags": dict(tags),
        "properties": {
            "ipConfigurations": [
                {
                    "name": "primary",
                    "properties": {
                        "subnet": {"id": subnet_id},
                        "privateIPAllocationMethod": "Dynamic",
                        "primary": True,
                    },
                }
            ]
        },
    }


def image_reference(image: str) -> dict[str, str]:
    """``publisher:offer:sku:version`` (a marketplace image) or a resource id."""
    parts = image.split(":")
    if len(parts) == 4 and not image.startswith("/"):
        return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))
    return {"id": image}


def vm_body(
    request: LaunchRequest,
    *,
    location: str,
    image: str,
    admin_user: str,
    ssh_public_key: str,
    nic_id: str,
    eviction_policy: str,
) -> dict[str, Any]:
    """One VM: the NIC made for it, the OS disk and NIC deleted with it, the cloud-init script as
    ``customData`` (base64), Spot with ``maxPrice: -1`` (never evicted for price, at most the
    pay-as-you-go price) when the offer is spot."""
    offer = request.offer
    properties: dict[str, Any] = {
        "hardwareProfile": {"vmSize": offer.instance_type},
        "storageProfile": {
            "imageReference": image_reference(image),
            "osDisk": {"createOption": "FromImage", "deleteOption": "Delete"},
        },
        "osProfile": {
            "computerName": computer_name(request.name),
            "adminUsername": admin_user,
            "customData": base64.b64encode(request.user_data.encode()).decode("ascii"),
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {
                            "path": f"/home/{admin_user}/.ssh/authorized_keys",
                            "keyData": ssh_public_key,
                        }
                    ]
                },
            },
        },
        "networkProfile": {
            "networkInterfaces": [
                {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
            ]
        },
    }
    if offer.spot:
        properties["priority"] = "Spot"
        properties["evictionPolicy"] = eviction_policy
        properties["billingProfile"] = {"maxPrice": -1}
    body: dict[str, Any] = {
        "location": location,
        "tags": machine_tags(request),
        "properties": properties,
    }
    if offer.zone:
        body["zones"] = [offer.zone]
    return body


_throwaway_key: list[str] = []
_throwaway_lock = threading.Lock()


def throwaway_ssh_key() -> str:
    """An SSH public key whose private half nobody keeps (nodes are reached through their agent;
    ARM wants a key or a password for a Linux VM): made once per process."""
    with _throwaway_lock:
        if not _throwaway_key:
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric import rsa

            key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
            public = key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
            )
            _throwaway_key.append(public.decode("ascii"))
        return _throwaway_key[0]


def retry_policy(total: int, max_wait_s: float) -> Any:
    """azure-core's retries (429, 5xx, timeouts; ``Retry-After`` honoured), except that a wait
    longer than ``max_wait_s`` ends the call: a transient ``ProviderError`` with its
    ``retry_after_s``, so the autoscaler waits rather than a blocked thread."""
    from azure.core.pipeline.policies import RetryPolicy

    class CappedRetryPolicy(RetryPolicy):  # type: ignore[misc]
        def is_retry(self, settings: dict[str, Any], response: Any) -> bool:
            wait = self.get_retry_after(response)
            if wait is not None and wait > max_wait_s:
                return False
            return bool(super().is_retry(settings, response))

    return CappedRetryPolicy(retry_total=total)


# ----------------------------------------------------------------------------- states


def instance_state(provisioning: str | None, status_codes: Iterable[str]) -> InstanceState:
    """A VM's state from its provisioning state and its instance view's ``PowerState/*``.

    A VM whose creation failed is ``terminated``: it is no machine, whatever ARM still holds."""
    prov = (provisioning or "").lower()
    if prov == "failed":
        return InstanceState.TERMINATED
    if prov == "deleting":
        return InstanceState.STOPPING
    power = next(
        (c.split("/", 1)[1].lower() for c in status_codes if c.startswith("PowerState/")), None
    )
    if power == "running" and prov in ("succeeded", ""):
        return InstanceState.RUNNING
    if power in ("deallocating", "stopping"):
        return InstanceState.STOPPING
    if power in ("deallocated", "stopped"):
        return InstanceState.STOPPED
    return InstanceState.PENDING  # creating, starting, or no power state yet


# ----------------------------------------------------------------------------- offers


def _capabilities(sku: Any) -> dict[str, str]:
    return {c.name: c.value for c in (sku.capabilities or []) if c.name and c.value is not None}


def _number(text: str | None, default: float = 0.0) -> float:
    try:
        return float(text) if text is not None else default
    except ValueError:
        return default


def sku_zones(sku: Any, location: str) -> tuple[list[str], bool]:
    """The zones of ``location`` the subscription may use the SKU in, and whether the SKU is
    usable there at all (a ``Location`` restriction takes the whole region away)."""
    zones: list[str] = []
    for info in sku.location_info or []:
        if (info.location or "").lower() == location.lower():
            zones.extend(info.zones or [])
    for restriction in sku.restrictions or []:
        info = restriction.restriction_info
        if info is None:
            continue
        if str(restriction.type) in ("Location", "ResourceSkuRestrictionsType.LOCATION"):
            if any(loc.lower() == location.lower() for loc in info.locations or []):
                return [], False
        else:
            blocked = set(info.zones or [])
            zones = [z for z in zones if z not in blocked]
            if not zones and blocked:
                return [], False
    return sorted(zones), True


def sku_offers(
    skus: Iterable[Any],
    *,
    provider: str,
    location: str,
    instance_type: str | None,
    zones: tuple[str, ...],
    spot: bool,
    prices: Mapping[str, float],
    spot_prices: Mapping[str, float],
) -> tuple[list[Offer], list[str]]:
    """The offers of the SKU list (one per usable zone), and the SKUs left out for want of a
    price. A spot offer without a spot price is priced at pay-as-you-go: what ``maxPrice: -1``
    may cost at most."""
    offers: list[Offer] = []
    unpriced: list[str] = []
    for sku in skus:
        if sku.resource_type != "virtualMachines" or not sku.name:
            continue
        if instance_type is not None and sku.name.lower() != instance_type.lower():
            continue
        caps = _capabilities(sku)
        if spot and caps.get("LowPriorityCapable", "False").lower() != "true":
            continue
        usable, allowed = sku_zones(sku, location)
        if not allowed:
            continue
        price = (spot_prices.get(sku.name) if spot else None) or prices.get(sku.name)
        if price is None:
            unpriced.append(sku.name)
            continue
        places = [z for z in usable if not zones or z in zones] if usable else [""]
        if not usable and zones:
            places = []  # a region without zones cannot serve a pool that names zones
        for zone in places:
            offers.append(
                Offer(
                    provider=provider,
                    region=location,
                    zone=zone,
                    instance_type=sku.name,
                    price_per_hour=float(price),
                    cpu_millis=int(_number(caps.get("vCPUs")) * 1000),
                    memory_mib=int(_number(caps.get("MemoryGB")) * 1024),
                    gpus=int(_number(caps.get("GPUs"))),
                    spot=spot,
                    available=None,
                )
            )
    return offers, unpriced


# ----------------------------------------------------------------------------- errors


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), None without one."""
    value = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def error_code(exc: BaseException) -> tuple[str, str]:
    """ARM's error code and message from an azure-core error (``{"error": {code, message}}``)."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None) or ""
    message = getattr(error, "message", None) or str(exc).strip()
    return str(code), str(message)


def error_kind(status: int | None, code: str, message: str) -> ErrorKind:
    """The taxonomy's kind for an ARM refusal. Anything else a client sent wrong (a bad image or
    subnet, a missing role) will not mend by itself: ``auth``, an admin must act."""
    if code in CAPACITY_CODES:
        return ErrorKind.CAPACITY
    if code in QUOTA_CODES or (code == "OperationNotAllowed" and "quota" in message.lower()):
        return ErrorKind.QUOTA
    if code in ("OperationPreempted", "VMEvicted"):
        return ErrorKind.PREEMPTED
    if code in AUTH_CODES or status in (401, 403):
        return ErrorKind.AUTH
    if status is None or status < 400 or status in (408, 409, 429) or status >= 500:
        return ErrorKind.TRANSIENT
    return ErrorKind.AUTH


def provider_error(exc: BaseException, *, offer_key: str | None, doing: str) -> ProviderError:
    """An azure-core exception as a ``ProviderError`` whose message says what was being done,
    ARM's code and message."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        return ProviderError(
            ErrorKind.TRANSIENT, f"{doing}: ARM did not answer ({exc})", offer_key=offer_key
        )
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None) or getattr(response, "status_code", None)
    code, message = error_code(exc)
    kind = error_kind(status, code, message)
    if isinstance(exc, ClientAuthenticationError):
        kind = ErrorKind.AUTH
    elif not isinstance(exc, HttpResponseError):
        kind = ErrorKind.TRANSIENT
    retry = retry_after_seconds(getattr(response, "headers", None))
    label = f"{code}: " if code and not message.startswith(f"({code})") else ""
    return ProviderError(
        kind,
        f"{doing}: {label}{message}" + (f" (HTTP {status})" if status else ""),
        offer_key=offer_key,
        retry_after_s=retry,
    )
