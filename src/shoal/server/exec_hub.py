"""Exec sessions in flight (docs/terminal.md): where a user's WebSocket waits for its agent's, and
the relay between the two once it has attached.

The server cannot connect to an agent, so a session is an order the agent's long poll picks up
(``take``, from ``agents.orders``), and the agent then opens its own WebSocket to
``/api/v1/agent/exec/{id}`` (``find``, then ``LiveSession.attach``). Everything here lives in this
server process's memory: a server that restarts loses its sessions (the audit log closes them as
``server-restarted``, ``services.exec_sessions.close_orphans``).

The hub is shared by the event loop (the two WebSocket handlers) and worker threads (the agents'
order reads), hence its lock; the futures and events of a session belong to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from shoal.protocol import EXEC_STDIN, ExecOrder, TunnelOrder, read_control

if TYPE_CHECKING:
    from starlette.types import Message
    from starlette.websockets import WebSocket

# Why a session ended (the audit log's ``end_reason``).
EXITED = "exited"  # the command exited: its exit code is recorded
CLOSED_BY_USER = "closed-by-user"  # the user's WebSocket closed (the command was ended)
AGENT_LOST = "agent-lost"  # the agent's WebSocket ended without the command's exit
NOT_ATTACHED = "agent-did-not-attach"  # the agent did not attach within EXEC_ATTACH_S
REFUSED_BY_AGENT = "refused-by-agent"  # the agent could not start the command (it said why)
SERVER_STOPPED = "server-stopped"  # this server shut down during the session
SERVER_RESTARTED = "server-restarted"  # found open by a later server process
TO_AGENT = ("resize", "eof")  # the control messages a user may send
EARLY_MESSAGES = 256  # kept while the agent attaches (keystrokes typed before the shell is up)
# What a hub hands agents: exec sessions, or tunnels to a task's port (server/tunnels.py), each
# with the same rendezvous.
Order = TypeVar("Order", ExecOrder, TunnelOrder)


@dataclass
class LiveSession(Generic[Order]):
    """One session between its user's WebSocket being accepted and its end."""

    order: Order
    node: str
    attached: asyncio.Future[WebSocket] = field(init=False)
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.attached = asyncio.get_running_loop().create_future()

    def attach(self, websocket: WebSocket) -> None:
        self.attached.set_result(websocket)


class ExecHub(Generic[Order]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, LiveSession[Order] | None] = {}  # None: reserved, not open yet
        self._pending: dict[str, list[Order]] = {}  # by node: not delivered yet
        self.swept = False  # sessions of earlier server processes were closed (at first use)

    def reserve(self, session_id: str) -> None:
        """Count ``session_id`` as this process's before its audit row is written."""
        with self._lock:
            self._live[session_id] = None

    def open(self, order: Order, node: str) -> LiveSession[Order]:
        """Offer the session to the agent of ``node`` (on the event loop)."""
        session = LiveSession(order, node)
        with self._lock:
            self._live[order.session_id] = session
            self._pending.setdefault(node, []).append(order)
        return session

    def take(self, nodes: list[str]) -> list[Order]:
        """The sessions waiting for the agent of ``nodes`` (each delivered once)."""
        with self._lock:
            return [order for node in nodes for order in self._pending.pop(node, [])]

    def find(self, session_id: str) -> LiveSession[Order] | None:
        """The session an agent attaches to, if it is open and has no agent yet."""
        with self._lock:
            session = self._live.get(session_id)
        if session is None or session.attached.done():
            return None
        return session

    def close(self, session_id: str) -> None:
        with self._lock:
            session = self._live.pop(session_id, None)
            if session is not None:
                waiting = self._pending.get(session.node, [])
                waiting[:] = [o for o in waiting if o.session_id != session_id]
                if not waiting:
                    self._pending.pop(session.node, None)
        if session is not None:
            session.finished.set()

    def live_ids(self) -> set[str]:
        with self._lock:
            return set(self._live)


@dataclass
class Outcome:
    """How a relayed session ended."""

    reason: str
    exit_code: int | None = None
    error: dict[str, Any] | None = None  # the agent's error message, if it sent one


async def relay(user: WebSocket, agent: WebSocket, early: list[Message]) -> Outcome:
    """Relay frames both ways until either side ends; ``early``: what the user sent while the
    agent was attaching. Closes neither socket."""
    outcome = Outcome(AGENT_LOST)
    for message in early:
        await _to_agent(agent, message)
    upstream = asyncio.create_task(_user_to_agent(user, agent))
    downstream = asyncio.create_task(_agent_to_user(agent, user, outcome))
    done, pending = await asyncio.wait({upstream, downstream}, return_when="FIRST_COMPLETED")
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if upstream in done and downstream not in done:
        outcome.reason = CLOSED_BY_USER
    return outcome


async def _user_to_agent(user: WebSocket, agent: WebSocket) -> None:
    while True:
        message = await user.receive()
        if message["type"] == "websocket.disconnect":
            return
        await _to_agent(agent, message)


async def _to_agent(agent: WebSocket, message: Message) -> None:
    """Pass on stdin data and the user's control messages; drop anything else."""
    data, text = message.get("bytes"), message.get("text")
    if data and data[0] == EXEC_STDIN:
        await agent.send_bytes(data)
    elif text is not None:
        control = read_control(text)
        if control is not None and control["type"] in TO_AGENT:
            await agent.send_text(text)


async def _agent_to_user(agent: WebSocket, user: WebSocket, outcome: Outcome) -> None:
    while True:
        message = await agent.receive()
        if message["type"] == "websocket.disconnect":
            return
        data, text = message.get("bytes"), message.get("text")
        if data is not None:
            await user.send_bytes(data)
            continue
        control = read_control(text or "")
        if control is None:
            continue
        if control["type"] == "exit":
            code = control.get("code")
            outcome.reason, outcome.exit_code = EXITED, code if isinstance(code, int) else None
        elif control["type"] == "error":
            outcome.reason, outcome.error = REFUSED_BY_AGENT, control
        await user.send_text(text or "")
        if control["type"] in ("exit", "error"):
            return  # the session is over: the relay closes both sides


async def wait_for_agent(
    user: WebSocket, session: LiveSession[Any], timeout: float
) -> tuple[WebSocket | None, list[Message], bool]:
    """Wait up to ``timeout`` for the agent to attach, keeping what the user sends meanwhile.
    Returns the agent's WebSocket (None: it did not attach), those messages, and whether the
    user went away."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    early: list[Message] = []
    receiving = asyncio.ensure_future(user.receive())
    try:
        while not session.attached.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None, early, False
            waited: set[asyncio.Future[Any]] = {session.attached, receiving}
            await asyncio.wait(waited, timeout=remaining, return_when="FIRST_COMPLETED")
            if receiving.done():
                message = receiving.result()
                if message["type"] == "websocket.disconnect":
                    return None, early, True
                if len(early) < EARLY_MESSAGES:
                    early.append(message)
                receiving = asyncio.ensure_future(user.receive())
        return session.attached.result(), early, False
    finally:
        if not receiving.done():
            receiving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiving
