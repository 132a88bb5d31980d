"""What ARM's documents look like to the fake ARM endpoint: resource SKUs as ARM lists them, and
the checks of a VM's creation body."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection
from typing import Any

SHOAL_TAGS = ("shoal-cluster", "shoal-pool", "shoal-request")


def nic_name(nic_id: str) -> str:
    return nic_id.rstrip("/").rsplit("/", 1)[-1]


def sku(name: str, vcpus: int, memory_gb: float, **extra: Any) -> dict[str, Any]:
    """A resource SKU as ARM lists it; ``zones``, ``restricted_zones``, ``location_restricted``,
    ``gpus`` and ``spot`` (LowPriorityCapable) shape it."""
    location = extra.get("location", "westeurope")
    capabilities = [
        {"name": "vCPUs", "value": str(vcpus)},
        {"name": "MemoryGB", "value": str(memory_gb)},
        {"name": "LowPriorityCapable", "value": "True" if extra.get("spot", True) else "False"},
    ]
    if extra.get("gpus"):
        capabilities.append({"name": "GPUs", "value": str(extra["gpus"])})
    restrictions: list[dict[str, Any]] = []
    if extra.get("restricted_zones"):
        restrictions.append(
            {
                "type": "Zone",
                "values": [location],
                "restrictionInfo": {"locations": [location], "zones": extra["restricted_zones"]},
                "reasonCode": "NotAvailableForSubscription",
            }
        )
    if extra.get("location_restricted"):
        restrictions.append(
            {
                "type": "Location",
                "values": [location],
                "restrictionInfo": {"locations": [location]},
                "reasonCode": "NotAvailableForSubscription",
            }
        )
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "size": name.removeprefix("Standard_"),
        "locations": [location],
        "locationInfo": [{"location": location, "zones": extra.get("zones", ["1", "2", "3"])}],
        "capabilities": capabilities,
        "restrictions": restrictions,
    }


def check_vm_body(name: str, body: Any, location: str, nics_known: Collection[str]) -> list[str]:
    """What ARM would refuse (or shoal should not send) in a VM's creation body."""
    where = f"VM {name}"
    if not isinstance(body, dict) or not isinstance(body.get("properties"), dict):
        return [f"{where}: no properties"]
    problems = []
    props = body["properties"]
    tags = body.get("tags") or {}
    problems += [f"{where}: tag {t} missing" for t in SHOAL_TAGS if not tags.get(t)]
    if body.get("location") != location:
        problems.append(f"{where}: location {body.get('location')!r}, not {location!r}")
    if not props.get("hardwareProfile", {}).get("vmSize"):
        problems.append(f"{where}: no hardwareProfile.vmSize")
    os_disk = props.get("storageProfile", {}).get("osDisk", {})
    if os_disk.get("deleteOption") != "Delete":
        problems.append(f"{where}: the OS disk would outlive the VM (deleteOption)")
    os_profile = props.get("osProfile", {})
    try:
        base64.b64decode(os_profile.get("customData", ""), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        problems.append(f"{where}: osProfile.customData is not base64")
    if not os_profile.get("customData") or not os_profile.get("adminUsername"):
        problems.append(f"{where}: osProfile needs customData and adminUsername")
    nics = props.get("networkProfile", {}).get("networkInterfaces", [])
    if len(nics) != 1 or nic_name(nics[0].get("id", "")) not in nics_known:
        problems.append(f"{where}: networkProfile must name one existing NIC, got {nics}")
    elif nics[0].get("properties", {}).get("deleteOption") != "Delete":
        problems.append(f"{where}: the NIC would outlive the VM (deleteOption)")
    if props.get("priority") == "Spot":
        if props.get("evictionPolicy") not in ("Deallocate", "Delete"):
            problems.append(f"{where}: Spot needs evictionPolicy Deallocate or Delete")
        if props.get("billingProfile", {}).get("maxPrice") != -1:
            problems.append(f"{where}: Spot needs billingProfile.maxPrice -1")
    return problems
