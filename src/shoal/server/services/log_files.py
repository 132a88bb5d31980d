"""Lines of one stored log file, with the time each was shipped, read in bounded pieces.

Beside each log file (``stdout``) the server keeps a time index (``stdout.times``): one 16-byte
record (offset, epoch seconds) per stored chunk, saying when the agent read the bytes from that
offset on. A line's time is the time of the chunk that holds its newline, so it is at most one
shipping period (250 ms) after the task wrote it. Logs stored without an index (older servers)
take the file's modification time. Every read here is bounded: a tail reads blocks from the end,
``since`` binary-searches the index, and a page never reads more than its byte limit.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

RECORD = struct.Struct("<Qd")
TAIL_BLOCK = 64 * 1024
MAX_TAIL_BYTES = 16 * 1024 * 1024  # a tail never reads more than this from the end


@dataclass(frozen=True)
class Line:
    at: float
    text: str


@dataclass(frozen=True)
class Page:
    lines: list[Line]
    next_offset: int  # where the next read starts (after the last line returned)
    size: int
    more: bool  # complete lines remain after next_offset (the page was cut by its limit)


def times_path(path: Path) -> Path:
    return path.with_name(path.name + ".times")


def record_time(path: Path, offset: int, at: float) -> None:
    """Note that the bytes of ``path`` from ``offset`` on were read by the agent at ``at``."""
    with open(times_path(path), "ab") as handle:
        handle.write(RECORD.pack(offset, at))


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


class TimeIndex:
    """Binary search and range reads over a ``.times`` file (records sorted by offset)."""

    def __init__(self, path: Path) -> None:
        index = times_path(path)
        self.fallback = path.stat().st_mtime if path.exists() else 0.0
        self.handle: BinaryIO | None = open(index, "rb") if index.exists() else None  # noqa: SIM115
        self.count = os.fstat(self.handle.fileno()).st_size // RECORD.size if self.handle else 0

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()

    def record(self, i: int) -> tuple[int, float]:
        assert self.handle is not None
        self.handle.seek(i * RECORD.size)
        offset, at = RECORD.unpack(self.handle.read(RECORD.size))
        return int(offset), float(at)

    def _last_at_or_before(self, offset: int) -> int:
        """Index of the last record starting at or before ``offset`` (-1 if none)."""
        low, high = 0, self.count
        while low < high:
            middle = (low + high) // 2
            if self.record(middle)[0] <= offset:
                low = middle + 1
            else:
                high = middle
        return low - 1

    def first_after(self, since: float) -> int | None:
        """Offset of the first chunk read after ``since`` (None: nothing was)."""
        if self.count == 0:
            return 0 if self.fallback > since else None
        low, high = 0, self.count
        while low < high:  # times are non-decreasing in practice: the agent stamps in order
            middle = (low + high) // 2
            if self.record(middle)[1] <= since:
                low = middle + 1
            else:
                high = middle
        return None if low == self.count else self.record(low)[0]

    def times(self, ends: list[int]) -> list[float]:
        """The time of the byte before each of ``ends`` (ascending offsets)."""
        if self.count == 0 or not ends:
            return [self.fallback] * len(ends)
        i = max(self._last_at_or_before(ends[0] - 1), 0)
        current = self.record(i)
        following = self.record(i + 1) if i + 1 < self.count else None
        result = []
        for end in ends:
            while following is not None and following[0] <= end - 1:
                i += 1
                current = following
                following = self.record(i + 1) if i + 1 < self.count else None
            result.append(current[1])
        return result


def _split(data: bytes, base: int, take_partial: bool) -> tuple[list[tuple[int, bytes]], int]:
    """(end offset, line bytes) per line in ``data`` (read at ``base``) and the offset after."""
    lines = []
    start = 0
    while True:
        newline = data.find(b"\n", start)
        if newline < 0:
            break
        lines.append((base + newline + 1, data[start:newline]))
        start = newline + 1
    if take_partial and start < len(data):
        lines.append((base + len(data), data[start:]))
        start = len(data)
    return lines, base + start


def _page(path: Path, pieces: list[tuple[int, bytes]], next_offset: int, more: bool) -> Page:
    index = TimeIndex(path)
    try:
        times = index.times([end for end, _ in pieces])
    finally:
        index.close()
    lines = [
        Line(at, text.decode("utf-8", errors="replace"))
        for at, (_, text) in zip(times, pieces, strict=True)
    ]
    return Page(lines, next_offset, _size(path), more)


def read_forward(path: Path, offset: int, limit: int, final: bool) -> Page:
    """Complete lines from ``offset``, at most ``limit`` bytes; a finished log's last partial
    line is included, and a single line longer than ``limit`` comes in ``limit``-byte pieces."""
    size = _size(path)
    offset = min(offset, size)
    if offset == size:
        return Page([], offset, size, False)
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(limit)
    full = len(data) == limit and offset + limit < size
    pieces, next_offset = _split(data, offset, take_partial=final and not full)
    if not pieces and full:  # one line longer than the limit: hand it over in pieces
        pieces, next_offset = [(offset + len(data), data)], offset + len(data)
    return _page(path, pieces, next_offset, next_offset < size and full)


def read_tail(path: Path, count: int, final: bool) -> Page:
    """The last ``count`` complete lines (and a finished log's partial last line)."""
    size = _size(path)
    if size == 0 or count == 0:
        return Page([], size, size, False)
    with open(path, "rb") as handle:
        data = b""
        position = size
        while position > 0 and size - position < MAX_TAIL_BYTES:
            step = min(TAIL_BLOCK, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
            if data.count(b"\n") > count:
                break
    if position > 0:  # drop the first, partial line of the window
        cut = data.find(b"\n") + 1
        position += cut
        data = data[cut:]
    pieces, next_offset = _split(data, position, take_partial=final)
    return _page(path, pieces[-count:], next_offset, False)


def start_after(path: Path, since: float) -> int:
    """Offset of the first line shipped after ``since`` (the file's size if none was)."""
    size = _size(path)
    index = TimeIndex(path)
    try:
        first = index.first_after(since)
    finally:
        index.close()
    if first is None:
        return size
    if first == 0:
        return 0
    with open(path, "rb") as handle:  # back to the start of the line holding byte ``first``
        position = max(first - TAIL_BLOCK, 0)
        handle.seek(position)
        before = handle.read(first - position)
    newline = before.rfind(b"\n")
    return position + newline + 1 if newline >= 0 else position
