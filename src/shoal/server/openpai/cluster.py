"""OpenPAI v2 about the cluster (docs/openpai-compat.md): ``info`` and virtual clusters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter

from shoal import __version__
from shoal.server.admin_schemas import VirtualClusterOut
from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.services import vcs

router = APIRouter(prefix="/api/v2", tags=["openpai"])


@router.get("/info")
def info() -> dict[str, str]:
    """What OpenPAI's SDK and VS Code client ask first. shoal is neither of OpenPAI's launchers;
    it answers ``k8s``, the launcher whose job protocol and REST shapes it follows."""
    return {
        "name": "PAI RESTful API",
        "version": f"v{__version__}",
        "launcherType": "k8s",
        "authnMethod": "basic",
    }


def _pai_vc(vc: VirtualClusterOut) -> dict[str, Any]:
    total = vc.clusterTotal

    def resources(v: Mapping[str, float | None]) -> dict[str, int]:
        """OpenPAI's resource counts are integers: cores, MiB and GPUs, rounded."""
        amounts = {k: total[k] if v[k] is None else v[k] for k in ("cpu", "memoryMiB", "gpu")}
        cpu, memory, gpu = (round(amounts[k] or 0.0) for k in ("cpu", "memoryMiB", "gpu"))
        return {"cpu": cpu, "memory": memory, "gpu": gpu, "vCores": cpu, "GPUs": gpu}

    share = 100.0 * (vc.guarantee["gpu"] or 0.0) / total["gpu"] if total["gpu"] else 0.0
    used = 100.0 * vc.used["gpu"] / total["gpu"] if total["gpu"] else 0.0
    limit = vc.borrowLimit
    max_share = (
        100.0
        if limit is None or limit["gpu"] is None
        else min(100.0, share + (100.0 * limit["gpu"] / total["gpu"] if total["gpu"] else 0.0))
    )
    return {
        "capacity": share,
        "maxCapacity": max_share,
        "usedCapacity": used,
        "dedicated": False,
        "resourcesUsed": resources(vc.used),
        "resourcesGuaranteed": resources(vc.guarantee),
        "resourcesTotal": resources(total),
        "status": "RUNNING",
    }


@router.get("/virtual-clusters", response_model=None)
def virtual_clusters(ctx: Context, caller: Caller) -> dict[str, Any]:
    """OpenPAI's VC map: capacity, used and guaranteed resources per VC."""
    return {vc.name: _pai_vc(vc) for vc in vcs.describe_all(ctx)}


@router.get("/virtual-clusters/{name}", response_model=None)
def virtual_cluster(name: str, ctx: Context, caller: Caller) -> dict[str, Any]:
    for vc in vcs.describe_all(ctx):
        if vc.name == name:
            return _pai_vc(vc)
    raise ApiError(404, "NoVirtualClusterError", f"virtual cluster {name} is not found")
