"""``/api/v1/virtual-clusters``: teams' shares, changed live by admins."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from shoal.server.admin_schemas import (
    ChangeResult,
    VirtualClusterIn,
    VirtualClusterOut,
    VirtualClusterPatch,
)
from shoal.server.auth import Principal
from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.services import vcs
from shoal.server.services.users import require_admin

router = APIRouter(prefix="/api/v1/virtual-clusters", tags=["virtual clusters"])


def _admin(caller: Principal) -> None:
    require_admin(caller)


def _valid_name(name: str) -> None:
    if not name.replace("-", "").replace("_", "").isalnum() or len(name) > 64:
        raise ApiError(
            400, "InvalidParametersError", "VC names are 1-64 letters, digits, '-' or '_'"
        )


@router.get("", response_model=list[VirtualClusterOut])
def list_vcs(ctx: Context, caller: Caller) -> list[VirtualClusterOut]:
    """Every VC with its guarantee, borrowing limit and current use."""
    return vcs.describe_all(ctx)


@router.get("/{name}", response_model=VirtualClusterOut)
def get_vc(name: str, ctx: Context, caller: Caller) -> VirtualClusterOut:
    for vc in vcs.describe_all(ctx):
        if vc.name == name:
            return vc
    raise ApiError(404, "NoVirtualClusterError", f"no virtual cluster {name!r}")


@router.post("/{name}", response_model=VirtualClusterOut, status_code=201)
def create_vc(name: str, body: VirtualClusterIn, ctx: Context, caller: Caller) -> VirtualClusterOut:
    _admin(caller)
    _valid_name(name)
    vcs.upsert(ctx, name, body, create=True)
    return get_vc(name, ctx, caller)


@router.patch("/{name}", response_model=ChangeResult)
def patch_vc(
    name: str,
    body: VirtualClusterPatch,
    ctx: Context,
    caller: Caller,
    dry_run: Annotated[bool, Query(alias="dryRun")] = False,
) -> ChangeResult:
    """Change only the settings given (null: back to the default, e.g. no borrowing limit);
    checked like a creation. ``dryRun=true`` answers the same and writes nothing."""
    _admin(caller)
    return vcs.patch(ctx, name, body, dry_run=dry_run)


@router.put("/{name}", response_model=VirtualClusterOut)
def replace_vc(
    name: str, body: VirtualClusterIn, ctx: Context, caller: Caller
) -> VirtualClusterOut:
    """Replace every setting: those not given return to their defaults. To change some
    settings only, use PATCH."""
    _admin(caller)
    vcs.upsert(ctx, name, body, create=False)
    return get_vc(name, ctx, caller)


@router.delete("/{name}", status_code=204)
def delete_vc(name: str, ctx: Context, caller: Caller) -> None:
    _admin(caller)
    vcs.delete(ctx, name)
