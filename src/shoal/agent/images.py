"""The node's container images: pushed images loaded into podman on first use, and evicted.

``ImageStore.ensure(order)`` gives the image ID a container task runs. When podman has that
image already it is used as it is; otherwise the pushed archive is downloaded from the server
(``image_blob_path``: streamed to a temporary file and its sha256 checked, as code and data are,
``cache.fetch``), loaded with ``podman load -i``, and the ID podman now has checked against the
one the server read from the archive. Two tasks of one image wait for one load (a lock per
image).

Space: images shoal loaded are recorded in ``<agent home>/images/index.json`` (ID, name, size,
last use). Past ``limit_bytes`` (20 GiB unless the agent says otherwise) the least recently used
of them are removed (``podman rmi``), never one a container was made from (running or not, as
``podman ps --all --filter ancestor`` sees it) nor one handed to a task in the last
``PIN_S`` (its container may not exist yet), nor any image shoal did not load. The size counted
is the pushed archive's: close to what podman stores for an uncompressed archive.

podman runs from ``<agent home>/images/tmp`` (conmon leaves an ``oom`` file in its caller's
working directory). This module imports nothing of the server, store, planner, core or spec.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from shoal.agent.cache import Download, FetchError, fetch
from shoal.agent.runtimes.container import podman_problem
from shoal.protocol import ImageRef, LaunchOrder, image_blob_path

log = logging.getLogger("shoal.agent")
DEFAULT_LIMIT_BYTES = 20 << 30
PIN_S = 300.0  # an image handed to a task is not evicted for this long (monotonic seconds)
LOAD_TIMEOUT_S = 3600.0
CALL_TIMEOUT_S = 120.0
TAIL = 500  # characters of podman's stderr quoted in an error


class ImageError(Exception):
    """An image could not be made ready; the message says what failed (podman's own words)."""


class ImageStore:
    def __init__(
        self,
        home: Path,
        download: Download,
        limit_bytes: int = DEFAULT_LIMIT_BYTES,
        podman: str | None = None,
    ) -> None:
        self.root = home / "images"
        self.scratch = self.root / "tmp"  # downloads under way; podman's working directory
        self.index_path = self.root / "index.json"
        self.download = download
        self.limit_bytes = limit_bytes
        self.podman = podman or shutil.which("podman")
        self.loads = 0  # images this process loaded (the tests read it)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._index_lock = threading.Lock()
        self._pinned: dict[str, float] = {}  # image ID -> when it was last handed to a task
        self._problem: str | None = None
        self._checked = False
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(parents=True, exist_ok=True)

    def available(self) -> str | None:
        """None when podman works here; else why not, and what fixes it (asked once)."""
        if not self._checked:
            self._problem, self._checked = podman_problem(self.podman), True
        return self._problem

    def ensure(self, order: LaunchOrder) -> str:
        """The image ID podman should run for ``order``, loaded into podman if need be."""
        image = order.image
        if image is None:
            raise ImageError(f"task {order.role}/{order.index} runs in a container, with no image")
        problem = self.available()
        if problem is not None:
            raise ImageError(problem)
        with self._lock(image.image_id):
            if self._exists(image.image_id):
                self._used(image.image_id)
            else:
                self._fetch_and_load(order.attempt_id, image)
            self._pinned[image.image_id] = time.monotonic()
        self.evict()
        return image.image_id

    # ---- loading ----

    def _lock(self, image_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(image_id, threading.Lock())

    def _fetch_and_load(self, attempt_id: str, image: ImageRef) -> None:
        path = image_blob_path(attempt_id, image.blob_sha256)
        try:
            archive = fetch(self.scratch, self.download, path, image.blob_sha256, "image")
        except FetchError as exc:
            raise ImageError(f"image {image.name} could not be fetched: {exc}") from exc
        try:
            done = self._podman(["load", "--input", str(archive)], LOAD_TIMEOUT_S)
        finally:
            archive.unlink(missing_ok=True)
        if done.returncode != 0:
            raise ImageError(f"podman load of image {image.name} failed: {_tail(done)}")
        if not self._exists(image.image_id):
            said = done.stdout.strip()[-TAIL:] or "nothing"
            raise ImageError(
                f"podman load of image {image.name} did not give image {image.image_id[:12]} "
                f"(it said: {said}): the archive on the server is not that image; push it again"
            )
        self.loads += 1
        log.info("loaded image %s (%s, %d bytes)", image.name, image.image_id[:12], image.size)
        with self._index_lock:
            index = self._read_index()
            index[image.image_id] = {"name": image.name, "size": image.size, "used": time.time()}
            self._write_index(index)

    def _exists(self, image_id: str) -> bool:
        done = self._podman(["image", "exists", image_id], CALL_TIMEOUT_S)
        if done.returncode not in (0, 1):
            raise ImageError(f"podman image exists {image_id[:12]} failed: {_tail(done)}")
        return done.returncode == 0

    def _used(self, image_id: str) -> None:
        with self._index_lock:
            index = self._read_index()
            if image_id in index:  # only images shoal loaded are tracked
                index[image_id]["used"] = time.time()
                self._write_index(index)

    # ---- eviction ----

    def loaded(self) -> dict[str, dict[str, Any]]:
        """The images shoal loaded here: ID -> name, size, last use (epoch seconds)."""
        with self._index_lock:
            return self._read_index()

    def evict(self) -> list[str]:
        """Remove least recently used images shoal loaded until their sizes add up to at most
        ``limit_bytes``; returns the IDs removed."""
        with self._index_lock:
            index = self._read_index()
            total = sum(int(entry["size"]) for entry in index.values())
            removed: list[str] = []
            for image_id, entry in sorted(index.items(), key=lambda item: item[1]["used"]):
                if total <= self.limit_bytes:
                    break
                if self._evict_one(image_id, entry):
                    removed.append(image_id)
                    total -= int(entry["size"])
                    del index[image_id]
            if removed:
                self._write_index(index)
        return removed

    def _evict_one(self, image_id: str, entry: dict[str, Any]) -> bool:
        pinned = self._pinned.get(image_id)
        if pinned is not None and time.monotonic() - pinned < PIN_S:
            return False
        lock = self._lock(image_id)
        if not lock.acquire(blocking=False):  # being loaded or handed out right now
            return False
        try:
            users = self._podman(
                ["ps", "--all", "--filter", f"ancestor={image_id}", "--format", "{{.ID}}"],
                CALL_TIMEOUT_S,
            )
            if users.returncode != 0 or users.stdout.strip():
                return False  # a container was made from it (or podman could not say)
            done = self._podman(["rmi", image_id], CALL_TIMEOUT_S)
            if done.returncode != 0 and self._exists(image_id):
                log.warning("image %s was not evicted: %s", entry.get("name"), _tail(done))
                return False
            log.info("evicted image %s (%s)", entry.get("name"), image_id[:12])
            return True
        finally:
            lock.release()

    # ---- the index and podman ----

    def _read_index(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.index_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning(
                "the image index %s is unreadable (%s): starting it again", self.index_path, exc
            )
            return {}
        return data if isinstance(data, dict) else {}

    def _write_index(self, index: dict[str, dict[str, Any]]) -> None:
        fd, name = tempfile.mkstemp(dir=self.root, prefix=".index-")
        with os.fdopen(fd, "w") as handle:
            json.dump(index, handle, indent=1, sort_keys=True)
        os.replace(name, self.index_path)

    def _podman(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        if self.podman is None:
            raise ImageError(podman_problem(None) or "podman is not installed")
        try:
            return subprocess.run(
                [self.podman, *args],
                cwd=self.scratch,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ImageError(f"podman {args[0]} failed: {exc}") from exc


def _tail(done: subprocess.CompletedProcess[str]) -> str:
    said = (done.stderr or done.stdout or "").strip()
    return said[-TAIL:] or f"exit status {done.returncode}"
