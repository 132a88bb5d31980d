"""The address a node advertises: where its peers reach its tasks (``$SHOAL_<ROLE>_HOSTS``,
``PAI_HOST_IP_*``). One rule for ``shoal agent join``, the local-mode ``shoal agent`` and the
hosts ``shoal cluster create`` joins: the address given (``--address``), else the address this
host uses to reach the server, the source address of its route there; a server on loopback
(local mode, tests on one machine) gives 127.0.0.1.

The route is asked of the kernel by connecting a UDP socket to the server and reading its local
end (``getsockname``): connecting a UDP socket sends nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"
ROUTE_WHY = "the address this host uses to reach the server"


class AddressError(Exception):
    """No address could be chosen; the message says why and names ``--address``."""


@dataclass(frozen=True)
class Advertised:
    address: str
    why: str  # "given with --address", ROUTE_WHY, ...

    def sentence(self) -> str:
        """For the join's output: which address and why, and how to change it."""
        change = "" if self.why.startswith("given") else "; --address to change it"
        return f"advertising {self.address} ({self.why}{change})"


Route = Callable[[str, int], str]


def route_source(host: str, port: int) -> str:
    """The local address of this host's route to ``host:port`` (no packet is sent)."""
    family, kind, proto, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.connect(sockaddr)
        return str(probe.getsockname()[0])


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def advertised_address(
    server_url: str, given: str | None = None, route: Route | None = None
) -> Advertised:
    """The address to advertise for a node whose agent talks to ``server_url`` (``route``:
    how to find the route's source address; the kernel's, through ``route_source``)."""
    if given:
        return Advertised(given, "given with --address")
    parts = urlsplit(server_url)
    host = parts.hostname
    if not host:
        raise AddressError(f"{server_url!r} names no server host; give the address with --address")
    if is_loopback(host):
        return Advertised(LOOPBACK, "the server is on this machine, on loopback")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        source = (route or route_source)(host, port)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise AddressError(
            f"cannot tell which address this host reaches {host} from ({why}); give the address "
            "its peers reach it at with --address"
        ) from None
    if is_loopback(source):
        return Advertised(source, "the server's address is this machine's own")
    return Advertised(source, ROUTE_WHY)
