"""Borrowed and lent per VC (``core.quota.sharing``): use beyond the guarantee is borrowed; what
all VCs borrow is lent by the VCs with idle guarantee, in proportion to it."""

from __future__ import annotations

import pytest

from shoal.core.quota import Guarantee, apportion, sharing
from shoal.core.resources import ResourceVector as R

CASES: list[tuple[str, dict[str, Guarantee], dict[str, R], dict[str, tuple[R, R]]]] = [
    (
        "nobody borrows",
        {"a": (4000, 8192, 2), "b": (4000, 8192, 2)},
        {"a": R(1000, 100, 1)},
        {"a": (R(), R()), "b": (R(), R())},
    ),
    (
        "one borrows from the only idle one",
        {"a": (0, 0, 1), "b": (0, 0, 3)},
        {"a": R(0, 0, 3)},
        {"a": (R(0, 0, 2), R()), "b": (R(), R(0, 0, 2))},
    ),
    (
        "the loan is shared in proportion to idle guarantees (1.5 and 0.5: largest remainder)",
        {"a": (None, None, 0), "b": (None, None, 3), "c": (None, None, 1)},
        {"a": R(5000, 100, 2)},
        {"a": (R(0, 0, 2), R()), "b": (R(), R(0, 0, 2)), "c": (R(), R(0, 0, 0))},
    ),
    (
        "an unlimited resource is neither borrowed nor lent",
        {"a": (None, 1024, 1), "b": (2000, 1024, 1)},
        {"a": R(3000, 2048, 0)},
        {"a": (R(0, 1024, 0), R(0, 0, 0)), "b": (R(), R(0, 1024, 0))},
    ),
    (
        "more borrowed than idle (capacity nobody guarantees): lent is capped",
        {"a": (None, None, 0), "b": (None, None, 1)},
        {"a": R(0, 0, 3)},
        {"a": (R(0, 0, 3), R()), "b": (R(), R(0, 0, 1))},
    ),
]


@pytest.mark.parametrize(
    ("guarantees", "used", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_sharing(
    guarantees: dict[str, Guarantee], used: dict[str, R], want: dict[str, tuple[R, R]]
) -> None:
    got = sharing(guarantees, used)
    assert {name: (s.borrowed, s.lent) for name, s in got.items()} == want


def test_apportioned_parts_add_up_to_the_amount() -> None:
    weights = {"a": 3, "b": 3, "c": 1, "d": 0}
    for amount in range(9):
        parts = apportion(amount, weights)
        assert sum(parts.values()) == min(amount, 7)
        assert parts["d"] == 0
        assert all(parts[n] <= weights[n] for n in weights)
    assert apportion(1, {"b": 1, "a": 1}) == {"a": 1, "b": 0}  # a tie goes by name
