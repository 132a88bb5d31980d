"""``shoal node show``'s load bars: scaled to the capacity, gaps where there is no figure."""

from __future__ import annotations

from shoal.cli.node_show_command import sparkline


def test_bars_scale_to_the_top_and_leave_gaps() -> None:
    assert sparkline([0.0, 2.0, 4.0, None], 4.0) == "▁▅█ "
    assert sparkline([1.0, 2.0], None) == "▅█"  # no top: the largest value is the top
    assert sparkline([None, 0.0], 0.0) == " ▁"
    assert sparkline([9.0], 4.0) == "█"  # above the top (a capacity that shrank): full
