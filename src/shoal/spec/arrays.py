"""Job array expressions, as Slurm's ``sbatch --array``: which elements an array has and how many
may run at once.

    0-999        the indices 0 to 999
    1,3,5-9      a list of indices and ranges
    0-99:2       a range with a step (0, 2, 4, ... 98)
    0-999%50     any of the above, with at most 50 elements running at once

Indices are sorted and given once each, whatever the order they are written in (as Slurm does).
Pure: no I/O; ``ArrayError`` carries the message without the field's name, which the caller adds
(``--array`` on the command line, ``array`` in a job file or the API).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

MAX_ARRAY_SIZE = 10_000  # elements in one array
MAX_ARRAY_INDEX = 999_999  # Slurm's MaxArraySize is a bound on the index too
MAX_EXPRESSION = 1_000  # characters
HINT = (
    "write it as 0-999, 1,3,5-9 or 0-99:2, with %N to run at most N elements at once "
    "(e.g. 0-999%50)"
)

_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


class ArrayError(ValueError):
    """An expression that is not a valid array: ``message`` says why, ``hint`` how to fix it."""

    def __init__(self, message: str, hint: str = HINT) -> None:
        super().__init__(f"{message}; {hint}")
        self.message = message
        self.hint = hint


@dataclass(frozen=True, slots=True)
class ArrayRange:
    """The elements of an array and its concurrency cap (None: no cap)."""

    expression: str
    indices: tuple[int, ...]
    cap: int | None

    @property
    def size(self) -> int:
        return len(self.indices)

    @property
    def first(self) -> int:
        return self.indices[0]

    @property
    def last(self) -> int:
        return self.indices[-1]

    @property
    def running_at_once(self) -> int:
        """The most elements that may hold resources at the same time."""
        return self.size if self.cap is None else min(self.cap, self.size)


def _number(text: str, what: str) -> int:
    if len(text) > 7:  # more digits than any allowed index: no huge int is built
        raise ArrayError(f"{what} {text} is above the largest allowed index, {MAX_ARRAY_INDEX}")
    value = int(text)
    if value > MAX_ARRAY_INDEX:
        raise ArrayError(f"{what} {value} is above the largest allowed index, {MAX_ARRAY_INDEX}")
    return value


def _item(text: str) -> range:
    match = _ITEM.match(text)
    if match is None:
        shown = text or "(nothing)"
        raise ArrayError(f"{shown!r} is not an index, a range A-B or a stepped range A-B:S")
    start = _number(match.group(1), "index")
    if match.group(2) is None:
        return range(start, start + 1)
    stop = _number(match.group(2), "index")
    if stop < start:
        raise ArrayError(f"the range {text} runs backwards", f"write {stop}-{start}")
    step = 1 if match.group(3) is None else int(match.group(3)[:8])
    if step < 1:
        raise ArrayError(f"the step of {text} must be at least 1", "e.g. 0-99:2")
    return range(start, stop + 1, step)


def _cap(text: str) -> int:
    if not (text.isascii() and text.isdigit()):  # "²".isdigit(), but int("²") fails
        raise ArrayError(
            f"the cap %{text} is not a number", "write %N after the indices, e.g. 0-999%50"
        )
    cap = int(text[:8])
    if cap < 1:
        raise ArrayError(
            f"the cap %{text} must be at least 1", "write %N with N >= 1, or leave the cap out"
        )
    return cap


@lru_cache(maxsize=256)
def parse_array(text: str) -> ArrayRange:
    """The array ``text`` describes; ``ArrayError`` if it is not valid, empty or too large."""
    expression = "".join(str(text).split())
    if not expression:
        raise ArrayError("is empty")
    if len(expression) > MAX_EXPRESSION:
        raise ArrayError(f"is {len(expression)} characters long; at most {MAX_EXPRESSION}")
    body, sep, cap_text = expression.partition("%")
    cap = _cap(cap_text) if sep else None
    ranges = [_item(part) for part in body.split(",")]
    if sum(len(r) for r in ranges) > MAX_ARRAY_SIZE * 4:  # counted before anything is built
        raise _too_large(expression, sum(len(r) for r in ranges))
    indices = tuple(sorted({index for r in ranges for index in r}))
    if len(indices) > MAX_ARRAY_SIZE:
        raise _too_large(expression, len(indices))
    return ArrayRange(expression, indices, cap)


def _too_large(expression: str, count: int) -> ArrayError:
    return ArrayError(
        f"{expression} has {count:,} elements; an array has at most {MAX_ARRAY_SIZE:,}",
        f"split it into several arrays (e.g. 0-{MAX_ARRAY_SIZE - 1} and "
        f"{MAX_ARRAY_SIZE}-{2 * MAX_ARRAY_SIZE - 1})",
    )
