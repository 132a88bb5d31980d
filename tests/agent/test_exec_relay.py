"""The agent's side of exec sessions with real processes and a real WebSocket (the test plays the
server): the command runs in the task's environment only once the server said ``attached``; stdin,
eof, output channels and the exit code; a pseudo-terminal that resizes; a closed WebSocket or the
agent's shutdown ends the shell and everything it started, a child in a session of its own too; a
task that does not run here is refused with the reason."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from websockets.sync.server import Server, ServerConnection, serve

from shoal.agent.exec_relay import ExecRelays
from shoal.agent.identity import Connection
from shoal.agent.runner import Runner
from shoal.protocol import PROTOCOL_HEADER, ExecOrder, exec_path
from tests.agent.limits_helpers import make_runner, order


@dataclass
class Attached:
    """One agent's WebSocket, held open until the test is done with it."""

    ws: ServerConnection
    done: threading.Event = field(default_factory=threading.Event)

    def frames(self, until_exit: bool = True, timeout: float = 20.0) -> tuple[bytes, bytes, dict]:
        """stdout, stderr and the exit (or error) message."""
        out, err = b"", b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.ws.recv(timeout=deadline - time.monotonic())
            if isinstance(message, bytes):
                if message[0] == 1:
                    out += message[1:]
                else:
                    err += message[1:]
                continue
            control = json.loads(message)
            if control["type"] in ("exit", "error") or not until_exit:
                return out, err, control
        raise AssertionError(f"no exit within {timeout} s: {out!r} {err!r}")

    def read_until(self, pattern: bytes, timeout: float = 20.0) -> bytes:
        """Output until ``pattern`` (a regular expression) is in it."""
        seen = b""
        deadline = time.monotonic() + timeout
        while re.search(pattern, seen) is None:
            message = self.ws.recv(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(message, bytes):
                seen += message[1:]
        return seen


class FakeServer:
    def __init__(self) -> None:
        self.connections: queue.Queue[Attached] = queue.Queue()
        self.server: Server = serve(self._handle, "127.0.0.1", 0)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        port = self.server.socket.getsockname()[1]
        self.connection = Connection.bearer(f"http://127.0.0.1:{port}", "agent-token")

    def _handle(self, ws: ServerConnection) -> None:
        attached = Attached(ws)
        self.connections.put(attached)
        attached.done.wait(60)

    def next(self) -> Attached:
        return self.connections.get(timeout=20)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    yield fake
    fake.server.shutdown()


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    running = make_runner(tmp_path)
    running.launch(order("sleep 120"))
    yield running
    running.stop_all(2.0)


def unique(name: str) -> str:
    """A session id no other test's session has: a session ends (SIGHUP) every process on the
    machine that carries its id, and the other xdist worker may run an exec test meanwhile."""
    return f"{name}-{uuid.uuid4().hex[:12]}"


def start(relays: ExecRelays, argv: list[str], tty: bool = False, session: str = "") -> str:
    session = session or unique("s1")
    relays.start(ExecOrder(session_id=session, attempt_id="1.1", argv=argv, tty=tty))
    return session


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still alive: {[p for p in pids if not gone(p)]}"
        time.sleep(0.05)


def test_a_command_runs_in_the_tasks_environment_with_stdin_eof_and_its_exit_code(
    server: FakeServer, runner: Runner
) -> None:
    relays = ExecRelays(runner, server.connection)
    session = start(
        relays, ["sh", "-c", 'echo "$SHOAL_TASK_ROLE $(pwd)"; cat; echo oops >&2; exit 3']
    )
    agent = server.next()
    assert agent.ws.request is not None
    assert agent.ws.request.path == exec_path(session)
    assert agent.ws.request.headers["Authorization"] == "Bearer agent-token"
    assert agent.ws.request.headers[PROTOCOL_HEADER] == "2"
    agent.ws.send(json.dumps({"type": "attached"}))
    agent.ws.send(b"\x00typed\n")
    agent.ws.send(json.dumps({"type": "eof"}))
    out, err, exit_message = agent.frames()
    workdir = runner.attempts["1.1"].workdir
    assert out.decode() == f"main {workdir}\ntyped\n" and err == b"oops\n"
    assert exit_message == {"type": "exit", "code": 3, "signal": None}
    agent.done.set()


def test_nothing_runs_until_the_server_says_attached(
    server: FakeServer, runner: Runner, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    relays = ExecRelays(runner, server.connection)
    start(relays, ["touch", str(marker)])
    agent = server.next()
    agent.ws.send(json.dumps({"type": "error", "code": "NoExecSessionError", "message": "gone"}))
    agent.ws.close()
    agent.done.set()
    deadline = time.monotonic() + 10
    while relays.running():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not marker.exists()


def test_a_terminal_has_job_control_and_follows_resizes(server: FakeServer, runner: Runner) -> None:
    relays = ExecRelays(runner, server.connection)
    relays.start(
        ExecOrder(
            session_id=unique("s1"), attempt_id="1.1", argv=["sh"], tty=True, cols=100, rows=30
        )
    )
    agent = server.next()
    agent.ws.send(json.dumps({"type": "attached"}))
    agent.ws.send(b"\x00stty size; tty; echo tty-$SHOAL_TASK_ROLE\n")
    seen = agent.read_until(b"tty-main")
    assert b"30 100" in seen and b"/dev/pts/" in seen
    agent.ws.send(json.dumps({"type": "resize", "cols": 132, "rows": 43}))
    agent.ws.send(b"\x00stty size\n")
    assert b"43 132" in agent.read_until(b"43 132")
    agent.ws.send(b"\x00exit 7\n")
    _, err, exit_message = agent.frames()
    assert err == b"" and exit_message["code"] == 7  # a terminal has one channel: stdout
    agent.done.set()


@pytest.mark.parametrize("tty", [False, True])
def test_a_closed_websocket_ends_the_shell_and_everything_it_started(
    server: FakeServer, runner: Runner, tty: bool
) -> None:
    relays = ExecRelays(runner, server.connection)
    script = "sleep 1000 & echo bg=$!; setsid sleep 1001 & echo own=$!; echo sh=$$; wait"
    start(relays, ["sh", "-c", script], tty=tty)
    agent = server.next()
    agent.ws.send(json.dumps({"type": "attached"}))
    seen = agent.read_until(rb"sh=\d+\s").decode()
    pids = [int(part.split("=")[1]) for part in seen.split() if "=" in part]
    assert len(pids) == 3 and not any(gone(pid) for pid in pids)
    agent.ws.close()
    agent.done.set()
    wait_gone(pids)  # the setsid child too: it carries the session's marker


def test_the_agents_shutdown_ends_its_sessions(server: FakeServer, runner: Runner) -> None:
    relays = ExecRelays(runner, server.connection)
    start(relays, ["sh", "-c", "echo sh=$$; sleep 1000"])
    agent = server.next()
    agent.ws.send(json.dumps({"type": "attached"}))
    pid = int(agent.read_until(rb"sh=\d+\s").decode().strip().split("=")[1])
    relays.stop_all()
    assert not relays.running()
    wait_gone([pid])
    agent.done.set()


def test_a_task_that_does_not_run_here_is_refused_with_the_reason(
    server: FakeServer, runner: Runner
) -> None:
    relays = ExecRelays(runner, server.connection)
    relays.start(ExecOrder(session_id=unique("s2"), attempt_id="9.1", argv=["sh"]))
    agent = server.next()
    agent.ws.send(json.dumps({"type": "attached"}))
    _, _, error = agent.frames()
    assert error["type"] == "error" and error["code"] == "ExecRefusedError"
    assert "9.1 is not running on this agent" in error["message"]
    agent.done.set()


def test_input_for_a_command_that_closed_its_stdin_does_not_lose_its_exit(
    server: FakeServer, runner: Runner
) -> None:
    relays = ExecRelays(runner, server.connection)
    start(relays, ["sh", "-c", "exec 0<&-; echo closed; sleep 0.5; exit 5"])
    agent = server.next()
    agent.ws.send(json.dumps({"type": "attached"}))
    agent.read_until(b"closed")
    for _ in range(3):  # nobody reads them now: the agent's writes fail (EPIPE)
        agent.ws.send(b"\x00" + b"x" * 70000)
    _, _, exit_message = agent.frames()
    assert exit_message == {"type": "exit", "code": 5, "signal": None}
    agent.done.set()
