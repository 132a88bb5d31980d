"""OpenPAI v2 users (docs/openpai-compat.md, "Accounts"): shoal's users with OpenPAI's profile
(``email``, ``extension``) and their VCs as ``virtualCluster``. Admins manage everyone; a user
sees and changes only themself (``/users/me``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, model_validator

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.openpai.accounts_common import admin_only, done
from shoal.server.services import profiles, users
from shoal.server.services.profiles import NewProfile, Profile, ProfileChange

router = APIRouter()


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str
    password: str
    admin: bool | None = None
    email: str | None = None
    virtualCluster: list[str] | None = None
    extension: dict[str, Any] | None = None


class UserData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str
    email: str | None = None
    virtualCluster: list[str] | None = None
    admin: bool | None = None
    password: str | None = None
    extension: dict[str, Any] | None = None


class SelfData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: str
    email: str | None = None
    newPassword: str | None = None
    oldPassword: str | None = None
    extension: dict[str, Any] | None = None


class _Update(BaseModel):
    """``{data, patch}``; OpenPAI's older SDK sends the fields bare, which is taken as a patch."""

    model_config = ConfigDict(extra="forbid")

    patch: bool = False

    @model_validator(mode="before")
    @classmethod
    def _bare_fields(cls, value: Any) -> Any:
        if isinstance(value, dict) and not {"data", "patch"} & value.keys():
            return {"data": value, "patch": True}
        return value


class UserUpdate(_Update):
    data: UserData


class SelfUpdate(_Update):
    data: SelfData


class GroupName(BaseModel):
    model_config = ConfigDict(extra="forbid")

    groupname: str


class GroupList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grouplist: list[str]


def _user_info(profile: Profile) -> dict[str, Any]:
    return {
        "username": profile.name,
        "admin": profile.admin,
        "virtualCluster": profile.virtual_clusters,
        "storageConfig": [],
        "email": profile.email,
        "extension": profile.extension,
        "grouplist": profile.groups,
    }


def _require_all(data: BaseModel, fields: tuple[str, ...]) -> None:
    """A full update (``patch: false``) gives every field, as OpenPAI's description says."""
    absent = [f for f in fields if getattr(data, f) is None]
    if absent:
        raise ApiError(
            400,
            "InvalidParametersError",
            f"data.{', data.'.join(absent)}: required when patch is false; give them, or send "
            "patch: true to change only the fields given",
            [{"path": f"data.{f}", "message": "required when patch is false"} for f in absent],
        )


@router.post("/users", status_code=201)
def create_user(body: UserCreate, ctx: Context, caller: Caller) -> dict[str, str]:
    admin_only(caller)
    profiles.create(
        ctx,
        caller,
        NewProfile(
            name=body.username,
            password=body.password,
            admin=bool(body.admin),
            email=body.email or "",
            extension=body.extension or {},
            virtual_clusters=body.virtualCluster,
        ),
    )
    return done("User is created successfully")


@router.get("/users")
def list_users(ctx: Context, caller: Caller) -> list[dict[str, Any]]:
    """Every user for an admin; only yourself otherwise."""
    return [_user_info(p) for p in profiles.list_profiles(ctx, caller)]


@router.put("/users", status_code=201)
def update_user(body: UserUpdate, ctx: Context, caller: Caller) -> dict[str, str]:
    """An admin's change of a user: ``patch: true`` changes the fields given, ``false`` all."""
    admin_only(caller)
    data = body.data
    if not body.patch:
        _require_all(data, ("email", "virtualCluster", "admin", "password", "extension"))
    change = ProfileChange(
        admin=data.admin,
        password=data.password,
        email=data.email,
        extension=data.extension,
        merge_extension=body.patch,
        virtual_clusters=data.virtualCluster,
    )
    profiles.update(ctx, caller, data.username, change)
    return done(f"update user {data.username} successfully.")


@router.put("/users/me", status_code=201)
def update_me(body: SelfUpdate, ctx: Context, caller: Caller) -> dict[str, str]:
    """Your own email, extension or password (``oldPassword`` needed if you have one). As
    OpenPAI's server does, the fields given are set and the others left as they are, whatever
    ``patch`` says; ``patch: false`` replaces ``extension`` (when given) instead of merging it."""
    data = body.data
    if data.username != caller.user:
        raise ApiError(
            403,
            "ForbiddenUserError",
            f"data.username is {data.username}, but you are {caller.user}: /users/me changes "
            "only yourself",
        )
    change = ProfileChange(
        password=data.newPassword,
        email=data.email,
        extension=data.extension,
        merge_extension=body.patch,
    )
    profiles.update_own(ctx, caller, change, data.oldPassword)
    return done(f"update user {caller.user} successfully.")


@router.get("/users/{user}")
def get_user(user: str, ctx: Context, caller: Caller) -> dict[str, Any]:
    return _user_info(profiles.get_profile(ctx, caller, user))


@router.delete("/users/{user}")
def delete_user(user: str, ctx: Context, caller: Caller) -> dict[str, str]:
    """Delete a user and revoke their tokens (admins). Active jobs refuse it (403): stop them,
    or delete with ``/api/v1/users/{name}?stopJobs=true``."""
    admin_only(caller)
    try:
        users.delete_user(ctx, caller, user)
    except ApiError as exc:
        raise _described_delete_error(exc, user) from None
    return done("user is removed successfully")


def _described_delete_error(exc: ApiError, user: str) -> ApiError:
    """shoal's refusals of a deletion, with the statuses OpenPAI's description has for it."""
    if exc.status == 400:  # the built-in admin, or yourself
        return ApiError(403, "RemoveAdminError", exc.message)
    if exc.status == 409:  # active jobs
        return ApiError(
            403,
            "ForbiddenUserError",
            f"{exc.message.split(';')[0]}; stop them first, or delete with "
            f"DELETE /api/v1/users/{user}?stopJobs=true (shoal user delete --stop-jobs)",
            exc.problems,
        )
    if exc.status == 404:
        return ApiError(404, "NoUserError", f"User {user} is not found.")
    return exc


@router.put("/users/{user}/group/", status_code=201)
def add_group(user: str, body: GroupName, ctx: Context, caller: Caller) -> dict[str, str]:
    admin_only(caller)
    profiles.change_groups(ctx, caller, user, [body.groupname], "add")
    return done(f"User {user} is added into group {body.groupname}")


@router.delete("/users/{user}/group/", status_code=201)
def remove_group(user: str, body: GroupName, ctx: Context, caller: Caller) -> dict[str, str]:
    admin_only(caller)
    profiles.change_groups(ctx, caller, user, [body.groupname], "remove")
    return done(f"User {user} is removed from group {body.groupname}")


@router.put("/users/{user}/grouplist/", status_code=201)
def set_groups(user: str, body: GroupList, ctx: Context, caller: Caller) -> dict[str, str]:
    admin_only(caller)
    profiles.change_groups(ctx, caller, user, body.grouplist, "set")
    return done("update user grouplist successfully.")
