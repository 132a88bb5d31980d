"""Node administration: ``/api/v1/nodes/{name}/cordon|drain|uncordon`` and the node event log
(the node list itself is in ``system``)."""

from __future__ import annotations

from fastapi import APIRouter

from shoal.core.nodestates import NodeEvent
from shoal.server.deps import Caller, Context
from shoal.server.routers.system import node_out
from shoal.server.schemas import NodeEventOut, NodeOut
from shoal.server.services.node_life import hold_node, node_events

router = APIRouter(tags=["nodes"])


@router.post("/api/v1/nodes/{name}/cordon", response_model=NodeOut)
def cordon(name: str, ctx: Context, caller: Caller) -> NodeOut:
    """No new tasks on the node; its running tasks go on (admins)."""
    hold_node(ctx, caller, name, NodeEvent.CORDON)
    return node_out(ctx, name)


@router.post("/api/v1/nodes/{name}/drain", response_model=NodeOut)
def drain(name: str, ctx: Context, caller: Caller) -> NodeOut:
    """No new tasks on the node; its running tasks finish, then it is DRAINED (admins)."""
    hold_node(ctx, caller, name, NodeEvent.DRAIN)
    return node_out(ctx, name)


@router.post("/api/v1/nodes/{name}/uncordon", response_model=NodeOut)
def uncordon(name: str, ctx: Context, caller: Caller) -> NodeOut:
    """Lift a cordon or a drain: the node takes new tasks again (admins)."""
    hold_node(ctx, caller, name, NodeEvent.UNCORDON)
    return node_out(ctx, name)


@router.get("/api/v1/nodes/{name}/events", response_model=list[NodeEventOut])
def events(name: str, ctx: Context, caller: Caller) -> list[NodeEventOut]:
    """What happened to the node: joins, state changes, cordons and drains, oldest first."""
    return node_events(ctx, name)
