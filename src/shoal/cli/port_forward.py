"""``shoal job port-forward``: a local port (or stdin/stdout) to a running task's port, through the
server (docs/proxy.md). Each local connection is a tunnel: ``WS /api/v1/jobs/{job}/tunnel``,
then the bytes both ways. Nothing of the task is exposed to the network; the server checks that
the caller may reach the job (its owner or an admin) and that the port is one of the task's.

    shoal job port-forward nb 8888:http          # localhost:8888 -> the task's port "http"
    shoal job port-forward nb :http              # any free local port (printed)
    shoal job port-forward nb --stdio ssh        # an SSH ProxyCommand
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

import typer

from shoal.cli.common import fail

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from shoal.client import Endpoint

READ_SIZE = 1 << 16
REFUSED = 1


def register(job_app: typer.Typer) -> None:
    job_app.command("port-forward")(port_forward)


def port_forward(
    job: str = typer.Argument(..., help="The job (id or name)."),
    ports: list[str] = typer.Argument(
        ...,
        help="LOCAL:REMOTE pairs (REMOTE: the task's port label or number; LOCAL empty: any "
        "free port); with --stdio, one REMOTE.",
    ),
    task: str | None = typer.Option(
        None, "--task", help="ROLE/INDEX (default: index 0 of the job's first role)."
    ),
    address: str = typer.Option("127.0.0.1", "--address", help="The local address to listen on."),
    stdio: bool = typer.Option(
        False, "--stdio", help="Connect stdin/stdout to the port instead (an SSH ProxyCommand)."
    ),
) -> None:
    """Forward local ports to a running task's ports, through the server (like kubectl).

    shoal job port-forward nb 8888:http; shoal job port-forward nb --task worker/1 :6006."""
    from shoal.cli.exec_command import _task_ok
    from shoal.client import ShoalError, discover

    if task is not None and not _task_ok(task):
        raise typer.BadParameter(
            f"expected ROLE/INDEX (e.g. worker/0), got {task!r}", param_hint="--task"
        )
    pairs = _stdio_port(ports) if stdio else [_pair(text) for text in ports]
    try:
        endpoint = discover()
    except ShoalError as exc:
        raise fail(exc.message) from None
    tunnel = Tunnels(endpoint, job, task)
    if stdio:
        raise typer.Exit(tunnel.stdio(pairs[0][1]))
    raise typer.Exit(tunnel.listen(address, pairs))


def _stdio_port(ports: list[str]) -> list[tuple[int, str]]:
    if len(ports) != 1 or ":" in ports[0] or not ports[0]:
        raise typer.BadParameter(
            f"with --stdio, give one REMOTE port (a label or number), got {' '.join(ports)!r}",
            param_hint="PORTS",
        )
    return [(0, ports[0])]


def _pair(text: str) -> tuple[int, str]:
    """``LOCAL:REMOTE``, ``:REMOTE`` (any free local port) or ``PORT`` (the same both sides)."""
    local, sep, remote = text.rpartition(":")
    if not sep:
        local, remote = text, text
    if not remote or (local and not (local.isdigit() and 0 < int(local) < 65536)):
        raise typer.BadParameter(
            f"expected LOCAL:REMOTE (e.g. 8888:http, :http or 8888), got {text!r}",
            param_hint="PORTS",
        )
    if not sep and not local.isdigit():
        raise typer.BadParameter(
            f"{text!r} is a label: say which local port, e.g. 8888:{text} (or :{text} for any)",
            param_hint="PORTS",
        )
    return int(local or 0), remote


class Tunnels:
    def __init__(self, endpoint: Endpoint, job: str, task: str | None) -> None:
        self.endpoint = endpoint
        self.job = job
        self.task = task
        self.stopping = threading.Event()

    def open(self, remote: str) -> ClientConnection:
        """A tunnel to the task's ``remote`` port; ``TunnelRefused`` with the server's reason."""
        from shoal.cli.exec_command import _connect

        query = [("port", remote)] + ([("task", self.task)] if self.task else [])
        path = f"/api/v1/jobs/{quote(self.job, safe='')}/tunnel?{urlencode(query)}"
        websocket = _connect(self.endpoint, path)
        first = websocket.recv(timeout=30)
        control = _control(first)
        if control.get("type") != "connected":
            with contextlib.suppress(Exception):
                websocket.close()
            raise TunnelRefused(str(control.get("message") or f"unexpected answer: {first!r}"))
        return websocket

    # ---- --stdio ----

    def stdio(self, remote: str) -> int:
        try:
            websocket = self.open(remote)
        except TunnelRefused as exc:
            print(f"shoal: {exc}", file=sys.stderr)
            return REFUSED
        stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
        splice(websocket, lambda n: os.read(stdin, n), lambda b: _write_all(stdout, b), _nothing)
        return 0

    # ---- listening ----

    def listen(self, address: str, pairs: list[tuple[int, str]]) -> int:
        for _, remote in pairs:  # a typo in the job, the task or the port says so at once
            try:
                self.open(remote).close()
            except TunnelRefused as exc:
                print(f"shoal: {exc}", file=sys.stderr)
                return REFUSED
        listeners = [(self._bind(address, local), remote) for local, remote in pairs]
        for sock, remote in listeners:
            host, port = sock.getsockname()[:2]
            print(f"Forwarding from {host}:{port} -> {remote}", flush=True)
            threading.Thread(target=self._accept, args=(sock, remote), daemon=True).start()
        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not self.stopping.wait(0.5):
                pass
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            for sock, _ in listeners:
                sock.close()
        return 0

    def _stop(self, number: int, frame: FrameType | None) -> None:
        self.stopping.set()

    def _bind(self, address: str, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            sock.close()
            raise fail(
                f"cannot listen on {address}:{port} ({exc.strerror}): choose another local "
                "port (LOCAL:REMOTE), or none (:REMOTE) for any free one"
            ) from None
        sock.listen(64)
        return sock

    def _accept(self, listener: socket.socket, remote: str) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, remote), daemon=True).start()

    def _serve(self, conn: socket.socket, remote: str) -> None:
        try:
            websocket = self.open(remote)
        except (TunnelRefused, OSError, typer.Exit) as exc:
            print(f"shoal: a connection to {remote} was refused: {exc}", file=sys.stderr)
            conn.close()
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        splice(websocket, conn.recv, conn.sendall, lambda: _shut(conn))
        conn.close()


class TunnelRefused(Exception):
    pass


def splice(
    websocket: ClientConnection,
    read: Callable[[int], bytes],
    write: Callable[[bytes], object],
    done: Callable[[], object],
) -> None:
    """Local bytes (``read``) to the WebSocket and its bytes to ``write``, until either ends."""

    def outbound() -> None:
        try:
            while data := read(READ_SIZE):
                websocket.send(data)
            websocket.send(json.dumps({"type": "eof"}))  # half-closed: the answer still comes
        except Exception:  # the local side or the tunnel broke: end both
            with contextlib.suppress(Exception):
                websocket.close()

    thread = threading.Thread(target=outbound, daemon=True)
    thread.start()
    try:
        for message in websocket:
            if isinstance(message, bytes):
                write(message)
    except Exception:  # the tunnel closed with an error: the connection ends here too
        pass
    finally:
        done()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _nothing() -> None:
    return None


def _shut(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def _control(first: object) -> dict[str, object]:
    if not isinstance(first, str):
        return {}
    with contextlib.suppress(ValueError):
        message = json.loads(first)
        if isinstance(message, dict):
            return message
    return {}
