"""A request whose connection is lost after it was sent is not sent again and says so (it may
have been carried out); a server nobody can connect to is said as such (docs/postgresql.md,
"Several servers": the CLI given several URLs fails over only before a request is sent)."""

from __future__ import annotations

import socket
import threading

import pytest

from shoal.client import ShoalClient
from shoal.client.transport import ServerUnavailable
from shoal.local.supervisor import free_port


def test_a_connection_lost_after_the_request_was_sent_is_said_and_not_resent() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[bytes] = []

    def swallow() -> None:  # reads each request, then hangs up without an answer
        for _ in range(2):
            listener.settimeout(5)
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                seen.append(connection.recv(65536))

    thread = threading.Thread(target=swallow, daemon=True)
    thread.start()
    try:
        client = ShoalClient(f"http://127.0.0.1:{port}", "token", timeout=5)
        with pytest.raises(ServerUnavailable) as lost:
            client.submit("version: 1\nname: x\nroles:\n  w:\n    command: 'true'\n")
        assert "was lost before the server answered" in lost.value.message
        assert "not sent again" in lost.value.message
    finally:
        listener.close()
        thread.join(timeout=10)
    assert len([r for r in seen if r.startswith(b"POST")]) == 1  # sent once, not retried


def test_a_server_nobody_can_connect_to_is_said_as_such() -> None:
    client = ShoalClient(f"http://127.0.0.1:{free_port()}", "token", timeout=5)
    with pytest.raises(ServerUnavailable) as unreachable:
        client.jobs()
    assert "no shoal server answers at" in unreachable.value.message
