"""News between the servers that share one PostgreSQL store (docs/postgresql.md, "Several API
servers"), over PostgreSQL's LISTEN/NOTIFY.

Each server wakes its own long polls and its scheduler after its own writes (``notify.py``). With
several servers, the write may have gone through another one. Two channels carry it:

- ``shoal_agent_news``: a transaction that noted news for agents (``note_news``) also sends
  ``NOTIFY`` with the server's id and the nodes, delivered when (and only if) it commits. Every
  other server wakes the long polls of those nodes' agents waiting on it.
- ``shoal_changes``: migration 0032's trigger on the change feed sends it from any transaction
  that changed a job, node or VC; every server wakes its scheduler (it runs cycles if it leads).

A listener that loses its connection reconnects and then wakes every long poll and the scheduler
once: news sent while it was away is not lost, only answered as "look again". SQLite stores
have one server per file: nothing is installed there.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, make_url, text

from shoal.server.notify import noted_news

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shoal.server.context import ServerContext
    from shoal.store.db import Database

log = logging.getLogger("shoal.server")

AGENT_CHANNEL = "shoal_agent_news"
CHANGES_CHANNEL = "shoal_changes"  # migration 0032 sends it
PAYLOAD_LIMIT = 7000  # bytes; PostgreSQL's limit is 8000
ALL_NODES = "*"
RECONNECT_S = 2.0
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def install_announcer(db: Database, server_id: str) -> None:
    """Make every committed transaction of ``db`` that noted agent news announce it."""

    def announce(session: Session) -> None:
        nodes = noted_news(session)
        if nodes:
            for payload in payloads(server_id, sorted(nodes)):
                session.execute(_NOTIFY, {"channel": AGENT_CHANNEL, "payload": payload})

    event.listen(db.sessions, "before_commit", announce)


def payloads(server_id: str, nodes: Iterable[str]) -> list[str]:
    """``SERVER NODE,NODE,...`` in pieces that each fit a notification."""
    pieces: list[str] = []
    current: list[str] = []
    size = len(server_id) + 1
    for node in nodes:
        if current and size + len(node) + 1 > PAYLOAD_LIMIT:
            pieces.append(f"{server_id} {','.join(current)}")
            current, size = [], len(server_id) + 1
        current.append(node)
        size += len(node) + 1
    if current:
        pieces.append(f"{server_id} {','.join(current)}")
    return pieces


def parse(payload: str) -> tuple[str, list[str] | None]:
    """(the sending server, its nodes; None: every node)."""
    sender, _, listed = payload.partition(" ")
    if listed == ALL_NODES:
        return sender, None
    return sender, [node for node in listed.split(",") if node]


def new_server_id() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


class StoreNewsListener:
    """A thread that LISTENs on its own connection and wakes this server's waiters."""

    def __init__(self, ctx: ServerContext, server_id: str, poll_s: float = 0.5) -> None:
        self.ctx = ctx
        self.server_id = server_id
        self.poll_s = poll_s
        self.received = 0  # notifications acted on (tests read it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shoal-store-news", daemon=True)
        self._conninfo = make_url(ctx.db.url).set(drivername="postgresql")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_s + 5)

    def _run(self) -> None:
        import psycopg  # noqa: PLC0415 - the postgresql extra; only a PostgreSQL store gets here

        from shoal.store.db import PG_CONNECT_ARGS  # noqa: PLC0415

        conninfo = self._conninfo.render_as_string(hide_password=False)
        failing = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True, **PG_CONNECT_ARGS) as connection:
                    connection.execute(f"LISTEN {AGENT_CHANNEL}")
                    connection.execute(f"LISTEN {CHANGES_CHANNEL}")
                    if failing:
                        log.warning("store news: listening again")
                    failing = False
                    self._wake_all()  # what was sent before this LISTEN is not lost
                    self._listen(connection)
            except Exception as exc:  # the store went away: retry, say it once
                if not failing:
                    log.warning("store news: lost the store (%s); retrying", exc)
                failing = True
                self._stop.wait(RECONNECT_S)

    def _listen(self, connection: Any) -> None:
        while not self._stop.is_set():
            for notice in connection.notifies(timeout=self.poll_s):
                self.received += 1
                if notice.channel == CHANGES_CHANNEL:
                    self.ctx.wake_scheduler()
                    continue
                sender, nodes = parse(notice.payload)
                if sender != self.server_id:  # its own were woken after its commit
                    self.ctx.wake_agents(nodes)

    def _wake_all(self) -> None:
        self.ctx.wake_agents()
        self.ctx.wake_scheduler()
