"""The agent's port checks against real sockets of this host."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from shoal.agent.ports import BusyPorts, bound_ports, probe
from tests.integration.conftest import port_base


@pytest.fixture
def listener() -> Iterator[int]:
    """A socket of this process listening on a port of the test block, on every address."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", port_base() + 3990))
        sock.listen()
        yield sock.getsockname()[1]


def test_probe_names_the_taken_port_its_label_and_holder(listener: int) -> None:
    taken = probe({"http": [listener + 1], "nccl": [listener]})
    assert taken is not None and (taken.port, taken.label) == (listener, "nccl")
    assert taken.holder.startswith(f"pid {os.getpid()} (")
    assert taken.message().startswith(f"port {listener} (label 'nccl') is already in use by pid")


def test_probe_passes_free_ports_even_in_time_wait() -> None:
    free = port_base() + 3991
    with socket.socket() as server:  # leave a TIME_WAIT connection on the port
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", free))
        server.listen()
        client = socket.create_connection(("127.0.0.1", free))
        conn, _ = server.accept()
        conn.close()  # the server side closes first: it holds the TIME_WAIT
        client.close()
    assert probe({"http": [free]}) is None


def test_busy_ports_lists_listeners_in_the_range_but_not_own_ports(listener: int) -> None:
    assert listener in bound_ports()
    busy = BusyPorts()
    assert busy.busy(listener - 5, listener + 5, own=()) == [listener]
    assert busy.busy(listener - 5, listener + 5, own={listener}) == []
    assert busy.busy(listener + 1, listener + 5, own=()) == []  # outside the range
    busy.refused(listener + 2)  # refused by a probe: reported even if no scan sees it
    assert busy.busy(listener + 1, listener + 5, own=()) == [listener + 2]
