"""List-then-watch caches of Kubernetes objects, in a thread each (the informer pattern).

A cache lists its objects once (taking the list's ``resourceVersion``), then watches from there;
each event updates the cache and calls ``on_change(kind, old, new)``. A watch that ends is
resumed from the last version seen (bookmarks keep it fresh); one answered ``410 Gone`` (the
version was compacted away) lists again, and what changed meanwhile, including objects deleted
while nobody watched, is delivered as events. Errors (an API server restarting) are retried with
a doubling backoff, 0.2 s up to 10 s. Nothing is missed: every object's last state reaches
``on_change`` exactly as the API server last served it, as a ``raw.Obj`` (the JSON, not the
client's models: building those cost most of the agent's CPU).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from shoal.kubernetes import raw

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
        response = self._watch
        if response is not None:  # ends the watch's read in its thread
            with contextlib.suppress(Exception):
                getattr(response, "shutdown", response.close)()

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
        answer = raw.read(self.lister(**self.selectors, _preload_content=False))
        fresh = {_key(obj): obj for obj in answer.items or ()}
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
        from kubernetes.watch.watch import iter_resp_lines

        response = self.lister(
            watch=True,
            resource_version=self._version,
            timeout_seconds=WATCH_TIMEOUT_S,
            allow_watch_bookmarks=True,
            _preload_content=False,
            **self.selectors,
        )
        self._watch = response
        try:
            for line in iter_resp_lines(response):
                if self.stopping.is_set():
                    return
                if line and not line.isspace():
                    self._event(json.loads(line))
        finally:
            self._watch = None
            response.release_conn()

    def _event(self, event: dict[str, Any]) -> None:
        kind, body = event["type"], event["object"]
        if kind == "ERROR":
            if body.get("code") == 410:
                raise Expired()
            raise RuntimeError(f"watch error: {body.get('message') or body}")
        version = (body.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            self._version = version or self._version
            return
        obj = raw.Obj(body)
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
