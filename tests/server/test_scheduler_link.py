"""The pieces that let the scheduler run in its own process: the store's write lock across
processes, queue positions answered by job id, and the link's messages."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
from sqlalchemy import text

from shoal.core.queueindex import QueueIndex
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import JobRequest, RoleRequest
from shoal.server.positions import QueuePositions, SentPositions
from shoal.server.scheduler_link import WAKE, Outbox
from shoal.store.db import Database, sqlite_url

HOLDER = """
import sys, time
from pathlib import Path
import pytest
from sqlalchemy import text
from shoal.store.db import Database
db = Database(sys.argv[1])
with db.write() as session:
    session.execute(text("CREATE TABLE IF NOT EXISTS marks (who TEXT)"))
    session.execute(text("INSERT INTO marks VALUES ('holder')"))
    Path(sys.argv[2]).write_text("locked")
    while not Path(sys.argv[3]).exists():
        time.sleep(0.01)
"""


def _wait_for(path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


@pytest.mark.sqlite_only  # SQLite's file lock (PostgreSQL's: tests/store)
def test_a_writer_in_another_process_waits_for_the_write_lock(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    locked, release = tmp_path / "locked", tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url, str(locked), str(release)])
    try:
        _wait_for(locked)
        db = Database(url)
        entered = threading.Event()

        def write() -> None:
            with db.write() as session:
                entered.set()
                session.execute(text("INSERT INTO marks VALUES ('second')"))

        writer = threading.Thread(target=write)
        writer.start()
        assert not entered.wait(0.5), "two processes were inside a write at once"
        release.write_text("go")
        writer.join(30)
        assert entered.is_set()
        assert holder.wait(30) == 0
        with db.read() as session:
            rows = session.execute(text("SELECT who FROM marks ORDER BY rowid"))
            order = [row[0] for row in rows]
        assert order == ["holder", "second"]  # no "database is locked": the second waited
        db.dispose()
    finally:
        release.write_text("go")
        holder.wait(30)


@pytest.mark.sqlite_only  # SQLite's file lock (PostgreSQL's: tests/store)
def test_a_write_inside_a_write_keeps_the_lock_until_the_outer_one_ends(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    db = Database(url)
    lock_file = tmp_path / "shoal.db.write-lock"
    probe = "import fcntl,os,sys; fd=os.open(sys.argv[1],os.O_RDWR)\n"
    probe += "try:\n fcntl.flock(fd, fcntl.LOCK_EX|fcntl.LOCK_NB); print('free')\n"
    probe += "except BlockingIOError: print('held')"

    def seen_from_outside() -> str:
        run = subprocess.run(
            [sys.executable, "-c", probe, str(lock_file)],
            capture_output=True,
            text=True,
            check=True,
        )
        return run.stdout.strip()

    with db.write():
        with db.write():
            assert seen_from_outside() == "held"
        assert seen_from_outside() == "held"  # the inner write's end released nothing
    assert seen_from_outside() == "free"
    db.dispose()


def _job(job_id: str, priority: int, submitted: float, vc: str = "default") -> JobRequest:
    role = RoleRequest("w", 1, ResourceVector(1000, 1024, 0))
    return JobRequest(job_id, (role,), priority, submitted, virtual_cluster=vc)


def test_positions_are_found_by_job_id_at_the_priority_the_scheduler_gave() -> None:
    # In an aging VC the scheduler queues job "b" at a lower priority than its own (the row's):
    # its position must come from the queue's entry, not from the row.
    queue = {
        "a": _job("a", 10, 1.0),
        "b": _job("b", 5, 0.5),  # its own priority was 10: aged down, now behind "a" and "c"
        "c": _job("c", 10, 2.0),
        "d": _job("d", 10, 1.5, vc="other"),
    }
    index = QueueIndex()
    index.sync(tuple(queue.values()), per_vc=True)
    positions = QueuePositions.publish(index, queue, gone=["c"])  # "c" was admitted
    assert positions.of_ids(["a", "b", "c", "d", "missing"]) == {"a": 1, "b": 2, "d": 1}
    queue.clear()  # the scheduler goes on changing its queue: the published copy holds
    assert positions.of_ids(["b"]) == {"b": 2}
    # What the scheduler process sends the API, and what the API reads from it: the same.
    sent = SentPositions()
    assert sent.of_ids(["a"]) == {}
    sent.update(positions.encoded())
    assert sent.of_ids(["a", "b", "c", "d", "missing"]) == {"a": 1, "b": 2, "d": 1}
    sent.update(QueuePositions().encoded())  # the queue emptied
    assert sent.of_ids(["a", "b"]) == {}


def test_the_outbox_sends_in_order_and_coalesces_waiting_wake_ups() -> None:
    ours, theirs = socket.socketpair()
    sender, receiver = Connection(ours.detach()), Connection(theirs.detach())
    outbox = Outbox(sender, "test-outbox")
    messages = [("news", [f"node-{i}"]) for i in range(200)]
    for message in messages:
        outbox.put(message)
        outbox.put(WAKE)
    outbox.close()
    sender.close()
    got = []
    while True:
        try:
            got.append(receiver.recv())
        except EOFError:
            break
    assert [m for m in got if m != WAKE] == messages
    assert 1 <= got.count(WAKE) <= 200  # a wake-up still queued serves later ones too


def test_a_wake_up_asked_for_after_the_last_one_went_out_is_sent_again() -> None:
    ours, theirs = socket.socketpair()
    sender, receiver = Connection(ours.detach()), Connection(theirs.detach())
    outbox = Outbox(sender, "test-outbox")
    for _ in range(3):
        outbox.put(WAKE)
        assert receiver.poll(10) and receiver.recv() == WAKE
    outbox.close()
    assert not receiver.poll(0.1)
