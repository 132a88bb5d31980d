"""Is a cached data set still the one that was fetched? (shoal.agent.cache)

When a data set enters the cache, its seal records its content digest (a file's sha256; for an
unpacked directory, a digest over every entry's path, kind, mode and content) and each entry's
fingerprint (inode, size, mtime and ctime in nanoseconds). Bound into a task, the entry's
fingerprints are compared with the seal: a write, a rename, a chmod or a replaced file changes a
ctime, which only root can set. Any difference and the content is hashed again; the entry is
intact only if the digest still matches (a file's: also its sha256 as the job pinned it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

from shoal.archives import file_sha256


def _entries(root: Path) -> list[tuple[str, os.stat_result]]:
    """(path relative to ``root``, lstat) of ``root`` and everything below it, sorted."""
    found = [("", root.lstat())]
    if stat.S_ISDIR(found[0][1].st_mode):
        for where, dirs, files in os.walk(root):
            for name in [*dirs, *files]:
                path = os.path.join(where, name)
                found.append((os.path.relpath(path, root), os.lstat(path)))
    return sorted(found, key=lambda entry: entry[0])


def fingerprint(root: Path) -> str:
    lines = [
        f"{rel}\0{s.st_ino}\0{s.st_size}\0{s.st_mtime_ns}\0{s.st_ctime_ns}\0{s.st_mode}"
        for rel, s in _entries(root)
    ]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def content_digest(root: Path) -> str:
    """A file's sha256; a directory's digest over its entries' paths, kinds, modes and bytes."""
    if not root.is_dir() or root.is_symlink():
        return file_sha256(root)
    digest = hashlib.sha256()
    for rel, s in _entries(root):
        path = root / rel
        if stat.S_ISREG(s.st_mode):
            body = file_sha256(path)
        elif stat.S_ISLNK(s.st_mode):
            body = os.readlink(path)
        else:
            body = ""
        digest.update(
            f"{rel}\0{stat.S_IFMT(s.st_mode)}\0{stat.S_IMODE(s.st_mode)}\0{body}\n".encode()
        )
    return digest.hexdigest()


def seal(root: Path, seal_file: Path) -> None:
    """Record what ``root`` is now (it was just filled and checked)."""
    seal_file.parent.mkdir(parents=True, exist_ok=True)
    record = {"digest": content_digest(root), "fingerprint": fingerprint(root)}
    temporary = seal_file.with_suffix(".tmp")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, seal_file)


def intact(root: Path, seal_file: Path, sha256: str | None) -> bool:
    """Whether ``root`` still holds what its seal recorded (``sha256``: a file's pinned hash)."""
    try:
        record = json.loads(seal_file.read_text())
        if fingerprint(root) == record["fingerprint"]:
            return True
        digest = content_digest(root)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if digest != record["digest"] or (sha256 is not None and digest != sha256):
        return False
    seal(root, seal_file)  # the same bytes (touched, copied back): remember its new state
    return True


def discard(root: Path, seal_file: Path) -> None:
    if root.is_dir() and not root.is_symlink():
        shutil.rmtree(root, ignore_errors=True)
    else:
        root.unlink(missing_ok=True)
    seal_file.unlink(missing_ok=True)
