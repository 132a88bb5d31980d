"""Stored log files read as timed lines: tails from the end, ``since`` via the time index, pages
that never split a line unless it is longer than the page, and logs stored before the index."""

from __future__ import annotations

import os
from pathlib import Path

from shoal.server.services import log_files
from shoal.server.services.log_files import read_forward, read_tail, record_time, start_after


def write_chunks(path: Path, chunks: list[tuple[bytes, float]]) -> None:
    """Store chunks the way the server does: append the bytes, then note their time."""
    for data, at in chunks:
        offset = path.stat().st_size if path.exists() else 0
        with open(path, "ab") as handle:
            handle.write(data)
        record_time(path, offset, at)


def test_each_line_takes_the_time_of_the_chunk_holding_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "stdout"
    write_chunks(log, [(b"one\ntw", 10.0), (b"o\nthree\n", 11.0), (b"four\n", 12.0)])
    page = read_forward(log, 0, 1024, final=True)
    assert [(line.at, line.text) for line in page.lines] == [
        (10.0, "one"),
        (11.0, "two"),  # completed by the second chunk
        (11.0, "three"),
        (12.0, "four"),
    ]
    assert page.next_offset == page.size and not page.more


def test_a_running_log_holds_back_its_partial_last_line(tmp_path: Path) -> None:
    log = tmp_path / "stdout"
    write_chunks(log, [(b"done\nhalf", 1.0)])
    running = read_forward(log, 0, 1024, final=False)
    assert [line.text for line in running.lines] == ["done"] and running.next_offset == 5
    finished = read_forward(log, running.next_offset, 1024, final=True)
    assert [line.text for line in finished.lines] == ["half"]


def test_pages_end_on_a_line_and_say_there_is_more(tmp_path: Path) -> None:
    log = tmp_path / "stdout"
    write_chunks(log, [(b"".join(b"line %03d\n" % i for i in range(100)), 1.0)])
    texts, offset, pages = [], 0, 0
    while True:
        page = read_forward(log, offset, 95, final=True)  # 10.5 lines of 9 bytes
        texts += [line.text for line in page.lines]
        offset, pages = page.next_offset, pages + 1
        if not page.more:
            break
    assert texts == [f"line {i:03d}" for i in range(100)] and pages == 10
    long_line = tmp_path / "long"
    write_chunks(long_line, [(b"x" * 250 + b"\n", 1.0)])
    first = read_forward(long_line, 0, 100, final=True)
    assert [len(line.text) for line in first.lines] == [100] and first.more


def test_tail_reads_only_the_end_of_a_big_log(tmp_path: Path, monkeypatch: object) -> None:
    log = tmp_path / "stdout"
    write_chunks(log, [(b"".join(b"%06d\n" % i for i in range(200_000)), 5.0)])
    reads: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, handle: object) -> None:
            self.handle = handle

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()  # type: ignore[attr-defined]

        def seek(self, offset: int) -> None:
            self.handle.seek(offset)  # type: ignore[attr-defined]

        def read(self, size: int) -> bytes:
            data: bytes = self.handle.read(size)  # type: ignore[attr-defined]
            reads.append(len(data))
            return data

    def counting_open(path: object, mode: str = "r") -> object:
        handle = real_open(path, mode)  # type: ignore[call-overload]
        return Counting(handle) if str(path) == str(log) else handle

    monkeypatch.setattr(log_files, "open", counting_open, raising=False)  # type: ignore[attr-defined]
    page = read_tail(log, 3, final=True)
    assert [line.text for line in page.lines] == ["199997", "199998", "199999"]
    assert all(line.at == 5.0 for line in page.lines)
    assert sum(reads) <= log_files.TAIL_BLOCK < os.path.getsize(log) // 10


def test_since_starts_at_the_first_line_shipped_after_it(tmp_path: Path) -> None:
    log = tmp_path / "stdout"
    write_chunks(log, [(b"a\nb\n", 100.0), (b"c\n", 200.0), (b"d\ne\n", 300.0)])
    assert start_after(log, 50.0) == 0
    assert start_after(log, 100.0) == 4
    assert start_after(log, 250.0) == 6
    assert start_after(log, 300.0) == log.stat().st_size
    page = read_forward(log, start_after(log, 150.0), 1024, final=True)
    assert [line.text for line in page.lines] == ["c", "d", "e"]


def test_a_log_stored_without_an_index_takes_its_modification_time(tmp_path: Path) -> None:
    log = tmp_path / "stdout"
    log.write_bytes(b"old\nlog\n")
    os.utime(log, (1000.0, 1000.0))
    assert [line.at for line in read_forward(log, 0, 1024, final=True).lines] == [1000.0] * 2
    assert start_after(log, 999.0) == 0 and start_after(log, 1000.0) == 8
