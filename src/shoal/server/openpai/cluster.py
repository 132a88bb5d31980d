"""OpenPAI v2 about the cluster (docs/openpai-compat.md): ``info``, virtual clusters (and the
``sku-types`` OpenPAI's SDK asks of them), storages (shoal's data sets) and alerts (none yet)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter

from shoal import __version__
from shoal.server.admin_schemas import VirtualClusterOut
from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.services import datasets, vcs
from shoal.server.services.node_views import describe_nodes
from shoal.store.models import DataSetRow

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


@router.get("/virtual-clusters/{name}/sku-types", response_model=None)
def sku_types(name: str, ctx: Context, caller: Caller) -> dict[str, Any]:
    """The node shapes of the cluster, by GPU type, as hived's SKUs (OpenPAI's SDK asks this; the
    description does not list it): each with a node's cpu, memory (MiB) and GPUs."""
    virtual_cluster(name, ctx, caller)  # 404 for an unknown VC
    skus: dict[str, Any] = {}
    for node in describe_nodes(ctx):
        sku = node.gpuType or ("cpu" if not node.gpus else "gpu")
        skus.setdefault(sku, {"cpu": node.cpus, "memory": node.memoryMiB, "gpu": node.gpus})
    return skus


def _storage(row: DataSetRow, detail: bool) -> dict[str, Any]:
    summary = {
        "name": f"{row.owner}~{row.name}",
        "share": bool(row.shares),
        "volumeName": f"shoal-data-{row.sha256[:12]}",
        "default": False,
    }
    if detail:
        summary |= {"type": "other", "data": {}, "readOnly": True}
    return summary


@router.get("/storages", response_model=None)
def storages(ctx: Context, caller: Caller, default: bool = False) -> dict[str, Any]:
    """The data sets the caller may read (``shoal data list``), as OpenPAI storages named
    ``<owner>~<name>``. None is a default storage."""
    rows = [] if default else datasets.visible(ctx, caller, everyone=False)
    return {"storages": [_storage(row, detail=False) for row in rows]}


@router.get("/storages/{storage}", response_model=None)
def storage(storage: str, ctx: Context, caller: Caller) -> dict[str, Any]:
    owner, sep, name = storage.partition("~")
    if not sep:
        raise ApiError(404, "NoStorageError", f"storage {storage} is not found: <owner>~<name>")
    try:
        row = datasets.find(ctx, caller, owner, name)
    except ApiError as exc:
        if exc.status == 403:
            raise ApiError(403, "ForbiddenUserError", exc.message) from None
        raise ApiError(404, "NoStorageError", f"storage {storage} is not found") from None
    return _storage(row, detail=True)


@router.get("/alerts", response_model=None)
def alerts(caller: Caller) -> list[dict[str, Any]]:
    """Firing alerts: shoal raises none yet."""
    return []
