"""List-then-watch caches of Kubernetes objects, in a thread each (the informer pattern).

A cache lists its objects once (taking the list's ``resourceVersion``), then watches from there;
each event updates the cache and calls ``on_change(kind, old, new)``. A watch that ends is
resumed from the last version seen (bookmarks keep it fresh); one answered ``410 Gone`` (the
version was compacted away) lists again, and what changed meanwhile, including objects deleted
while nobody watched, is delivered as events. Errors (an API server restarting) are retried with
a doubling backoff, 0.2 s up to 10 s. Nothing is missed: every object's last state reaches
``on_change`` exactly as the API server last served it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("shoal.kubernetes")
WATCH_TIMEOUT_S = 60  # the server ends each watch after this long; it is resumed at once
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 10.0
Change = Callable[[str, Any, Any], None]  # ("ADDED" | "MODIFIED" | "DELETED", old, new)


def _key(obj: Any) -> str:
    meta = obj.metadata
    return f"{meta.namespace or ''}/{meta.name}"


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class Cache:
    """``lister(**kwargs)`` is a ``list_*`` method of the client (it also serves the watch)."""

    def __init__(
        self,
        name: str,
        lister: Callable[..., Any],
        on_change: Change,
        stopping: threading.Event,
        **selectors: Any,
    ) -> None:
        self.name = name
        self.lister = lister
        self.on_change = on_change
        self.stopping = stopping
        self.selectors = {k: v for k, v in selectors.items() if v}
        self.synced = threading.Event()  # the first list is in
        self.relists = 0  # lists after the first (410 Gone, errors): tests read it
        self._objects: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._version = ""
        self._thread = threading.Thread(target=self._run, name=f"shoal-k8s-{name}", daemon=True)
        self._watch: Any = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        watch = self._watch
        if watch is not None:
            watch.stop()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def items(self) -> list[Any]:
        with self._lock:
            return list(self._objects.values())

    def get(self, namespace: str, name: str) -> Any | None:
        with self._lock:
            return self._objects.get(f"{namespace}/{name}")

    # ---- the loop ----

    def _run(self) -> None:
        backoff = FIRST_BACKOFF_S
        listed = False
        while not self.stopping.is_set():
            try:
                if not listed:
                    self._list()
                    listed = True
                self._watch_once()
                backoff = FIRST_BACKOFF_S
            except Expired:
                log.info("%s: watch expired (410 Gone): listing again", self.name)
                listed = False
                self.relists += 1
            except Exception as exc:  # the API server is away, or a network error
                if self.stopping.is_set():
                    return
                if _status(exc) == 410:  # the client's own word for Expired
                    log.info("%s: watch expired (410 Gone): listing again", self.name)
                    listed = False
                    self.relists += 1
                    continue
                log.warning("%s: %s; retrying in %.1fs", self.name, _said(exc), backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _list(self) -> None:
        answer = self.lister(**self.selectors)
        fresh = {_key(obj): obj for obj in answer.items}
        with self._lock:
            before = self._objects
            self._objects = dict(fresh)
            self._version = answer.metadata.resource_version or ""
        for key, obj in before.items():  # deleted while nobody watched
            if key not in fresh:
                self.on_change("DELETED", obj, obj)
        for key, obj in fresh.items():
            old = before.get(key)
            if old is None:
                self.on_change("ADDED", None, obj)
            elif old.metadata.resource_version != obj.metadata.resource_version:
                self.on_change("MODIFIED", old, obj)
        self.synced.set()

    def _watch_once(self) -> None:
        from kubernetes import watch

        self._watch = watch.Watch()
        stream = self._watch.stream(
            self.lister,
            resource_version=self._version,
            timeout_seconds=WATCH_TIMEOUT_S,
            allow_watch_bookmarks=True,
            **self.selectors,
        )
        for event in stream:
            if self.stopping.is_set():
                self._watch.stop()
                return
            kind, obj = event["type"], event["object"]
            if kind == "ERROR":
                raw = event.get("raw_object") or {}
                if raw.get("code") == 410:
                    raise Expired()
                raise RuntimeError(f"watch error: {raw.get('message') or raw}")
            if kind == "BOOKMARK":  # the client leaves a bookmark's object a plain dict
                meta = obj.get("metadata", {}) if isinstance(obj, dict) else obj.metadata
                version = meta.get("resourceVersion") if isinstance(meta, dict) else None
                self._version = version or getattr(meta, "resource_version", None) or self._version
                continue
            version = obj.metadata.resource_version
            key = _key(obj)
            with self._lock:
                old = self._objects.get(key)
                if kind == "DELETED":
                    self._objects.pop(key, None)
                else:
                    self._objects[key] = obj
                self._version = version or self._version
            self.on_change(kind, old, obj)


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _said(exc: Exception) -> str:
    status = _status(exc)
    reason = getattr(exc, "reason", None)
    if status is not None:
        return f"the API server answered {status} {reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"
