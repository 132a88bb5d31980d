"""The rack fixture of the multi-host tests: namespace hosts with a server and joined agents."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.multihost.netns import NetnsLab
from tests.multihost.rack import Rack, build_rack

MakeRack = Callable[..., Rack]


@pytest.fixture
def make_rack(tmp_path: Path) -> Iterator[MakeRack]:
    """``make_rack(nodes=3, address=True, **timings)``: a lab of ``nodes + 1`` hosts, the server
    on host 1 and an agent joined on each other host (with ``--address`` its host's address, or
    with none if not ``address``); torn down (processes, then namespaces) after the test."""
    made: list[tuple[NetnsLab, Rack | None]] = []

    def make(nodes: int = 3, address: bool = True, **timings: float) -> Rack:
        lab = NetnsLab.create(nodes + 1)
        made.append((lab, None))
        rack = build_rack(lab, tmp_path, nodes=nodes, address=address, **timings)
        made[-1] = (lab, rack)
        return rack

    yield make
    for lab, rack in made:
        try:
            if rack is not None:
                rack.close()
        finally:
            lab.destroy()
