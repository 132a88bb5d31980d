"""News between two servers on one PostgreSQL store (server/store_news.py, docs/postgresql.md
"Several API servers"): a commit through one server wakes the other's long polls for the nodes
it named and the other's scheduler; a rolled-back transaction wakes nobody; a listener whose
connection is cut comes back and wakes everyone once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text

from shoal.server.context import ServerContext
from shoal.server.notify import note_news
from shoal.server.store_news import PAYLOAD_LIMIT, StoreNewsListener, parse, payloads
from shoal.store.models import VirtualClusterRow

NOTICE_S = 10.0  # generous: a notification arrives within a poll interval (0.1 s here)


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + NOTICE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {NOTICE_S} s")
        time.sleep(0.02)


@pytest.fixture
def listener(servers: tuple[ServerContext, ServerContext]) -> Iterator[StoreNewsListener]:
    listening = StoreNewsListener(servers[1], servers[1].server_id, poll_s=0.1)
    listening.start()
    try:
        _until(lambda: _listening(servers[1]), "the listener")
        yield listening
    finally:
        listening.stop()


LISTENERS = (
    "FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND datname = current_database() "
    "AND pid <> pg_backend_pid()"
)


def _listening(ctx: ServerContext) -> bool:
    """The listener's connection has sent its last LISTEN (it then only waits)."""
    with ctx.db.read() as session:
        return bool(session.scalar(text(f"SELECT count(*) {LISTENERS} AND query LIKE '%changes'")))


def test_news_committed_through_one_server_wakes_the_other_servers_long_polls(
    servers: tuple[ServerContext, ServerContext], listener: StoreNewsListener
) -> None:
    first, second = servers
    before = second.agent_work.versions(["n1", "n2", "n3"])
    with first.db.write() as session:
        note_news(session, ["n1", "n2"])
    _until(lambda: second.agent_work.versions(["n1"]) != before[:2], "n1 woken")
    now = second.agent_work.versions(["n1", "n2", "n3"])
    assert now[1] == before[1] + 1 and now[2] == before[2] + 1 and now[3] == before[3]
    assert now[0] == before[0]  # news for two nodes is not news for all


def test_a_rolled_back_transaction_wakes_nobody_and_its_own_news_is_not_echoed(
    servers: tuple[ServerContext, ServerContext], listener: StoreNewsListener
) -> None:
    first, second = servers
    before = second.agent_work.versions(["gone", "own", "later"])
    with pytest.raises(RuntimeError), first.db.write() as session:
        note_news(session, ["gone"])
        raise RuntimeError("rolled back")
    with second.db.write() as session:  # the second server's own news: woken after its commit
        note_news(session, ["own"])
    with first.db.write() as session:
        note_news(session, ["later"])
    _until(lambda: second.agent_work.versions(["later"])[1] != before[3], "later woken")
    # notifications arrive in commit order: the rolled-back one and the echo would be here
    assert second.agent_work.versions(["gone", "own"])[1:] == before[1:3]
    assert listener.received == 2  # "own" came back and was skipped; "gone" never came


def test_a_change_committed_through_one_server_wakes_the_other_servers_scheduler(
    servers: tuple[ServerContext, ServerContext], listener: StoreNewsListener
) -> None:
    first, second = servers
    seen = second.scheduler_wake.generation
    with first.db.write() as session:  # a VC: a change the scheduler reads (migration 0017)
        session.add(VirtualClusterRow(name="team", created_at=0.0))
    _until(lambda: second.scheduler_wake.generation != seen, "the scheduler woken")


def test_a_listener_whose_connection_is_cut_listens_again_and_wakes_everyone_once(
    servers: tuple[ServerContext, ServerContext], listener: StoreNewsListener
) -> None:
    first, second = servers
    everyone = second.agent_work.versions([])
    with first.db.write() as session:
        cut = session.execute(text(f"SELECT pg_terminate_backend(pid) {LISTENERS}")).all()
    assert cut, "no listening connection to cut"
    _until(lambda: second.agent_work.versions([]) != everyone, "everyone woken after the cut")
    before = second.agent_work.versions(["n9"])
    with first.db.write() as session:
        note_news(session, ["n9"])
    _until(lambda: second.agent_work.versions(["n9"])[1] != before[1], "n9 woken after the cut")


def test_many_nodes_news_is_split_into_notifications_that_fit() -> None:
    nodes = [f"node-{i:05d}-of-a-large-cluster" for i in range(2000)]
    pieces = payloads("server-1", nodes)
    assert len(pieces) > 1
    assert all(len(p.encode()) <= PAYLOAD_LIMIT for p in pieces)
    got: list[str] = []
    for piece in pieces:
        sender, listed = parse(piece)
        assert sender == "server-1" and listed is not None
        got += listed
    assert got == nodes
    assert payloads("server-1", []) == []
