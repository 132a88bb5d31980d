"""The task proxy's listening socket (docs/proxy.md): a port the user asked for and found taken
is an error naming --proxy-port; `shoal up`'s default (the API's port + 1), taken between its
check and the server's bind, gives way to any free port instead of failing the start."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.server.app import _proxy_socket
from shoal.server.settings import ServerSettings


@pytest.fixture
def taken() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_taken_port_the_user_asked_for_is_an_error_naming_the_option(
    tmp_path: Path, taken: int
) -> None:
    settings = ServerSettings(home=tmp_path, proxy_port=taken)
    with pytest.raises(OSError, match=rf"cannot listen on 127.0.0.1:{taken} .*--proxy-port"):
        _proxy_socket(settings)


def test_a_taken_default_port_gives_way_to_any_free_one(tmp_path: Path, taken: int) -> None:
    settings = ServerSettings(home=tmp_path, proxy_port=taken, proxy_port_fallback=True)
    sock = _proxy_socket(settings)
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port not in (0, taken)
    finally:
        sock.close()
