"""Data sets: files and directories users push to the server, named per owner, read by their
owner, the users, groups and virtual clusters it is shared with, and admins. Everyone else is
told there is no such data set (404), so names do not leak.

A push becomes visible in one commit, after its upload is complete and its sha256 verified
(``blobs.receive``): a data set is never half there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal import archives
from shoal.core.states import State
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services.blobs import BlobStore, Received
from shoal.server.services.vc_loading import DEFAULT_VC
from shoal.spec.patterns import DATA_NAME_RE
from shoal.store.models import DataSetRow, ImageRow, Job, User, VirtualClusterRow

SHARE_KINDS = ("users", "groups", "vcs")
ACTIVE = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)


def blob_store(ctx: ServerContext) -> BlobStore:
    return BlobStore(ctx.settings.blobs_dir)


def split_ref(principal: Principal, ref: str) -> tuple[str, str]:
    """(owner, name) of ``NAME`` (the caller's) or ``OWNER/NAME``."""
    owner, sep, name = ref.rpartition("/")
    return (owner if sep else principal.user), name


def _missing(owner: str, name: str, where: str = "") -> ApiError:
    return ApiError(
        404,
        "NoDataSetError",
        f"no data set {owner}/{name}{where} that you may read; see `shoal data list` (its owner "
        "can share it with `shoal data share`)",
    )


def _in_vc(session: Session, principal: Principal, vc: str) -> bool:
    if vc == DEFAULT_VC:
        return True
    row = session.get(VirtualClusterRow, vc)
    if row is None:
        return False
    members = set(row.members or ())
    return not members or principal.user in members or bool(members & set(principal.groups))


def may_read(session: Session, principal: Principal, row: DataSetRow) -> bool:
    if principal.is_admin or row.owner == principal.user:
        return True
    shares = row.shares or {}
    if principal.user in shares.get("users", ()):
        return True
    if set(principal.groups) & set(shares.get("groups", ())):
        return True
    return any(_in_vc(session, principal, vc) for vc in shares.get("vcs", ()))


def _row(session: Session, owner: str, name: str) -> DataSetRow | None:
    return session.scalar(
        select(DataSetRow).where(DataSetRow.owner == owner, DataSetRow.name == name)
    )


def readable(session: Session, principal: Principal, owner: str, name: str) -> DataSetRow:
    row = _row(session, owner, name)
    if row is None or not may_read(session, principal, row):
        raise _missing(owner, name)
    return row


def _owned(session: Session, principal: Principal, owner: str, name: str) -> DataSetRow:
    """The data set, if the caller may change it (its owner or an admin); others may not even
    learn it exists, unless they may read it (then 403)."""
    row = readable(session, principal, owner, name)
    if not (principal.is_admin or row.owner == principal.user):
        raise ApiError(
            403,
            "ForbiddenUserError",
            f"only {owner} (or an admin) may change data set {owner}/{name}",
        )
    return row


def check_push(
    ctx: ServerContext, principal: Principal, owner: str, name: str, replace: bool
) -> None:
    """Before the body is read: the caller pushes under its own name, a valid one, and does not
    overwrite a data set unless asked to."""
    if owner != principal.user:
        raise ApiError(
            403, "ForbiddenUserError", f"you push data sets as {principal.user}, not as {owner}"
        )
    if not DATA_NAME_RE.match(name):
        raise ApiError(
            400,
            "InvalidDataSetName",
            f"data set name {name!r} is not valid: use 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
        )
    with ctx.db.read() as session:
        if _row(session, owner, name) is not None and not replace:
            raise ApiError(
                409,
                "DataSetExists",
                f"you already have a data set {name!r}; push with --replace to replace it",
            )


def publish(
    ctx: ServerContext,
    principal: Principal,
    name: str,
    kind: str,
    received: Received,
    replace: bool,
) -> DataSetRow:
    """Make a verified upload the data set ``name`` of the caller (one commit)."""
    if kind == "dir":
        try:
            archives.check(received.path)
        except archives.ArchiveError as exc:
            raise ApiError(400, "UnsafeArchive", f"data set {name!r}: {exc}") from None
    store = blob_store(ctx)
    store.commit(received)
    replaced: str | None = None
    with ctx.db.write() as session:
        row = _row(session, principal.user, name)
        if row is not None and not replace:
            raise ApiError(409, "DataSetExists", f"you already have a data set {name!r}")
        if row is None:
            row = DataSetRow(owner=principal.user, name=name, shares={})
            session.add(row)
        else:
            replaced = row.sha256
        row.sha256, row.kind, row.size = received.sha256, kind, received.size
        row.created_at = ctx.clock()
        session.flush()
        session.expunge(row)
    if replaced is not None and replaced != received.sha256:
        forget_blob(ctx, replaced)
    return row


def visible(ctx: ServerContext, principal: Principal, everyone: bool) -> list[DataSetRow]:
    """The caller's data sets and those shared with it (``everyone``, for admins: all)."""
    with ctx.db.read() as session:
        rows = session.scalars(select(DataSetRow).order_by(DataSetRow.owner, DataSetRow.name))
        if everyone and principal.is_admin:
            chosen = list(rows)
        else:  # an admin's own list is what it would see as a plain user
            plain = Principal(principal.user, False, principal.kind, principal.groups)
            chosen = [row for row in rows if may_read(session, plain, row)]
        for row in chosen:
            session.expunge(row)
    return chosen


def find(ctx: ServerContext, principal: Principal, owner: str, name: str) -> DataSetRow:
    with ctx.db.read() as session:
        row = readable(session, principal, owner, name)
        session.expunge(row)
    return row


def remove(ctx: ServerContext, principal: Principal, owner: str, name: str) -> None:
    with ctx.db.write() as session:
        row = _owned(session, principal, owner, name)
        sha256 = row.sha256
        session.delete(row)
    forget_blob(ctx, sha256)


def change_shares(
    ctx: ServerContext,
    principal: Principal,
    owner: str,
    name: str,
    change: dict[str, list[str]],
    add: bool,
) -> DataSetRow:
    """Share with (``add``) or stop sharing with the users, groups and VCs of ``change``."""
    with ctx.db.write() as session:
        row = _owned(session, principal, owner, name)
        if add:
            _check_share_targets(session, change)
        shares = {kind: list((row.shares or {}).get(kind, [])) for kind in SHARE_KINDS}
        for kind in SHARE_KINDS:
            for who in change.get(kind, []):
                if add and who not in shares[kind]:
                    shares[kind].append(who)
                elif not add and who in shares[kind]:
                    shares[kind].remove(who)
        row.shares = {kind: sorted(names) for kind, names in shares.items() if names}
        session.flush()
        session.expunge(row)
    return row


def _check_share_targets(session: Session, change: dict[str, list[str]]) -> None:
    for user in change.get("users", []):
        if session.scalar(select(User.id).where(User.name == user)) is None:
            raise ApiError(404, "NoUserError", f"no user {user!r}; see `shoal user list`")
    for vc in change.get("vcs", []):
        if vc != DEFAULT_VC and session.get(VirtualClusterRow, vc) is None:
            raise ApiError(404, "NoVirtualClusterError", f"no virtual cluster {vc!r}")


def forget_blob(ctx: ServerContext, sha256: str) -> None:
    """Remove a blob no data set, no pushed image, no job's code and no unfinished job's data
    sets use (content uploaded as code is kept: a job may name it later)."""
    if blob_store(ctx).is_code(sha256):
        return
    with ctx.db.read() as session:
        if session.scalar(select(DataSetRow.id).where(DataSetRow.sha256 == sha256).limit(1)):
            return
        if session.scalar(select(ImageRow.name).where(ImageRow.blob_sha256 == sha256).limit(1)):
            return
        if session.scalar(select(Job.id).where(Job.code_hash == sha256).limit(1)):
            return
        for pinned in session.scalars(select(Job.data_sets).where(Job.state.in_(ACTIVE))):
            if any(entry.get("sha256") == sha256 for entry in (pinned or {}).values()):
                return
    blob_store(ctx).remove(sha256)


def resolve_declared(
    session: Session, principal: Principal, refs: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """The data sets a job declares, pinned to their current content: reference -> entry. A data
    set the submitter may not read is a 404 naming it (as if it did not exist)."""
    pinned: dict[str, dict[str, Any]] = {}
    for ref in refs:
        owner, name = split_ref(principal, ref)
        row = _row(session, owner, name)
        if row is None or not may_read(session, principal, row):
            raise ApiError(
                404,
                "NoDataSetError",
                f"the job reads data set {ref!r}, but there is no data set {owner}/{name} that "
                f"{principal.user} may read; push it (`shoal data push`) or ask its owner to "
                "share it",
                [{"path": "data", "message": f"no data set {ref!r}"}],
            )
        pinned[ref] = {
            "owner": row.owner,
            "name": row.name,
            "sha256": row.sha256,
            "kind": row.kind,
            "size": row.size,
        }
    return pinned
