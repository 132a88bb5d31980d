"""Plain aligned tables that never cut a value.

On a terminal too narrow for every column, the columns of least value are left out (highest
``drop`` first) instead of shortening values with "…"; piped (``width`` None) every column is
printed in full, with no box drawing, so ``grep``/``awk`` see whole values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GAP = "  "


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    drop: int = 0  # 0: always shown; otherwise left out first when higher, on a narrow terminal
    right: bool = False


def terminal_width() -> int | None:
    """The width to fit in when stdout is a terminal (``$COLUMNS`` wins), else None."""
    from shoal.cli.render import console

    return console.width if console.is_terminal else None


def visible_columns(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None
) -> list[int]:
    """Indexes of the columns to show so that a line fits ``width`` (if it can)."""
    widths = _widths(columns, rows)
    shown = list(range(len(columns)))
    if width is None:
        return shown
    while _line_width(widths, shown) > width:
        droppable = [i for i in shown if columns[i].drop > 0]
        if not droppable:
            break  # only essential columns left: print them whole; the terminal wraps
        shown.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    return shown


def table_text(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None, indent: str = ""
) -> str:
    """The table as text lines (header first), every value whole."""
    shown = visible_columns(columns, rows, width if width is None else width - len(indent))
    widths = _widths(columns, rows)
    lines = []
    for cells in [[c.header for c in columns], *rows]:
        parts = [
            cells[i].rjust(widths[i]) if columns[i].right else cells[i].ljust(widths[i])
            for i in shown
        ]
        lines.append((indent + GAP.join(parts)).rstrip())
    return "\n".join(lines)


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max([len(c.header), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]


def _line_width(widths: Sequence[int], shown: Sequence[int]) -> int:
    return sum(widths[i] for i in shown) + len(GAP) * max(0, len(shown) - 1)
