"""The backup file (docs/backup.md): one uncompressed tar, written by the server as a stream and
checked by the CLI before it is kept and again before it is restored.

Members, in order: ``shoal-backup.json`` (the manifest: format, shoal version, schema
revision, when, how many jobs, the database's size and sha256, and every blob), ``shoal.db``
(the store as a SQLite database: SQLite's online backup, or one snapshot of a PostgreSQL store
copied into one), then ``blobs/sha256/<hash>`` per blob the store refers to and
``code/<job>.tar.gz`` per job stored before code was content-addressed. Nothing here imports
the server, the store or pydantic: the CLI uses it.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

FORMAT = 1
MANIFEST = "shoal-backup.json"
DATABASE = "shoal.db"
BLOCK = 512
READ = 1 << 20


class BackupError(Exception):
    """The file is not a whole, sound shoal backup, or cannot be restored where asked (the
    message says what is wrong and what to do; ``code`` names a refusal of the latter kind)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Manifest:
    data: dict[str, Any]

    @property
    def revision(self) -> str:
        return str(self.data["schemaRevision"])

    @property
    def members(self) -> dict[str, tuple[int, str]]:
        """Every member after the manifest: name -> (size, sha256)."""
        found = {DATABASE: (int(self.data["database"]["size"]), self.data["database"]["sha256"])}
        for blob in self.data["blobs"]:
            found[f"blobs/sha256/{blob['sha256']}"] = (int(blob["size"]), blob["sha256"])
        for code in self.data["legacyCode"]:
            found[f"code/{code['job']}.tar.gz"] = (int(code["size"]), code["sha256"])
        return found


def header(name: str, size: int, mtime: float) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(mtime), 0o600
    return info.tobuf(format=tarfile.PAX_FORMAT)


def padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


def end() -> bytes:
    return b"\0" * (2 * BLOCK)


def file_member(name: str, path: Path, size: int, mtime: float) -> Iterator[bytes]:
    """A member whose body is ``size`` bytes of ``path`` (a file that no longer has them is an
    error: the stream breaks and the CLI refuses what it got)."""
    yield header(name, size, mtime)
    left = size
    with open(path, "rb") as handle:
        while left:
            chunk = handle.read(min(READ, left))
            if not chunk:
                raise BackupError(f"{path} shrank while it was being backed up")
            left -= len(chunk)
            yield chunk
    yield padding(size)


def bytes_member(name: str, data: bytes, mtime: float) -> Iterator[bytes]:
    yield header(name, len(data), mtime)
    yield data
    yield padding(len(data))


def sha256_of(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in iter(lambda: handle.read(READ), b""):
        digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path) -> Manifest:
    """Read the whole backup: the manifest, then every member it lists, each of its size and
    sha256. Raises ``BackupError`` naming the first problem."""
    try:
        with tarfile.open(path, "r:") as archive:
            manifest = _manifest(archive, path)
            expected = manifest.members
            for member in archive:
                if member.name == MANIFEST:
                    continue
                if member.name not in expected:
                    raise BackupError(f"{path}: an unexpected member {member.name!r}")
                size, sha256 = expected.pop(member.name)
                handle = archive.extractfile(member)
                if member.size != size or handle is None or sha256_of(handle) != sha256:
                    raise BackupError(f"{path}: {member.name} is not what the manifest says")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise BackupError(f"{path} is not a whole shoal backup ({exc})") from None
    if expected:
        missing = ", ".join(sorted(expected)[:3])
        raise BackupError(f"{path} is cut short: {len(expected)} members missing ({missing})")
    return manifest


def _manifest(archive: tarfile.TarFile, path: Path) -> Manifest:
    first = archive.next()
    if first is None or first.name != MANIFEST:
        raise BackupError(f"{path} has no {MANIFEST} first: not a shoal backup")
    handle = archive.extractfile(first)
    try:
        data = json.loads(handle.read() if handle else b"")
        if data["format"] != FORMAT:
            raise BackupError(
                f"{path} is a backup of format {data['format']}; this shoal reads "
                f"format {FORMAT}: use the shoal that made it"
            )
        Manifest(data).members  # noqa: B018  # every field it needs is there
    except (ValueError, KeyError, TypeError) as exc:
        raise BackupError(f"{path}: its {MANIFEST} is malformed ({exc})") from None
    return Manifest(data)
