"""The node's cache of code archives and data sets, by sha256, under ``<agent home>/cache``.

Before a task starts, the agent makes sure its code archive and every data set it declares are
here, downloading only what is missing (streamed to a temporary file, its sha256 checked, then
renamed into place: a cut-short download is never used). A second task with the same code or
data downloads nothing. Each attempt gets its own copy of the code (it may change it) and, under
``$SHOAL_DATA_DIR``, a symbolic link per data set into the cache (read-only: shared by tasks).

- ``code/<sha256>.tar.gz``: code archives (in the agent's private home);
- ``<data root>/<sha256>``: a data set file, or a directory unpacked from its tar (readable by
  tasks, writable by the agent alone: shoal.agent.workspace);
- ``seals/<sha256>.json``: what each data set was when last hashed (private);
- ``tmp/``: downloads and unpacks under way (emptied when the agent starts).

Each entry is checked again each time it is bound into a task, not only when it was filled: a
code archive is hashed against its sha256 before it is unpacked; a data set's files are compared
with the fingerprints (inode, size, mtime, ctime: no one but root can set a ctime) recorded when it
was last hashed, and hashed again if any differs. An entry whose bytes changed is removed and
fetched again, so a task never gets altered code or data.

Nothing is evicted yet: remove the directory to reclaim space while no task runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from shoal import archives
from shoal.agent import cache_integrity as integrity
from shoal.protocol import DataMount, LaunchOrder, code_path, data_path

log = logging.getLogger("shoal.agent")
# (server path, sink): stream the body at ``path`` into ``sink``; raise on any failure
Download = Callable[[str, Callable[[bytes], None]], None]
DATA_DIR = "data"  # under the attempt's .shoal directory: $SHOAL_DATA_DIR


class FetchError(Exception):
    """Something a task needs could not be brought to the node; the message names it."""


class NodeCache:
    def __init__(self, root: Path, download: Download, data_root: Path | None = None) -> None:
        self.root = root
        self.data_root = data_root or root / "data"
        self.download = download
        self.downloads = 0  # blobs downloaded by this process (the tests read the log)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        shutil.rmtree(root / "tmp", ignore_errors=True)
        shutil.rmtree(self.data_root / ".tmp", ignore_errors=True)

    def _lock(self, sha256: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(sha256, threading.Lock())

    # ---- what a launch needs ----

    def unpack_code(self, order: LaunchOrder, target: Path) -> None:
        """Unpack the attempt's code archive into ``target`` (fetched unless cached)."""
        try:
            if order.code_hash is None:  # a job stored before code was content-addressed
                archive = self._fetch(f"/api/v1/agent/code/{order.job_id}", None, "code")
                try:
                    archives.extract(archive, target)
                finally:
                    archive.unlink(missing_ok=True)
                return
            archives.extract(self._code(order), target)
        except (FetchError, archives.ArchiveError, OSError) as exc:
            raise FetchError(f"the code of job {order.job_id} could not be fetched: {exc}") from exc

    def data_dir(self, order: LaunchOrder, workdir: Path) -> Path:
        """``$SHOAL_DATA_DIR`` of the attempt: a link per declared data set into the cache."""
        target = workdir / ".shoal" / DATA_DIR
        target.mkdir(parents=True, exist_ok=True)
        for mount in order.data:
            try:
                cached = self._data(order.attempt_id, mount)
            except (FetchError, archives.ArchiveError, OSError) as exc:
                raise FetchError(f"data set {mount.ref!r} could not be fetched: {exc}") from exc
            link = target / mount.ref
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(cached)
        return target

    # ---- the cache ----

    def _code(self, order: LaunchOrder) -> Path:
        assert order.code_hash is not None
        final = self.root / "code" / f"{order.code_hash}.tar.gz"
        with self._lock(order.code_hash):
            if final.is_file() and archives.file_sha256(final) != order.code_hash:
                log.error("cached code %s was altered on this node: fetched again", final.name)
                final.unlink()
            if not final.is_file():
                fetched = self._fetch(code_path(order.attempt_id), order.code_hash, "code")
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(fetched, final)
        return final

    def _data(self, attempt_id: str, mount: DataMount) -> Path:
        final = self.data_root / mount.sha256
        seal = self.root / "seals" / f"{mount.sha256}.json"
        with self._lock(mount.sha256):
            if final.exists() or final.is_symlink():
                if integrity.intact(final, seal, mount.sha256 if mount.kind == "file" else None):
                    return final
                log.error("cached data set %s was altered on this node: fetched again", final.name)
                integrity.discard(final, seal)
            self._fill_data(attempt_id, mount, final)
            integrity.seal(final, seal)
        return final

    def _fill_data(self, attempt_id: str, mount: DataMount, final: Path) -> None:
        """Fetch a data set into ``final``: readable by every task, writable by the agent only.
        Fetched beside it (same filesystem, so the last step is a rename)."""
        tmp = self.data_root / ".tmp"
        fetched = fetch(tmp, self.download, data_path(attempt_id, mount.sha256), mount.sha256,
                        "data set")  # fmt: skip
        self.downloads += 1
        if mount.kind == "dir":
            unpacked = Path(tempfile.mkdtemp(dir=tmp, prefix="unpack-"))
            try:
                archives.extract(fetched, unpacked)
                _read_only(unpacked)
                os.replace(unpacked, final)
            finally:
                fetched.unlink(missing_ok=True)
                shutil.rmtree(unpacked, ignore_errors=True)
        else:
            os.chmod(fetched, 0o444)
            os.replace(fetched, final)

    def _fetch(self, path: str, sha256: str | None, what: str) -> Path:
        fetched = fetch(self.root / "tmp", self.download, path, sha256, what)
        self.downloads += 1
        return fetched


def fetch(tmp: Path, download: Download, path: str, sha256: str | None, what: str) -> Path:
    """Download ``path`` to a temporary file under ``tmp`` and check its sha256 (if known);
    returns the file (the caller moves or removes it). A failed or cut-short download leaves
    nothing behind and raises ``FetchError``."""
    tmp.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=tmp, prefix="fetch-")
    digest = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb") as handle:

            def sink(chunk: bytes) -> None:
                nonlocal size
                digest.update(chunk)
                handle.write(chunk)
                size += len(chunk)

            download(path, sink)
    except Exception as exc:
        Path(name).unlink(missing_ok=True)
        raise FetchError(str(exc) or type(exc).__name__) from exc
    if sha256 is not None and digest.hexdigest() != sha256:
        Path(name).unlink(missing_ok=True)
        raise FetchError(f"the download's sha256 is {digest.hexdigest()}, not {sha256}")
    log.info("fetched %s %s (%d bytes)", what, sha256, size)
    return Path(name)


def _read_only(root: Path) -> None:
    """Make a cached directory tree readable by every task and writable by none: its files
    lose their write bits and may be read by all, its directories may be read and passed by
    all (and stay writable by the agent's user, so it can be removed)."""
    for directory, _dirs, files in os.walk(root):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o755)
        for name in files:
            path = Path(directory) / name
            if not path.is_symlink():
                with contextlib.suppress(OSError):
                    mode = stat.S_IMODE(path.lstat().st_mode)
                    readable = mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
                    path.chmod(readable & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
