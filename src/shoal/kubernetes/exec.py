"""Exec sessions into Pods (``shoal job exec``, the dashboard's terminal) through ``pods/exec``.

The server side is the same as for shoal's own agents (docs/terminal.md): the agent opens
``WS /api/v1/agent/exec/{session}`` and waits for ``attached``. Here the command then runs in the
task's container through the Kubernetes API's exec WebSocket, and frames are relayed both ways:
stdin, ``resize`` (channel 4) and ``eof`` in; stdout, stderr and the exit status out. Closing
either side closes the other, and Kubernetes ends the command with its stream.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Any

from shoal.agent.exec_relay import REFUSED, connect
from shoal.agent.identity import Connection
from shoal.kubernetes.options import TASK_CONTAINER
from shoal.protocol import (
    EXEC_ATTACH_S,
    EXEC_MARKER,
    EXEC_STDERR,
    EXEC_STDIN,
    EXEC_STDOUT,
    ExecOrder,
    exec_control,
    exec_data,
    exec_path,
    read_control,
)

log = logging.getLogger("shoal.kubernetes")
POLL_S = 0.05
STDOUT_CHANNEL, STDERR_CHANNEL, RESIZE_CHANNEL = 1, 2, 4


class PodExec:
    """One session: ``pod_of(attempt_id)`` names the attempt's Pod (None: it has none)."""

    def __init__(
        self, order: ExecOrder, core: Any, namespace: str, pod: str | None, connection: Connection
    ) -> None:
        self.order, self.core, self.namespace, self.pod = order, core, namespace, pod
        self.connection = connection
        self.closed = threading.Event()

    def run(self) -> None:
        try:
            ws = connect(self.connection, exec_path(self.order.session_id))
        except Exception as exc:
            log.warning("exec session %s: cannot reach the server: %s", self.order.session_id, exc)
            return
        try:
            first = ws.recv(timeout=EXEC_ATTACH_S)
            control = read_control(first) if isinstance(first, str) else None
            if control is None or control["type"] != "attached":
                return
            if self.pod is None:
                message = f"task {self.order.attempt_id} has no running Pod here"
                ws.send(exec_control("error", code=REFUSED, message=message))
                return
            try:
                remote = self._open()
            except Exception as exc:
                message = f"Kubernetes refused the exec into Pod {self.pod}: {exc}"
                ws.send(exec_control("error", code=REFUSED, message=message))
                return
            self._relay(ws, remote)
        finally:
            self.closed.set()
            with contextlib.suppress(Exception):
                ws.close()

    def _open(self) -> Any:
        from kubernetes.stream import stream

        marked = ["env", f"{EXEC_MARKER}={self.order.session_id}", *self.order.argv]
        remote = stream(
            self.core.connect_get_namespaced_pod_exec,
            self.pod,
            self.namespace,
            container=TASK_CONTAINER,
            command=marked,
            stdin=True,
            stdout=True,
            stderr=not self.order.tty,
            tty=self.order.tty,
            _preload_content=False,
            binary=True,
        )
        if self.order.tty:
            self._resize(remote, self.order.cols, self.order.rows)
        return remote

    @staticmethod
    def _resize(remote: Any, cols: int, rows: int) -> None:
        remote.write_channel(RESIZE_CHANNEL, json.dumps({"Width": cols, "Height": rows}))

    def _relay(self, ws: Any, remote: Any) -> None:
        inbound = threading.Thread(target=self._pump_in, args=(ws, remote), daemon=True)
        inbound.start()
        try:
            while remote.is_open() and not self.closed.is_set():
                remote.update(timeout=POLL_S)
                for channel, ours in ((STDOUT_CHANNEL, EXEC_STDOUT), (STDERR_CHANNEL, EXEC_STDERR)):
                    data = remote.read_channel(channel)
                    if data:
                        ws.send(exec_data(ours, data if isinstance(data, bytes) else data.encode()))
            for channel, ours in ((STDOUT_CHANNEL, EXEC_STDOUT), (STDERR_CHANNEL, EXEC_STDERR)):
                data = remote.read_channel(channel)
                if data:
                    ws.send(exec_data(ours, data if isinstance(data, bytes) else data.encode()))
            if not self.closed.is_set():
                code = remote.returncode
                ws.send(exec_control("exit", code=code if code is not None else 0, signal=None))
        except Exception as exc:
            log.debug("exec session %s ended: %s", self.order.session_id, exc)
        finally:
            self.closed.set()
            with contextlib.suppress(Exception):
                remote.close()
            inbound.join(timeout=5)

    def _pump_in(self, ws: Any, remote: Any) -> None:
        try:
            for message in ws:
                if isinstance(message, bytes):
                    if message[:1] == bytes((EXEC_STDIN,)):
                        remote.write_stdin(message[1:])
                    continue
                control = read_control(message)
                if control is None:
                    continue
                if control["type"] == "resize" and self.order.tty:
                    cols, rows = control.get("cols"), control.get("rows")
                    if isinstance(cols, int) and isinstance(rows, int):
                        self._resize(remote, min(max(cols, 1), 1000), min(max(rows, 1), 1000))
                elif control["type"] == "eof":
                    if self.order.tty:
                        remote.write_stdin(b"\x04")
                    else:
                        remote.close_channel(0)
        except Exception as exc:
            log.debug("exec session %s input ended: %s", self.order.session_id, exc)
        finally:
            self.closed.set()
