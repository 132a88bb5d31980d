"""``shoal data push|pull|list|rm|share|unshare``: data sets on the server, for tasks to read.

A data set is a file or a directory, named per owner: yours by ``NAME``, another user's (shared
with you) by ``OWNER/NAME``. A directory travels as a tar (``.shoalignore`` honoured, as for
code). Both directions are streamed through temporary files and checked against the sha256;
nothing appears on either side until it is complete.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from datetime import datetime
from pathlib import Path

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.cli.render import console, new_table
from shoal.client import ShoalClient

data_app = typer.Typer(
    help="Data sets: push files and directories to the server; jobs read them "
    "under $SHOAL_DATA_DIR.",
    no_args_is_help=True,
)
USER_OPTION = typer.Option([], "--user", "-u", help="A user (repeatable).")
GROUP_OPTION = typer.Option([], "--group", "-g", help="A group's members (repeatable).")
VC_OPTION = typer.Option([], "--vc", help="A virtual cluster's members (repeatable).")


def _owner_and_name(api: ShoalClient, ref: str) -> tuple[str, str]:
    owner, sep, name = ref.rpartition("/")
    if sep:
        return owner, name
    return str(api.me()["name"]), ref


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@data_app.command("push")
@api_errors
def push(
    local: Path = typer.Argument(..., help="A file or a directory."),
    name: str = typer.Argument(..., help="The data set's name (yours)."),
    replace: bool = typer.Option(False, "--replace", help="Replace your data set of this name."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Upload a file or a directory as the data set NAME (streamed; visible once complete)."""
    from shoal.archives import ArchiveError, build, human

    if not local.exists():
        raise fail(f"{local} does not exist")
    api = client()
    owner, _ = _owner_and_name(api, name)
    with tempfile.TemporaryDirectory(prefix="shoal-data-") as scratch:
        if local.is_dir():
            try:
                built = build(local, Path(scratch) / "data.tar", compress=False)
            except ArchiveError as exc:
                raise fail(str(exc)) from None
            source, kind, sha256 = built.path, "dir", built.sha256
        else:
            source, kind, sha256 = local, "file", _sha256(local)
        pushed = api.push_data(owner, name, source, kind, sha256, replace)
    if emit(pushed, output):
        return
    console.print(
        f"data set {pushed['ref']} ({kind}, {human(pushed['size'])}, sha256 "
        f"{pushed['sha256'][:12]}): read it as $SHOAL_DATA_DIR/{name} after declaring "
        f"data: [{name}] in a job",
        markup=False,
    )


@data_app.command("pull")
@api_errors
def pull(
    ref: str = typer.Argument(..., help="NAME (yours) or OWNER/NAME (shared with you)."),
    local: Path = typer.Argument(..., help="Where to put it (into it, if a directory)."),
    force: bool = typer.Option(False, "--force", help="Replace what is there."),
) -> None:
    """Download a data set (streamed; checked against its sha256 before it appears)."""
    api = client()
    owner, name = _owner_and_name(api, ref)
    target = local / name if local.is_dir() else local
    if target.exists() and not force:
        raise fail(f"{target} exists; pull with --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, part_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.part-")
    part = Path(part_name)
    try:
        with os.fdopen(fd, "wb") as sink:
            headers = api.pull_data(owner, name, sink)
        expected = headers.get("x-shoal-sha256")
        if expected is None or _sha256(part) != expected:
            raise fail(f"the download of {owner}/{name} was cut short or changed; pull again")
        _put_in_place(part, target, headers.get("x-shoal-data-kind", "file"))
    finally:
        part.unlink(missing_ok=True)
    console.print(f"{owner}/{name} -> {target}", markup=False)


def _put_in_place(part: Path, target: Path, kind: str) -> None:
    """Move a verified download to ``target`` (a directory: unpacked next to it first)."""
    from shoal.archives import ArchiveError, extract

    if kind != "dir":
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(part, target)
        return
    unpacked = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.unpack-"))
    try:
        extract(part, unpacked)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        os.replace(unpacked, target)
    except ArchiveError as exc:
        raise fail(str(exc)) from None
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)


@data_app.command("list")
@api_errors
def list_data(
    all_users: bool = typer.Option(False, "--all", help="Everyone's (admins)."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Your data sets and those shared with you."""
    from shoal.archives import human

    rows = client().data_sets(all_users)
    if emit(rows, output):
        return
    if not rows:
        console.print("no data sets; push one with `shoal data push LOCAL NAME`")
        return
    table = new_table()
    for column in ("DATA SET", "KIND", "SIZE", "SHA256", "PUSHED", "SHARED WITH"):
        table.add_column(column)
    for row in rows:
        shares = row.get("shares") or {}
        shared = ", ".join(
            f"{kind[:-1]} {who}"
            for kind in ("users", "groups", "vcs")
            for who in shares.get(kind, [])
        )
        pushed = datetime.fromtimestamp(row["createdAt"]).strftime("%Y-%m-%d %H:%M")
        table.add_row(
            row["ref"], row["kind"], human(row["size"]), row["sha256"][:12], pushed, shared or "-"
        )
    console.print(table)


@data_app.command("rm")
@api_errors
def remove(ref: str = typer.Argument(..., help="NAME (yours) or OWNER/NAME (admins).")) -> None:
    """Remove a data set. Jobs already submitted keep the content they were given."""
    api = client()
    owner, name = _owner_and_name(api, ref)
    api.remove_data(owner, name)
    console.print(f"removed data set {owner}/{name}", markup=False)


def _change_shares(
    ref: str, users: list[str], groups: list[str], vcs: list[str], share: bool
) -> None:
    if not (users or groups or vcs):
        raise typer.BadParameter("name at least one --user, --group or --vc", param_hint="--user")
    api = client()
    owner, name = _owner_and_name(api, ref)
    result = api.share_data(owner, name, {"users": users, "groups": groups, "vcs": vcs}, share)
    shares = result.get("shares") or {}
    now = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in shares.items()) or "nobody"
    console.print(f"data set {result['ref']} is shared with {now}", markup=False)


@data_app.command("share")
@api_errors
def share(
    ref: str = typer.Argument(..., help="NAME (yours) or OWNER/NAME (admins)."),
    users: list[str] = USER_OPTION,
    groups: list[str] = GROUP_OPTION,
    vcs: list[str] = VC_OPTION,
) -> None:
    """Let users, a group's members or a VC's members read a data set (as OWNER/NAME)."""
    _change_shares(ref, users, groups, vcs, share=True)


@data_app.command("unshare")
@api_errors
def unshare(
    ref: str = typer.Argument(..., help="NAME (yours) or OWNER/NAME (admins)."),
    users: list[str] = USER_OPTION,
    groups: list[str] = GROUP_OPTION,
    vcs: list[str] = VC_OPTION,
) -> None:
    """Stop sharing a data set with these users, groups or VCs (submitted jobs keep theirs)."""
    _change_shares(ref, users, groups, vcs, share=False)
