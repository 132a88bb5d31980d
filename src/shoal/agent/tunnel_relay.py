"""Tunnels on the agent's side (docs/proxy.md): a TCP connection to a running task's port,
relayed over a WebSocket the agent opens to its server.

The order comes with the long poll (``OrdersResponse.tunnels``). For each, a thread of its own:

1. opens ``WS /api/v1/agent/tunnel/{session}`` with the agent's credentials and waits for the
   server's ``attached``;
2. checks the attempt runs here and the port is one of the task's own (a task shares the node's
   network with others: any other port could be another user's task or a node service);
3. when tasks run as their own users, checks that whoever listens on the port is the task's
   user (not another user's process that took the port first);
4. connects to the port on loopback, then on the task's address, and says ``connected`` (or an
   ``error`` naming why, e.g. nothing listens there yet);
5. relays bytes both ways until either side closes: the task's side half-closing ends the
   WebSocket once what it wrote is sent; the WebSocket closing closes the connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import TYPE_CHECKING

from shoal.agent.exec_relay import connect
from shoal.agent.identity import Connection
from shoal.agent.runtimes import LaunchRefused
from shoal.protocol import (
    EXEC_ATTACH_S,
    LaunchOrder,
    TunnelOrder,
    exec_control,
    tunnel_control,
    tunnel_path,
)

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from shoal.agent.runner import Runner

log = logging.getLogger("shoal.agent")
CONNECT_S = 5.0
READ_SIZE = 1 << 16
NOT_RUNNING = "TaskNotRunningError"
NOT_A_TASK_PORT = "NotATaskPortError"
NOT_LISTENING = "PortNotListeningError"
NOT_THE_TASKS = "PortNotTheTasksError"


class TunnelRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class TunnelRelays:
    """The agent's tunnels, one thread each (two while relaying)."""

    def __init__(self, runner: Runner, connection: Connection) -> None:
        self.runner = runner
        self.connection = connection
        self._lock = threading.Lock()
        self._tunnels: dict[str, Tunnel] = {}
        self._closed = False

    def start(self, order: TunnelOrder) -> None:
        with self._lock:
            if self._closed or order.session_id in self._tunnels:
                return
            tunnel = Tunnel(order, self.runner, self.connection)
            self._tunnels[order.session_id] = tunnel
        name = f"tunnel-{order.session_id[:8]}"
        threading.Thread(target=self._run, args=(tunnel,), name=name, daemon=True).start()

    def _run(self, tunnel: Tunnel) -> None:
        try:
            tunnel.run()
        except Exception:  # a tunnel's failure never reaches the agent's other threads
            log.exception("tunnel %s failed", tunnel.order.session_id)
        finally:
            with self._lock:
                self._tunnels.pop(tunnel.order.session_id, None)

    def stop_all(self) -> None:
        """End every tunnel (the agent's shutdown)."""
        with self._lock:
            self._closed = True
            tunnels = list(self._tunnels.values())
        for tunnel in tunnels:
            tunnel.end()


class Tunnel:
    def __init__(self, order: TunnelOrder, runner: Runner, connection: Connection) -> None:
        self.order = order
        self.runner = runner
        self.connection = connection
        self._ws: ClientConnection | None = None
        self._sock: socket.socket | None = None

    def end(self) -> None:
        for close in (self._close_ws, self._close_sock):
            with contextlib.suppress(Exception):
                close()

    def _close_ws(self) -> None:
        if self._ws is not None:
            self._ws.close(1001, "the agent is stopping")

    def _close_sock(self) -> None:
        if self._sock is not None:
            self._sock.close()

    def run(self) -> None:
        session = self.order.session_id
        try:
            ws = connect(self.connection, tunnel_path(session))
        except Exception as exc:
            log.warning("tunnel %s: cannot reach the server: %s", session, exc)
            return
        self._ws = ws
        with contextlib.suppress(OSError):  # small writes both ways: no Nagle wait
            ws.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if not _attached(ws, session):
                return
            try:
                self._sock = self._connect()
            except TunnelRefused as exc:
                ws.send(exec_control("error", code=exc.code, message=str(exc)))
                return
            ws.send(exec_control("connected"))
            outbound = threading.Thread(target=self._task_to_ws, args=(ws,), daemon=True)
            outbound.start()
            self._ws_to_task(ws)
            outbound.join(timeout=5)
        finally:
            self.end()

    def _connect(self) -> socket.socket:
        order = self.runner.running_order(self.order.attempt_id)
        if order is None:
            raise TunnelRefused(
                NOT_RUNNING, f"task attempt {self.order.attempt_id} is not running on this agent"
            )
        own = sorted({port for ports in order.ports.values() for port in ports})
        if self.order.port not in own:
            raise TunnelRefused(
                NOT_A_TASK_PORT,
                f"port {self.order.port} is not one of the task's ports ({_listed(own)})",
            )
        self._check_listener(order)
        problems: list[str] = []
        for host in dict.fromkeys(("127.0.0.1", order.env.get("SHOAL_HOST_IP", "127.0.0.1"))):
            try:
                sock = socket.create_connection((host, self.order.port), timeout=CONNECT_S)
            except OSError as exc:
                problems.append(f"{host}: {exc.strerror or exc}")
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        raise TunnelRefused(
            NOT_LISTENING,
            f"nothing accepts connections on port {self.order.port} of task "
            f"{order.role}/{order.index} ({'; '.join(problems)}): is its program listening "
            "there yet?",
        )

    def _check_listener(self, order: LaunchOrder) -> None:
        """Tasks share the node's network: a port the task does not listen on yet could be
        taken by another user's process, which would then get the user's requests (and the
        task's proxy token). When tasks run as their own users, whoever listens on the port
        must be the task's user."""
        try:
            user = self.runner.users.for_order(order)
        except LaunchRefused:
            return
        if user is None:  # tasks run as the agent's own user: no uid tells them apart
            return
        holders = listener_uids(self.order.port)
        if holders and user.uid not in holders:
            raise TunnelRefused(
                NOT_THE_TASKS,
                f"port {self.order.port} of task {order.role}/{order.index} is held by another "
                f"user's process (uid {', '.join(map(str, sorted(holders)))}), not by the task "
                f"(uid {user.uid}): nothing is forwarded to it",
            )

    def _ws_to_task(self, ws: ClientConnection) -> None:
        """WebSocket -> task, until the WebSocket closes; then the task's side is closed."""
        assert self._sock is not None
        try:
            for message in ws:
                if isinstance(message, bytes):
                    self._sock.sendall(message)
                elif (tunnel_control(message) or {}).get("type") == "eof":
                    self._sock.shutdown(socket.SHUT_WR)  # the user's side is done writing
        except Exception as exc:  # the WebSocket or the connection ended
            log.debug("tunnel %s inbound ended: %s", self.order.session_id, exc)
        finally:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def _task_to_ws(self, ws: ClientConnection) -> None:
        """Task -> WebSocket, until the task's side closes; then the WebSocket is closed."""
        assert self._sock is not None
        try:
            while data := self._sock.recv(READ_SIZE):
                ws.send(data)
        except Exception as exc:
            log.debug("tunnel %s outbound ended: %s", self.order.session_id, exc)
        finally:
            with contextlib.suppress(Exception):
                ws.close(1000, "the task's side closed")


def listener_uids(port: int) -> set[int]:
    """The uids of the sockets listening on TCP ``port`` in this network namespace (from
    /proc/net/tcp and tcp6: local address, state 0A = LISTEN, uid)."""
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 7
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                found.add(int(fields[7]))
    return found


def _attached(ws: ClientConnection, session: str) -> bool:
    try:
        first = ws.recv(timeout=EXEC_ATTACH_S)
    except Exception as exc:
        log.warning("tunnel %s: no answer from the server: %s", session, exc)
        return False
    control = tunnel_control(first) if isinstance(first, str) else None
    if control is not None and control["type"] == "attached":
        return True
    log.warning("tunnel %s refused by the server: %s", session, first)
    return False


def _listed(ports: list[int]) -> str:
    return ", ".join(map(str, ports)) if ports else "it has none"
