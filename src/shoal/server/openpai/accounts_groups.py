"""OpenPAI v2 groups (docs/openpai-compat.md, "Accounts"): names users carry and VCs admit, with
a description, externalName and extension. A group's VCs are its
``extension.acls.virtualClusters``, as in OpenPAI; giving that list changes the VCs' members."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, model_validator

from shoal.server.deps import Caller, Context
from shoal.server.openpai.accounts_common import admin_only, done
from shoal.server.services import groups
from shoal.server.services.groups import Group, GroupChange

router = APIRouter()


class GroupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    groupname: str
    description: str | None = None
    externalName: str | None = None
    extension: dict[str, Any] | None = None


class GroupUpdate(BaseModel):
    """``{data, patch}``; OpenPAI's SDK sends the group bare, which is taken as a patch."""

    model_config = ConfigDict(extra="forbid")

    data: GroupIn
    patch: bool = False

    @model_validator(mode="before")
    @classmethod
    def _bare_group(cls, value: Any) -> Any:
        if isinstance(value, dict) and not {"data", "patch"} & value.keys():
            return {"data": value, "patch": True}
        return value


def _group_out(group: Group) -> dict[str, Any]:
    return {
        "groupname": group.name,
        "description": group.description,
        "externalName": group.external_name,
        "extension": group.extension,
    }


@router.get("/groups")
def list_groups(ctx: Context, caller: Caller) -> list[dict[str, Any]]:
    return [_group_out(g) for g in groups.list_groups(ctx)]


@router.post("/groups", status_code=201)
def create_group(body: GroupIn, ctx: Context, caller: Caller) -> dict[str, str]:
    admin_only(caller)
    change = GroupChange(body.description, body.externalName, body.extension, full=True)
    groups.create_group(ctx, caller, body.groupname, change)
    return done("group is created successfully")


@router.put("/groups", status_code=201)
def update_group(body: GroupUpdate, ctx: Context, caller: Caller) -> dict[str, str]:
    """``patch: true`` changes the attributes given; ``false`` resets the others."""
    admin_only(caller)
    data = body.data
    change = GroupChange(data.description, data.externalName, data.extension, not body.patch)
    groups.update_group(ctx, caller, data.groupname, change)
    return done(f"update group {data.groupname} successfully.")


@router.get("/groups/{group}")
def get_group(group: str, ctx: Context, caller: Caller) -> dict[str, Any]:
    return _group_out(groups.get_group(ctx, group))


@router.delete("/groups/{group}", status_code=201)
def delete_group(group: str, ctx: Context, caller: Caller) -> dict[str, str]:
    admin_only(caller)
    groups.delete_group(ctx, caller, group)
    return done("group is removed successfully")


@router.get("/groups/{group}/userlist")
def group_members(group: str, ctx: Context, caller: Caller) -> list[dict[str, Any]]:
    """The group's users (admins); an unknown group has none, as in OpenPAI."""
    admin_only(caller)
    return [
        {"username": name, "clusterAdmin": admin}
        for name, admin in groups.members(ctx, caller, group)
    ]
