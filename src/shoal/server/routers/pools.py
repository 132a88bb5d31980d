"""Cloud node pools (docs/cloud.md): ``GET /api/v1/pools`` and ``PUT .../{name}/target``."""

from __future__ import annotations

from fastapi import APIRouter

from shoal.server.autoscaling.views import list_pools, scale_pool
from shoal.server.deps import Caller, Context
from shoal.server.pool_schemas import PoolOut, PoolTargetIn

router = APIRouter(tags=["pools"])


@router.get("/api/v1/pools", response_model=list[PoolOut])
def pools(ctx: Context, caller: Caller) -> list[PoolOut]:
    """The pools, their machines, node-hours and cost (409 on a server without a cloud file)."""
    del caller  # any signed-in user: pools are the cluster's, like its nodes
    return list_pools(ctx)


@router.put("/api/v1/pools/{name}/target", response_model=PoolOut)
def target(name: str, body: PoolTargetIn, ctx: Context, caller: Caller) -> PoolOut:
    """Set a pool's size: machines are launched, or idle ones drained and removed (admins)."""
    return scale_pool(ctx, caller, name, body.target)
