"""The applier's last look at the nodes (pure): an admission fits only if its nodes take new tasks
and still have the CPU, memory, GPU indices and ports it was given, beside the active tasks."""

from __future__ import annotations

import pytest

from shoal.core.plan import Admission, TaskPlacement
from shoal.core.recheck import Held, recheck_admission
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import NodeState

NODE = NodeState(
    name="n0",
    address="10.0.0.1",
    capacity=ResourceVector(4000, 8192, 2),
    gpu_indices=(0, 1),
    port_range=(20000, 20010),
    reserved_ports=frozenset({20009}),
)


def placed(index: int, cpu: int = 1000, gpus: tuple[int, ...] = (), ports: tuple[int, ...] = ()):
    return TaskPlacement(
        role="w",
        index=index,
        node="n0",
        address="10.0.0.1",
        resources=ResourceVector(cpu, 1024, len(gpus)),
        gpu_indices=gpus,
        ports=(("p", ports),) if ports else (),
    )


def check(*placements: TaskPlacement, held: tuple[Held, ...] = (), hold: str | None = None):
    admission = Admission("j", placements)
    return recheck_admission(admission, {"n0": NODE}, {"n0": hold} if hold else {}, held)


def test_an_admission_that_still_fits_passes() -> None:
    held = (Held("n0", 1000, 1024, (0,), (20000,)),)
    assert check(placed(0, 3000, (1,), (20001,)), held=held) is None


@pytest.mark.parametrize(
    ("placements", "held", "hold", "why"),
    [
        ((placed(0),), (), "CORDONED", "node n0 is CORDONED now: it takes no new task"),
        ((placed(0),), (), "NOT_READY", "node n0 is NOT_READY now: it takes no new task"),
        ((placed(0, 2000),), (Held("n0", 3000, 0, (), ()),), None, "its CPU was taken"),
        ((placed(0, gpus=(1,)),), (Held("n0", 0, 0, (1,), ()),), None, "GPU(s) [1] were taken"),
        ((placed(0, ports=(20003,)),), (Held("n0", 0, 0, (), (20003,)),), None, "[20003]"),
        ((placed(0, ports=(20009,)),), (), None, "port(s) [20009] were taken"),  # not shoal's
        ((placed(0, ports=(20010,)),), (), None, "port(s) [20010]"),  # outside the node's range
        ((placed(0, gpus=(0,)), placed(1, gpus=(0,))), (), None, "w[1]: GPU(s) [0]"),  # gang
    ],
)
def test_an_admission_that_no_longer_fits_says_why(
    placements: tuple[TaskPlacement, ...], held: tuple[Held, ...], hold: str | None, why: str
) -> None:
    reason = check(*placements, held=held, hold=hold)
    assert reason is not None and why in reason


def test_a_node_that_is_gone_is_named() -> None:
    admission = Admission("j", (placed(0),))
    assert recheck_admission(admission, {}, {}, ()) == "node n0 no longer exists"
