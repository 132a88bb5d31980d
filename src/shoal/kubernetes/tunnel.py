"""Tunnels to a Pod's port (`shoal job port-forward`, `shoal job ssh`, the task proxy) through
``pods/portforward``: the server side is the same as for shoal's own agents (docs/proxy.md). The
agent opens ``WS /api/v1/agent/tunnel/{session}``, waits for ``attached``, checks the port is one
of the task's (its ``SHOAL_PORTS_*`` variables), opens the Kubernetes API's port-forward stream to
it and relays bytes both ways; the user's ``eof`` half-closes the Pod's side."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Any

from shoal.agent.exec_relay import connect
from shoal.agent.identity import Connection
from shoal.agent.tunnel_relay import NOT_A_TASK_PORT, NOT_LISTENING, NOT_RUNNING, READ_SIZE
from shoal.protocol import EXEC_ATTACH_S, TunnelOrder, exec_control, tunnel_control, tunnel_path

log = logging.getLogger("shoal.kubernetes")


class PodTunnel:
    """One tunnel; ``pod``: the attempt's Pod object (None: it has none here)."""

    def __init__(
        self, order: TunnelOrder, core: Any, namespace: str, pod: Any | None, connection: Connection
    ) -> None:
        self.order, self.core, self.namespace, self.pod = order, core, namespace, pod
        self.connection = connection

    def run(self) -> None:
        try:
            ws = connect(self.connection, tunnel_path(self.order.session_id))
        except Exception as exc:
            log.warning("tunnel %s: cannot reach the server: %s", self.order.session_id, exc)
            return
        forward: Any = None
        try:
            first = ws.recv(timeout=EXEC_ATTACH_S)
            control = tunnel_control(first) if isinstance(first, str) else None
            if control is None or control["type"] != "attached":
                return
            refusal = self._refusal()
            if refusal is not None:
                ws.send(exec_control("error", code=refusal[0], message=refusal[1]))
                return
            try:
                forward = self._open()
            except Exception as exc:
                message = f"Kubernetes refused the port-forward to Pod {self._name()}: {exc}"
                ws.send(exec_control("error", code=NOT_LISTENING, message=message))
                return
            ws.send(exec_control("connected"))
            self._relay(ws, forward.socket(self.order.port))
        finally:
            if forward is not None:
                with contextlib.suppress(Exception):
                    forward.close()
            with contextlib.suppress(Exception):
                ws.close()

    def _name(self) -> str:
        return str(self.pod.metadata.name) if self.pod is not None else "?"

    def _refusal(self) -> tuple[str, str] | None:
        if self.pod is None:
            return NOT_RUNNING, f"task {self.order.attempt_id} has no running Pod here"
        own = pod_ports(self.pod)
        if self.order.port not in own:
            listed = ", ".join(map(str, sorted(own))) or "it has none"
            return NOT_A_TASK_PORT, f"port {self.order.port} is not one of the task's ({listed})"
        return None

    def _open(self) -> Any:
        from kubernetes.stream import portforward

        return portforward(
            self.core.connect_get_namespaced_pod_portforward,
            self._name(),
            self.namespace,
            ports=str(self.order.port),
        )

    def _relay(self, ws: Any, sock: Any) -> None:
        def inbound() -> None:
            try:
                for message in ws:
                    if isinstance(message, bytes):
                        sock.sendall(message)
                    elif (tunnel_control(message) or {}).get("type") == "eof":
                        sock.shutdown(socket.SHUT_WR)
            except Exception as exc:
                log.debug("tunnel %s inbound ended: %s", self.order.session_id, exc)
            finally:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        thread = threading.Thread(target=inbound, daemon=True)
        thread.start()
        try:
            while data := sock.recv(READ_SIZE):
                ws.send(data)
        except Exception as exc:
            log.debug("tunnel %s outbound ended: %s", self.order.session_id, exc)
        finally:
            with contextlib.suppress(Exception):
                ws.close(1000, "the Pod's side closed")
            thread.join(timeout=5)


def pod_ports(pod: Any) -> set[int]:
    """The task's ports, from its container's ``SHOAL_PORTS_<label>`` variables."""
    found: set[int] = set()
    for container in pod.spec.containers or []:
        for variable in container.env or []:
            if variable.name.startswith("SHOAL_PORTS_") and variable.value:
                found |= {int(p) for p in variable.value.split(",") if p.strip().isdigit()}
    return found
