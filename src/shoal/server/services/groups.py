"""Groups, as OpenPAI's ``/api/v2/groups`` has them. A group is a name: users carry it in
``users.groups`` (membership) and VCs name it in ``members`` (access). ``user_groups`` keeps what a
group has besides its name: description, externalName, extension. A name some user carries with
no row (``/api/v1`` user edits make those) is a group too, with empty attributes.

A group's VCs are OpenPAI's ``extension.acls.virtualClusters``: read from the VCs' members, and
given there they change the VCs' members (``vcs.set_membership``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import audit, vcs
from shoal.server.services.users import USER_NAME, require_admin
from shoal.store.models import User, UserGroup, VirtualClusterRow


@dataclass(frozen=True)
class Group:
    name: str
    description: str = ""
    external_name: str = ""
    extension: dict[str, Any] = field(default_factory=dict)
    virtual_clusters: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GroupChange:
    """Attributes to set; None leaves one as it is (``full``: resets it)."""

    description: str | None = None
    external_name: str | None = None
    extension: dict[str, Any] | None = None
    full: bool = False  # a full update: what is not given is reset


# OpenPAI's clusters have a ``default`` group, and its clients put users in it: shoal's always
# exists (with no row until it is changed). It grants the default VC, open to everyone anyway,
# so being in it or not changes nothing; it cannot be deleted.
DEFAULT_GROUP = "default"
DEFAULT_GROUP_DESCRIPTION = (
    "Every user's group, as OpenPAI's default group: it grants the default VC, which is open to "
    "everyone, so membership changes nothing"
)


def known(session: Session) -> dict[str, UserGroup | None]:
    """Every group: those with a row, ``default``, and the names users carry without one
    (None)."""
    groups: dict[str, UserGroup | None] = {
        row.name: row for row in session.scalars(select(UserGroup).order_by(UserGroup.name))
    }
    groups.setdefault(DEFAULT_GROUP, None)
    for carried in session.scalars(select(User.groups)):
        for name in carried:
            groups.setdefault(name, None)
    return dict(sorted(groups.items()))


def missing(session: Session, names: Iterable[str]) -> list[str]:
    groups = known(session)
    return sorted({n for n in names if n not in groups})


def list_groups(ctx: ServerContext) -> list[Group]:
    with ctx.db.read() as session:
        rows = vcs.named_rows(session)
        return [_view(rows, name, row) for name, row in known(session).items()]


def get_group(ctx: ServerContext, name: str) -> Group:
    with ctx.db.read() as session:
        groups = known(session)
        if name not in groups:
            raise _no_group(404, name)
        return _view(vcs.named_rows(session), name, groups[name])


def create_group(ctx: ServerContext, caller: Principal, name: str, change: GroupChange) -> None:
    require_admin(caller)
    if not USER_NAME.match(name):
        raise ApiError(
            400,
            "InvalidParametersError",
            "groupname: 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
        )
    _check_extension(change.extension)
    with ctx.db.write() as session:
        if name in known(session):
            raise ApiError(
                400,
                "InvalidParametersError",
                f"groupname: group {name} already exists; PUT /api/v2/groups changes it",
            )
        if session.scalar(select(User.id).where(User.name == name)) is not None:
            raise ApiError(
                400,
                "InvalidParametersError",
                f"groupname: a user is named {name}, and VC members name users and groups "
                "alike; choose another group name",
            )
        row = _new_row(ctx, name)
        session.add(row)
        _apply(session, row, replace(change, full=True))
        audit.record(session, ctx.clock(), caller, "group.create", f"group {name}")


def update_group(ctx: ServerContext, caller: Principal, name: str, change: GroupChange) -> None:
    """Change a group's attributes; one that users carry without a row gets one."""
    require_admin(caller)
    _check_extension(change.extension)
    with ctx.db.write() as session:
        groups = known(session)
        if name not in groups:
            raise _no_group(404, name)
        row = groups[name]
        if row is None:
            row = _new_row(ctx, name)
            session.add(row)
        _apply(session, row, change)
        audit.record(session, ctx.clock(), caller, "group.update", f"group {name}")


def delete_group(ctx: ServerContext, caller: Principal, name: str) -> None:
    """The group goes: its row, the users' membership and, unless a user shares the name, the
    VCs' mention of it (``vcs.forget_member``). OpenPAI describes no 404 here: an unknown group
    is a 500 ``NoGroupError``, as OpenPAI's own server answers (its store's error passed on)."""
    require_admin(caller)
    if name == DEFAULT_GROUP:
        raise ApiError(
            403,
            "ForbiddenUserError",
            "group default always exists, as on OpenPAI; take users out of it with "
            "PUT /api/v2/users/{user}/grouplist/ instead",
        )
    with ctx.db.write() as session:
        groups = known(session)
        if name not in groups:
            raise _no_group(500, name)
        row = groups[name]
        if row is not None:
            session.delete(row)
        for user in session.scalars(select(User)):
            if name in user.groups:
                user.groups = [g for g in user.groups if g != name]
        if session.scalar(select(User.id).where(User.name == name)) is None:
            vcs.forget_member(session, name)
        audit.record(session, ctx.clock(), caller, "group.delete", f"group {name}")


def members(ctx: ServerContext, caller: Principal, name: str) -> list[tuple[str, bool]]:
    """(user, admin) for each user in the group (admins only); none for an unknown group."""
    require_admin(caller)
    with ctx.db.read() as session:
        users = session.scalars(select(User).order_by(User.name))
        return [(u.name, u.is_admin) for u in users if name in u.groups]


def _view(vc_rows: list[VirtualClusterRow], name: str, row: UserGroup | None) -> Group:
    usable = vcs.usable_by(vc_rows, {name}, admin=False)
    extension = dict(row.extension) if row is not None else {}
    acls = dict(extension.get("acls") or {})
    acls.update(admin=False, virtualClusters=usable)
    acls.setdefault("storageConfigs", [])
    extension["acls"] = acls
    return Group(
        name=name,
        description=row.description if row is not None else _default_description(name),
        external_name=row.external_name if row is not None else "",
        extension=extension,
        virtual_clusters=usable,
    )


def _default_description(name: str) -> str:
    return DEFAULT_GROUP_DESCRIPTION if name == DEFAULT_GROUP else ""


def _check_extension(extension: dict[str, Any] | None) -> None:
    acls = (extension or {}).get("acls")
    if acls is None:
        return
    problem = None
    if not isinstance(acls, dict):
        problem = "extension.acls is an object: {virtualClusters: [...], storageConfigs: [...]}"
    elif acls.get("admin"):
        problem = (
            "extension.acls.admin: shoal's admin right is per user, not per group; "
            "PUT /api/v2/users with {data: {username, admin: true}, patch: true}"
        )
    elif not _names(acls.get("virtualClusters", [])):
        problem = "extension.acls.virtualClusters is a list of virtual cluster names"
    if problem:
        raise ApiError(400, "InvalidParametersError", problem)


def _names(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _apply(session: Session, row: UserGroup, change: GroupChange) -> None:
    if change.description is not None or change.full:
        row.description = change.description or ""
    if change.external_name is not None or change.full:
        row.external_name = change.external_name or ""
    if change.extension is None and not change.full:
        return
    given = dict(change.extension or {})
    acls = dict(given.pop("acls", None) or {})
    wanted = acls.pop("virtualClusters", None)
    acls.pop("admin", None)  # never stored: always false (checked above)
    if acls:
        given["acls"] = acls
    row.extension = given if change.full else {**row.extension, **given}
    if wanted is not None:
        vcs.set_membership(session, row.name, list(wanted))


def _new_row(ctx: ServerContext, name: str) -> UserGroup:
    return UserGroup(
        name=name, description="", external_name="", extension={}, created_at=ctx.clock()
    )


def _no_group(status: int, name: str) -> ApiError:
    return ApiError(status, "NoGroupError", f"Group {name} is not found.")
