"""The Kubernetes agent's log follower (kubernetes/logs.py) against a stream shaped like the
kubelet's: once the agent has reported the task's exit and is about to delete the Pod, nothing
more is shipped. The kubelet, losing a log it streams (the Pod's directory removed), writes its
error into the body of a response whose 200 was already sent; that text is not the task's."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from typing import Any

from shoal.kubernetes.logs import Follower
from shoal.protocol import LogUploadRequest

KUBELET_ERROR = (
    b'solving symlinks in path "/var/log/pods/shoal_x/task/0.log": lstat /var/log/pods/'
    b"shoal_x: no such file or directory"
)


class KubeletStream:
    """The task's output, then, once the Pod is being deleted, the kubelet's error."""

    def __init__(self, deleting: threading.Event) -> None:
        self.deleting = deleting

    def stream(self, size: int) -> Iterator[bytes]:
        yield b"reached 2 peers\n"
        assert self.deleting.wait(10)
        yield KUBELET_ERROR

    def release_conn(self) -> None:
        pass


class Core:
    def __init__(self, deleting: threading.Event) -> None:
        self.deleting = deleting

    def read_namespaced_pod_log(self, *args: Any, **kwargs: Any) -> KubeletStream:
        return KubeletStream(self.deleting)


def test_nothing_is_shipped_once_the_pod_is_being_deleted() -> None:
    deleting, stopping = threading.Event(), threading.Event()
    shipped: list[bytes] = []
    first = threading.Event()

    def upload(request: LogUploadRequest) -> None:
        shipped.extend(base64.b64decode(c.data) for c in request.chunks)
        first.set()

    follower = Follower(Core(deleting), "shoal", "pod-0", "a1", upload, lambda: True, stopping)
    follower.start()
    try:
        assert first.wait(10)
        follower.abandon()  # the exit was acknowledged: the agent deletes the Pod next
        deleting.set()
        assert follower.done.wait(10)
    finally:
        stopping.set()
    assert b"".join(shipped) == b"reached 2 peers\n"
