"""The address a node advertises to its peers (shoal.agent.address): the one given, else the
source address of this host's route to the server, else 127.0.0.1 for a server on loopback; never
127.0.0.1 for a server on another machine (issue #24 item 4)."""

from __future__ import annotations

import errno

import pytest

from shoal.agent.address import (
    ROUTE_WHY,
    AddressError,
    Advertised,
    Route,
    advertised_address,
    route_source,
)


def fake_route(found: list[tuple[str, int]], source: str = "198.18.0.12") -> Route:
    def route(host: str, port: int) -> str:
        found.append((host, port))
        return source

    return route


def test_a_remote_server_gives_the_source_address_of_the_route_to_it() -> None:
    asked: list[tuple[str, int]] = []
    chosen = advertised_address("https://198.18.0.1:8476", route=fake_route(asked))
    assert chosen == Advertised("198.18.0.12", ROUTE_WHY)
    assert asked == [("198.18.0.1", 8476)]
    assert chosen.sentence() == (
        "advertising 198.18.0.12 (the address this host uses to reach the server; --address "
        "to change it)"
    )
    advertised_address("https://lab.example/", route=fake_route(asked))
    assert asked[-1] == ("lab.example", 443)  # the URL's default port


@pytest.mark.parametrize(
    "url",
    ["https://127.0.0.1:8476", "http://127.0.0.1:8476", "https://localhost:1", "https://[::1]:2"],
)
def test_a_server_on_loopback_gives_loopback_without_asking_for_a_route(url: str) -> None:
    asked: list[tuple[str, int]] = []
    chosen = advertised_address(url, route=fake_route(asked))
    assert chosen.address == "127.0.0.1" and asked == []
    assert "on this machine" in chosen.why


def test_the_address_given_wins() -> None:
    asked: list[tuple[str, int]] = []
    chosen = advertised_address("https://198.18.0.1:8476", "198.18.1.7", fake_route(asked))
    assert chosen == Advertised("198.18.1.7", "given with --address") and asked == []
    assert chosen.sentence() == "advertising 198.18.1.7 (given with --address)"


def test_no_route_to_the_server_asks_for_the_address() -> None:
    def unreachable(host: str, port: int) -> str:
        raise OSError(errno.ENETUNREACH, "Network is unreachable")

    with pytest.raises(AddressError) as refused:
        advertised_address("https://198.18.0.1:8476", route=unreachable)
    assert str(refused.value) == (
        "cannot tell which address this host reaches 198.18.0.1 from (Network is unreachable); "
        "give the address its peers reach it at with --address"
    )


def test_a_server_name_that_is_this_machine_says_so() -> None:
    chosen = advertised_address("https://lab.example:1", route=lambda h, p: "127.0.0.1")
    assert (
        chosen.address == "127.0.0.1" and chosen.why == "the server's address is this machine's own"
    )


def test_the_kernels_route_to_loopback_starts_at_loopback() -> None:
    assert route_source("127.0.0.1", 9) == "127.0.0.1"  # a UDP connect: nothing is sent
