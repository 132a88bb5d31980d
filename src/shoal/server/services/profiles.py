"""Users as OpenPAI's ``/api/v2/users`` has them: shoal's user (name, admin flag, groups,
password) with OpenPAI's ``email`` and ``extension``, and the VCs the user may submit to as
``virtualCluster``. Setting that list changes the VCs' members (``vcs.set_membership``).

Admins manage everyone; a user reads and changes only themself (``update_own``). Users that a
caller may not see are answered as unknown (404 ``NoUserError``), so a refusal does not tell
who exists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.server.admin_schemas import UserIn
from shoal.server.auth import ADMIN_USER, Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import audit, vcs
from shoal.server.services import groups as group_service
from shoal.server.services.users import (
    add_user,
    check_new_user,
    check_password,
    check_password_rule,
    hash_password,
    manages_others,
    require_admin,
)
from shoal.store.models import User, VirtualClusterRow


@dataclass(frozen=True)
class Profile:
    name: str
    admin: bool
    groups: list[str]
    email: str
    extension: dict[str, Any]
    virtual_clusters: list[str]


@dataclass(frozen=True)
class ProfileChange:
    """What to change; None leaves a field as it is."""

    admin: bool | None = None
    password: str | None = None
    email: str | None = None
    extension: dict[str, Any] | None = None
    merge_extension: bool = False  # a patch adds and replaces keys; a full update replaces all
    virtual_clusters: list[str] | None = None
    groups: list[str] | None = None


@dataclass(frozen=True)
class NewProfile:
    name: str
    password: str
    admin: bool = False
    email: str = ""
    extension: dict[str, Any] = field(default_factory=dict)
    virtual_clusters: list[str] | None = None


def list_profiles(ctx: ServerContext, caller: Principal) -> list[Profile]:
    """Every user for an admin; only themself for anyone else."""
    with ctx.db.read() as session:
        query = select(User).order_by(User.name)
        if not manages_others(caller):
            query = query.where(User.name == caller.user)
        rows = vcs.named_rows(session)
        return [_profile(rows, user) for user in session.scalars(query)]


def get_profile(ctx: ServerContext, caller: Principal, name: str) -> Profile:
    with ctx.db.read() as session:
        user = _visible_user(session, caller, name)
        return _profile(vcs.named_rows(session), user)


def create(ctx: ServerContext, caller: Principal, new: NewProfile) -> None:
    """A user who logs in with a password (no first token: OpenPAI users log in)."""
    require_admin(caller)
    body = UserIn(name=new.name, admin=new.admin, password=new.password)
    check_new_user(body)
    with ctx.db.write() as session:
        add_user(session, body, ctx.clock(), email=new.email, extension=new.extension)
        if new.virtual_clusters is not None:
            vcs.set_membership(session, new.name, new.virtual_clusters)
        detail = {"admin": new.admin, "virtualClusters": new.virtual_clusters}
        audit.record(session, ctx.clock(), caller, "user.create", f"user {new.name}", detail)


def update(ctx: ServerContext, caller: Principal, name: str, change: ProfileChange) -> None:
    """An admin changes any user; admin rights stay with the built-in admin and the caller."""
    require_admin(caller)
    if change.admin is False and name in (ADMIN_USER, caller.user):
        raise ApiError(
            403,
            "RemoveAdminError",
            f"user {name} keeps admin rights (the built-in admin and yourself always do); "
            "ask another admin",
        )
    check_password_rule(change.password)
    with ctx.db.write() as session:
        _apply(session, _visible_user(session, caller, name), change)
        detail = _changed_fields(change)
        audit.record(session, ctx.clock(), caller, "user.update", f"user {name}", detail)


def update_own(
    ctx: ServerContext, caller: Principal, change: ProfileChange, old_password: str | None
) -> None:
    """A user changes their email, extension or password (with the current one, if they have
    one); never their admin right, groups or VCs."""
    if caller.kind != "user":
        raise ApiError(
            403, "ForbiddenUserError", "Applications are not allowed to do this operation."
        )
    if change.admin is not None or change.groups is not None or change.virtual_clusters is not None:
        raise ApiError(403, "ForbiddenUserError", "only admins change admin rights, groups or VCs")
    check_password_rule(change.password)
    with ctx.db.write() as session:
        user = _visible_user(session, caller, caller.user)
        if (
            change.password is not None
            and user.password_hash
            and not check_password(old_password or "", user.password_hash)
        ):
            raise ApiError(
                403,
                "ForbiddenUserError",
                "oldPassword is not your current password; give it to set newPassword",
            )
        _apply(session, user, change)
        detail = _changed_fields(change)
        audit.record(session, ctx.clock(), caller, "user.update", f"user {caller.user}", detail)


def change_groups(
    ctx: ServerContext,
    caller: Principal,
    name: str,
    groups: list[str],
    how: Literal["add", "remove", "set"],
) -> None:
    """Add groups to a user, remove them, or set the whole list (admins); the groups added must
    exist (404 ``NoGroupError``)."""
    require_admin(caller)
    with ctx.db.write() as session:
        user = _visible_user(session, caller, name)
        unknown = [] if how == "remove" else group_service.missing(session, groups)
        if unknown:
            raise ApiError(
                404,
                "NoGroupError",
                f"Group {', '.join(unknown)} is not found; POST /api/v2/groups creates one",
            )
        current = list(user.groups)
        if how == "add":
            user.groups = list(dict.fromkeys([*current, *groups]))
        elif how == "remove":
            user.groups = [g for g in current if g not in groups]
        else:
            user.groups = list(dict.fromkeys(groups))
        detail = {"groups": list(user.groups), "how": how}
        audit.record(session, ctx.clock(), caller, "user.update", f"user {name}", detail)


def _changed_fields(change: ProfileChange) -> dict[str, Any]:
    """Which fields a change set (the audit log's detail); a password only as 'changed'."""
    named = {
        "admin": change.admin,
        "email": change.email,
        "extensionKeys": None if change.extension is None else sorted(change.extension),
        "groups": change.groups,
        "virtualClusters": change.virtual_clusters,
    }
    fields: dict[str, Any] = {k: v for k, v in named.items() if v is not None}
    if change.password is not None:
        fields["passwordChanged"] = True
    return {"changes": fields}


def _visible_user(session: Session, caller: Principal, name: str) -> User:
    """The user ``name``, if the caller may see them; 404 ``NoUserError`` otherwise."""
    user = session.scalar(select(User).where(User.name == name))
    if user is None or not (manages_others(caller) or name == caller.user):
        raise ApiError(404, "NoUserError", f"User {name} is not found.")
    return user


def _profile(vc_rows: list[VirtualClusterRow], user: User) -> Profile:
    groups = list(user.groups)
    return Profile(
        name=user.name,
        admin=user.is_admin,
        groups=groups,
        email=user.email,
        extension=dict(user.extension or {}),
        virtual_clusters=vcs.usable_by(vc_rows, {user.name, *groups}, user.is_admin),
    )


def _apply(session: Session, user: User, change: ProfileChange) -> None:
    if change.admin is not None:
        user.is_admin = change.admin
    if change.password is not None:
        user.password_hash = hash_password(change.password)
    if change.email is not None:
        user.email = change.email
    if change.extension is not None:
        base = dict(user.extension or {}) if change.merge_extension else {}
        user.extension = {**base, **change.extension}
    if change.groups is not None:
        user.groups = list(dict.fromkeys(change.groups))
    if change.virtual_clusters is not None:
        vcs.set_membership(session, user.name, change.virtual_clusters)
