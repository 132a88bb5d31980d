"""Task logs from ``pods/log`` to the server, so they outlive their Pods.

One thread per started Pod follows its task container's log and uploads it in offset-checked
chunks (the server keeps each byte once: a chunk it already has is skipped). A follow that breaks
(the API server restarted) reads the log again from the start and skips what was sent. Kubernetes
serves one stream per container, so a task's stdout and stderr arrive together, as its stdout.
A follower is done when its Pod has ended and the log is read to its end, or the Pod is gone.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from shoal.kubernetes.options import TASK_CONTAINER
from shoal.protocol import LogUpload, LogUploadRequest

log = logging.getLogger("shoal.kubernetes")
CHUNK = 1 << 16
RETRY_S = 1.0
MAX_RETRY_S = 30.0


class Follower:
    def __init__(
        self,
        core: Any,
        namespace: str,
        name: str,
        attempt_id: str,
        upload: Callable[[LogUploadRequest], Any],
        ended: Callable[[], bool],
        stopping: threading.Event,
    ) -> None:
        self.core, self.namespace, self.name = core, namespace, name
        self.attempt_id = attempt_id
        self.upload = upload
        self.ended = ended  # has the Pod finished (or gone)?
        self.stopping = stopping
        self.done = threading.Event()
        self._abandoned = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name=f"shoal-log-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def abandon(self) -> None:
        """The Pod is about to be deleted (its exit is reported): ship nothing more. When the
        kubelet loses a log it is streaming, it writes its error into the stream's body (the
        status, 200, was sent); that text is not the task's."""
        self._abandoned.set()

    def _run(self) -> None:
        retry = RETRY_S
        try:
            while not self.stopping.is_set() and not self._abandoned.is_set():
                try:
                    self._follow()
                    retry = RETRY_S
                except Exception as exc:
                    if getattr(exc, "status", None) == 404:
                        return  # the Pod is gone: what was sent is all there is
                    log.debug("log of %s: %s", self.name, exc)
                if self._abandoned.is_set() or (self.ended() and self._read_rest()):
                    return
                self.stopping.wait(retry)
                retry = min(retry * 2, MAX_RETRY_S)
        finally:
            self.done.set()

    def _stream(self, follow: bool) -> Any:
        return self.core.read_namespaced_pod_log(
            self.name,
            self.namespace,
            container=TASK_CONTAINER,
            follow=follow,
            _preload_content=False,
        )

    def _follow(self) -> None:
        response = self._stream(follow=True)
        try:
            self._ship(response)
        finally:
            response.release_conn()

    def _read_rest(self) -> bool:
        """Once the Pod has ended: read the log whole, ship what is new. False: try again."""
        try:
            response = self._stream(follow=False)
        except Exception as exc:
            return getattr(exc, "status", None) in (400, 404)  # gone, or never started
        try:
            self._ship(response)
        finally:
            response.release_conn()
        return True

    def _ship(self, response: Any) -> None:
        """Upload what the stream holds past ``sent`` (it starts from the log's beginning)."""
        position = 0
        for data in response.stream(CHUNK):
            if self._abandoned.is_set():
                return
            if not data:
                continue
            end = position + len(data)
            if end > self.sent:
                new = data[max(self.sent - position, 0) :]
                chunk = LogUpload(
                    attempt_id=self.attempt_id,
                    stream="stdout",
                    offset=self.sent,
                    data=base64.b64encode(new).decode(),
                    at=time.time(),
                )
                self.upload(LogUploadRequest(chunks=[chunk]))
                self.sent = end
            position = end
