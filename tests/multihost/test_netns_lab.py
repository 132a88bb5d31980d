"""The namespace lab itself: hosts reach each other over the bridge, the root namespace reaches
them over its own veth (and only once the route is there), a cut link stops traffic and a healed
one restores it, and tearing down leaves no namespace or process behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.multihost.netns import NetnsLab, namespaces_usable

pytestmark = pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)

FETCH = (
    "import sys, urllib.request; "
    "print(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).status)"
)


def _fetch(lab: NetnsLab, host_index: int, url: str, timeout: float = 5.0) -> str:
    done = lab.run(lab.host(host_index), [sys.executable, "-c", FETCH, url, str(timeout)])
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def test_hosts_talk_over_the_bridge_and_a_cut_link_stops_them(tmp_path: Path) -> None:
    lab = NetnsLab.create(3)
    try:
        h1 = lab.host(1)
        served = tmp_path / "www"
        served.mkdir()
        (served / "index.html").write_text("hello")
        server = lab.spawn(
            h1,
            [sys.executable, "-m", "http.server", "8000", "--bind", h1.address, "-d", str(served)],
            tmp_path / "http.log",
        )
        lab.wait_reachable(h1.address, 8000)
        url = f"http://{h1.address}:8000/"
        assert _fetch(lab, 2, url) == "200"
        assert _fetch(lab, 3, url) == "200"
        lab.cut(h1)
        assert "200" not in _fetch(lab, 2, url, timeout=2.0)
        lab.heal(h1)
        lab.wait_reachable(h1.address, 8000)
        assert _fetch(lab, 2, url) == "200"
        assert server.poll() is None
    finally:
        lab.destroy()
    names = subprocess.run(
        ["ip", "netns", "list"], check=False, capture_output=True, text=True
    ).stdout
    assert lab.tag not in names
    links = subprocess.run(
        ["ip", "link", "show"], check=False, capture_output=True, text=True
    ).stdout
    assert lab.root_veth not in links
    assert server.poll() is not None


def test_require_route_refuses_an_address_outside_the_lab() -> None:
    lab = NetnsLab.create(1)
    try:
        lab.require_route(lab.host(1).address)
        with pytest.raises(AssertionError, match="no route"):
            lab.require_route("198.19.254.1")  # routed by the default route, not the lab
    finally:
        lab.destroy()
