"""Sessions an agent relays over a WebSocket it opens to its server: exec (a command in a running
task, docs/terminal.md) and tunnels (a TCP connection to a task's port, docs/proxy.md). Part of
``shoal.protocol``, which re-exports every name."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

# ---- exec: a command in a running task's environment (docs/terminal.md) ----
#
# Both legs (user <-> server, server <-> agent) speak the same framing over a WebSocket. A binary
# frame is data: its first byte is the channel, the rest the bytes. A text frame is a JSON control
# message with a "type": resize {cols, rows} and eof (towards the command), exit {code, signal}
# and error {code, message} (from it). With a tty everything the command writes is stdout. On the
# agent's leg the server first says attached: only then does the agent start the command.

EXEC_STDIN, EXEC_STDOUT, EXEC_STDERR = 0, 1, 2
EXEC_CONTROLS = ("resize", "eof", "exit", "error", "attached")  # attached: server -> agent
EXEC_MARKER = "SHOAL_EXEC_SESSION"  # in the command's environment: how its processes are found
# The command when none is given: bash where the task's environment has it, else sh.
DEFAULT_EXEC_ARGV = ["/bin/sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash || exec sh"]
EXEC_ATTACH_S = 10.0  # how long the server waits for the agent to attach to a session


class ExecOrder(BaseModel):
    """Run ``argv`` in the running attempt's environment and relay it over the WebSocket at
    ``exec_path(session_id)``."""

    session_id: str
    attempt_id: str
    argv: list[str] = Field(min_length=1)
    tty: bool = False
    cols: int = Field(80, ge=1, le=1000)
    rows: int = Field(24, ge=1, le=1000)


def exec_path(session_id: str) -> str:
    """Where an agent attaches to an exec session (a WebSocket)."""
    return f"/api/v1/agent/exec/{session_id}"


def exec_data(channel: int, data: bytes) -> bytes:
    """A data frame: the channel byte, then the bytes."""
    return bytes((channel,)) + data


def exec_control(kind: str, **fields: object) -> str:
    """A control frame's text: ``{"type": kind, **fields}``."""
    return json.dumps({"type": kind, **fields})


def read_control(text: str) -> dict[str, Any] | None:
    """A control frame's fields, or None when it is not one (not JSON, no known type)."""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("type") not in EXEC_CONTROLS:
        return None
    return message


# ---- tunnels: a TCP connection to a running task's port (docs/proxy.md) ----
#
# The agent opens ``tunnel_path(session_id)`` with its credentials, waits for the server's
# attached, connects to the task's port and says connected (or error {code, message}); from then
# on binary frames are the connection's bytes, both ways, and a close ends it. The user's side may
# half-close first: eof, and the agent shuts the connection's writing side.

TUNNEL_CONTROLS = ("attached", "connected", "error", "eof")  # eof: the user's side half-closed


class TunnelOrder(BaseModel):
    """Connect to ``port`` of the running attempt and relay its bytes over the WebSocket at
    ``tunnel_path(session_id)``: `shoal job port-forward`, `shoal job ssh`, the task proxy."""

    session_id: str
    attempt_id: str
    port: int = Field(ge=1, le=65535)


def tunnel_path(session_id: str) -> str:
    """Where an agent attaches to a tunnel (a WebSocket)."""
    return f"/api/v1/agent/tunnel/{session_id}"


def tunnel_control(text: str) -> dict[str, Any] | None:
    """A tunnel's control frame, or None when the text is not one."""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("type") not in TUNNEL_CONTROLS:
        return None
    return message
