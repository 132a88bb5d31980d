"""Task ports checked against the host.

Two checks. ``BusyPorts.scan`` lists the ports of a node's range held by sockets that are not the
agent's tasks' (read from ``/proc/net/{tcp,tcp6,udp,udp6}``: cost bounded by the host's socket
count, at most once a second); the agent reports them with its node, and the scheduler treats
them as taken. ``probe`` binds each of a task's ports just before its launch (a listener may have
appeared since the last scan): a port that cannot be bound refuses the launch, and the server
places the job again on other ports.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

SCAN_EVERY_S = 1.0
# A port that failed a probe stays reported busy this long even if no scan sees it (a socket
# bound but not listening, for instance, is not in /proc/net/tcp).
REMEMBER_REFUSED_S = 60.0
_PROC_NET = Path("/proc/net")
_TCP_TIME_WAIT = "06"  # a TIME_WAIT socket does not stop a bind with SO_REUSEADDR


@dataclass(frozen=True)
class PortTaken:
    """A task's port that could not be bound."""

    port: int
    label: str
    holder: str  # "pid 123 (python3)", or "" if unknown

    def message(self) -> str:
        held = f" by {self.holder}" if self.holder else " by another process"
        return f"port {self.port} (label {self.label!r}) is already in use{held}"


def bound_ports() -> set[int]:
    """Local ports of this network namespace's TCP and UDP sockets (TCP in TIME_WAIT aside)."""
    ports: set[int] = set()
    for name in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = (_PROC_NET / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or (name.startswith("tcp") and fields[3] == _TCP_TIME_WAIT):
                continue
            with contextlib.suppress(ValueError, IndexError):
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class BusyPorts:
    """Ports of the agent's port ranges that processes other than its tasks hold."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scanned: set[int] = set()
        self._scanned_at = float("-inf")
        self._refused: dict[int, float] = {}  # port -> when a probe last found it taken

    def refused(self, port: int) -> None:
        with self._lock:
            self._refused[port] = time.monotonic()

    def busy(self, low: int, high: int, own: Iterable[int]) -> list[int]:
        """Busy ports in ``[low, high)``, ``own`` (ports of this agent's live tasks) aside."""
        now = time.monotonic()
        with self._lock:
            if now - self._scanned_at >= SCAN_EVERY_S:
                self._scanned = bound_ports()
                self._scanned_at = now
            for port in [p for p, at in self._refused.items() if now - at > REMEMBER_REFUSED_S]:
                del self._refused[port]
            held = self._scanned | self._refused.keys()
        return sorted(p for p in held.difference(own) if low <= p < high)


def probe(ports: Mapping[str, list[int]]) -> PortTaken | None:
    """The first of the task's ports that cannot be bound (TCP, every address), or None."""
    for label, numbers in ports.items():
        for port in numbers:
            if not _can_bind(port):
                return PortTaken(port, label, holder_of(port))
    return None


def _can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))  # the wildcard address clashes with a socket on any address
        except OSError as exc:  # any other error says nothing about the port: let it launch
            return exc.errno not in (errno.EADDRINUSE, errno.EACCES)
    return True


def holder_of(port: int) -> str:
    """Which process holds ``port`` (``pid N (name)``), or "" if that cannot be found."""
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return ""
    for conn in connections:
        if conn.laddr and conn.laddr.port == port and conn.pid is not None:
            try:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return ""
