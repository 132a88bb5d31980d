"""Tar archives that cross the network: a job's code directory and data set directories.

One module for the three sides, so they agree on what is safe:

- the CLI builds an archive the same way every time (names sorted; times, owners and groups
  zeroed; setuid/setgid bits cleared; the ``.shoalignore`` file and ``DEFAULT_IGNORED`` honoured),
  so one directory gives one archive and one sha256, and unchanged code is never uploaded twice;
- the server refuses an archive with an unsafe member (``unsafe_member``) when it is uploaded;
- the agent and ``shoal data pull`` unpack with ``extract`` (tarfile's ``data`` filter: no
  member outside the target, no device, setuid/setgid and group/other write bits cleared).

Nothing here imports the server, the store or pydantic; ``pathspec`` loads only to build.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import posixpath
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

IGNORE_FILE = ".shoalignore"
# Skipped unless .shoalignore re-includes them (``!.venv/``): version control, virtual
# environments and caches are never part of a job's code.
DEFAULT_IGNORED = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    "*.pyc",
    ".venv/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
)
CHUNK = 1 << 20
SETID_BITS = stat.S_ISUID | stat.S_ISGID
MAX_LINK_HOPS = 40  # as the kernel's ELOOP limit


@dataclass(frozen=True)
class BuiltArchive:
    path: Path
    sha256: str
    size: int  # bytes of the archive
    files: int
    biggest: list[tuple[int, str]]  # (bytes, name) of the largest files, largest first


class ArchiveError(Exception):
    """An archive (or the directory it is built from) cannot be used; the message names the
    member and the fix."""


def ignore_matcher(root: Path) -> Callable[[str, bool], bool]:
    """``matches(relative_posix_name, is_dir)``: True when the name is ignored (gitignore syntax:
    ``DEFAULT_IGNORED``, then the lines of ``root/.shoalignore``)."""
    import pathspec  # noqa: PLC0415 (only the CLI builds archives)

    lines = list(DEFAULT_IGNORED)
    ignore_file = root / IGNORE_FILE
    if ignore_file.is_file():
        lines += ignore_file.read_text(encoding="utf-8").splitlines()
    spec = pathspec.GitIgnoreSpec.from_lines(lines)

    def matches(name: str, is_dir: bool) -> bool:
        return bool(spec.match_file(name + "/" if is_dir else name))

    return matches


def walk(root: Path) -> Iterator[tuple[str, Path]]:
    """Every entry under ``root`` that is not ignored, as (archive name, path), sorted by name;
    an ignored directory is not entered."""
    ignored = ignore_matcher(root)

    def visit(directory: Path, prefix: str) -> Iterator[tuple[str, Path]]:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            name = f"{prefix}{entry.name}"
            is_dir = entry.is_dir(follow_symlinks=False)
            if ignored(name, is_dir):
                continue
            yield name, Path(entry.path)
            if is_dir:
                yield from visit(Path(entry.path), name + "/")

    yield from visit(root, "")


def build(root: Path, out: Path, compress: bool) -> BuiltArchive:
    """Write ``root`` (``.shoalignore`` honoured) as a tar (gzip: ``compress``) to ``out``.
    Sockets, FIFOs and devices are left out; a symbolic link pointing outside ``root`` is an
    ``ArchiveError`` naming it (the server would refuse the archive)."""
    if not root.is_dir():
        raise ArchiveError(f"{root} is not a directory")
    sizes: list[tuple[int, str]] = []
    with open(out, "wb") as raw:
        zipped = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if compress else None
        sink: BinaryIO = zipped if zipped is not None else raw  # type: ignore[assignment]
        try:
            with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as archive:
                for name, path in walk(root):
                    _add(archive, root, name, path, sizes)
        finally:
            if zipped is not None:
                zipped.close()
    sizes.sort(key=lambda item: (-item[0], item[1]))
    return BuiltArchive(out, file_sha256(out), out.stat().st_size, len(sizes), sizes[:5])


def _add(
    archive: tarfile.TarFile, root: Path, name: str, path: Path, sizes: list[tuple[int, str]]
) -> None:
    info = archive.gettarinfo(str(path), arcname=name)
    if info is None or not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
        return  # sockets, FIFOs, devices: not code or data
    _normalise(info)
    problem = unsafe_member(info)
    if problem is not None:
        raise ArchiveError(f"{root / name}: {problem}; add it to {IGNORE_FILE}")
    if info.isreg():
        sizes.append((info.size, name))
        with open(path, "rb") as handle:
            archive.addfile(info, handle)
    else:
        archive.addfile(info)


def _normalise(info: tarfile.TarInfo) -> None:
    """The same bytes for the same content: no times, owners or setuid/setgid bits."""
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode &= 0o777 & ~SETID_BITS


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def unsafe_member(member: tarfile.TarInfo) -> str | None:
    """Why ``member`` must not be unpacked (None: it is safe)."""
    name = PurePosixPath(member.name)
    if name.is_absolute():
        return "has an absolute path"
    if ".." in name.parts:
        return "has '..' in its path"
    if member.isdev() or member.isfifo():
        return "is a device or FIFO"
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return "is not a file, directory or link"
    if member.issym() or member.islnk():
        base = posixpath.dirname(member.name) if member.issym() else ""
        target = posixpath.normpath(posixpath.join(base, member.linkname))
        if posixpath.isabs(member.linkname) or target == ".." or target.startswith("../"):
            return f"is a link pointing outside the archive (to {member.linkname})"
    return None


class LinkMap:
    """The archive's symbolic links seen so far, to follow them as unpacking would: a member
    written through a link, or a link reached through another (``a -> .``, ``b -> a/..``), must
    stay inside the archive too. Pure names: nothing on disk is looked at."""

    def __init__(self) -> None:
        self.targets: dict[tuple[str, ...], str] = {}

    def resolve(self, parts: list[str]) -> tuple[str, ...] | None:
        """Where ``parts`` (from the archive's root) lead once links are followed; None: out
        of the archive (or through more than ``MAX_LINK_HOPS`` links)."""
        todo, done, hops = list(parts), list[str](), 0
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not done:
                    return None
                done.pop()
                continue
            done.append(part)
            target = self.targets.get(tuple(done))
            if target is not None:
                hops += 1
                if hops > MAX_LINK_HOPS or target.startswith("/"):
                    return None
                done.pop()
                todo = target.split("/") + todo
        return tuple(done)

    def problem(self, member: tarfile.TarInfo) -> str | None:
        """Why ``member`` would land or point outside, given the links before it."""
        parts = member.name.split("/")
        if member.issym() or member.islnk():
            parent = self.resolve(parts[:-1])
            if parent is None:
                return "is written through a link that leads out of the archive (or loops)"
            start = list(parent) if member.issym() else []
            if self.resolve(start + member.linkname.split("/")) is None:
                return f"is a link pointing outside the archive (to {member.linkname}, via links)"
            if member.issym():
                self.targets[(*parent, parts[-1])] = member.linkname
            return None
        if self.resolve(parts) is None:
            return "is written through a link that leads out of the archive (or loops)"
        return None


def check(path: Path, max_unpacked: int | None = None) -> tuple[int, int]:
    """Every member of the archive at ``path`` is safe (else ``ArchiveError`` naming the first
    unsafe one); returns (members, unpacked bytes). ``max_unpacked`` bounds the unpacked size."""
    members = unpacked = 0
    links = LinkMap()
    try:
        with tarfile.open(path, mode="r:*") as archive:
            for member in archive:
                problem = unsafe_member(member) or links.problem(member)
                if problem is not None:
                    raise ArchiveError(f"archive member {member.name!r} {problem}")
                members += 1
                unpacked += member.size
                if max_unpacked is not None and unpacked > max_unpacked:
                    raise ArchiveError(
                        f"the archive unpacks to more than {max_unpacked} bytes "
                        f"(at member {member.name!r})"
                    )
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as exc:
        raise ArchiveError(f"not a readable tar archive: {exc}") from None
    return members, unpacked


def extract(path: Path, target: Path) -> None:
    """Unpack into ``target`` with tarfile's ``data`` filter (members outside ``target``, links
    out of it and devices are refused; setuid/setgid bits are cleared)."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(path, mode="r:*") as archive:
            if HAS_FILTERS:
                archive.extractall(target, filter="data")
            else:
                _extract_checked(archive, path, target)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile) as exc:
        raise ArchiveError(f"cannot unpack {path.name}: {exc}") from None


# tarfile's filters came with Python 3.11.4 (and 3.8.17, 3.9.17, 3.10.12); Debian 12's python3 is
# 3.11.2: there, each member is checked as uploads are (``check``) and unpacked as ``data`` would
HAS_FILTERS = hasattr(tarfile, "data_filter")
_CLEARED = stat.S_ISUID | stat.S_ISGID | stat.S_IWGRP | stat.S_IWOTH


def _extract_checked(archive: tarfile.TarFile, path: Path, target: Path) -> None:
    members = archive.getmembers()
    links = LinkMap()
    for member in members:
        problem = unsafe_member(member) or links.problem(member)
        if problem is not None:
            raise ArchiveError(f"cannot unpack {path.name}: member {member.name!r} {problem}")
        member.mode &= ~_CLEARED  # as the data filter does
        member.uid, member.gid, member.uname, member.gname = os.geteuid(), os.getegid(), "", ""
    archive.extractall(target, members=members, numeric_owner=True)


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
