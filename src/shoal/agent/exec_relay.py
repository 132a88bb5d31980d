"""Exec sessions on the agent's side (docs/terminal.md): a command in a running task's environment,
relayed over a WebSocket the agent opens to its server.

The order comes with the long poll (``OrdersResponse.exec``). For each, a thread of its own:

1. opens ``WS /api/v1/agent/exec/{session}`` with the agent's credentials (its Bearer token in
   local mode, its node certificate on a server on the network) and waits for the server's
   ``attached``: nothing runs for a session the server has given up on;
2. asks the runner how to run the command in the task's environment (``Runner.exec_launch``:
   directory, env, cgroup, container) and starts it through ``exec_shim`` in a new session, under
   a pseudo-terminal (``tty``) or with pipes; the command's environment carries
   ``SHOAL_EXEC_SESSION=<id>`` (``env`` in front of it, so it holds inside a container too);
3. relays: stdin frames and ``resize``/``eof`` to the command, its output as stdout/stderr
   frames, then its ``exit``;
4. when the command exits or the WebSocket closes (either side, or the agent's shutdown), ends
   everything the session started: every process of its session or with its marker gets SIGHUP,
   then SIGKILL after ``HANGUP_GRACE_S``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pty
import selectors
import signal
import ssl
import struct
import subprocess
import sys
import termios
import threading
import time
from typing import TYPE_CHECKING, Any

import psutil
from websockets.sync.client import connect as ws_connect

from shoal.agent import exec_shim
from shoal.agent.identity import Connection
from shoal.agent.runtimes import Launch, LaunchRefused
from shoal.net.failover import server_urls
from shoal.protocol import (
    EXEC_ATTACH_S,
    EXEC_MARKER,
    EXEC_STDERR,
    EXEC_STDIN,
    EXEC_STDOUT,
    ExecOrder,
    exec_control,
    exec_data,
    exec_path,
    read_control,
)

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from shoal.agent.runner import Runner

log = logging.getLogger("shoal.agent")
SHIM = [sys.executable, "-I", "-S", exec_shim.__file__]
HANGUP_GRACE_S = 2.0  # between SIGHUP and SIGKILL for what a session leaves
POLL_S = 0.05
DRAIN_S = 1.0  # at most this long reading what the command wrote before it exited
READ_SIZE = 1 << 16
REFUSED = "ExecRefusedError"


class ExecRelays:
    """The agent's exec sessions, one thread each."""

    def __init__(self, runner: Runner, connection: Connection) -> None:
        self.runner = runner
        self.connection = connection
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[ExecSession, threading.Thread]] = {}
        self._closed = False

    def start(self, order: ExecOrder) -> None:
        with self._lock:
            if self._closed or order.session_id in self._sessions:
                return
            session = ExecSession(order, self.runner, self.connection)
            thread = threading.Thread(
                target=self._run, args=(session,), name=f"exec-{order.session_id[:8]}", daemon=True
            )
            self._sessions[order.session_id] = (session, thread)
        thread.start()

    def _run(self, session: ExecSession) -> None:
        try:
            session.run()
        except Exception:  # a session's failure never reaches the agent's other threads
            log.exception("exec session %s failed", session.order.session_id)
        finally:
            with self._lock:
                self._sessions.pop(session.order.session_id, None)

    def running(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def stop_all(self, timeout: float = HANGUP_GRACE_S + 5.0) -> None:
        """End every session (the agent's shutdown): each ends its command and what it left."""
        with self._lock:
            self._closed = True
            sessions = list(self._sessions.values())
        for session, _ in sessions:
            session.end()
        deadline = time.monotonic() + timeout
        for _, thread in sessions:
            thread.join(max(0.0, deadline - time.monotonic()))


class ExecSession:
    def __init__(self, order: ExecOrder, runner: Runner, connection: Connection) -> None:
        self.order = order
        self.runner = runner
        self.connection = connection
        self.proc: subprocess.Popen[bytes] | None = None
        self.terminal: int | None = None  # the pty's master side (tty)
        self.outputs: dict[int, int] = {}  # fd -> channel
        self.closed = threading.Event()  # the WebSocket closed (or is closing)
        self._ws: ClientConnection | None = None

    def end(self) -> None:
        """End the session from another thread: close its WebSocket; ``run`` does the rest."""
        self.closed.set()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                self._ws.close(1001, "the agent is stopping")

    def run(self) -> None:
        try:
            ws = connect(self.connection, exec_path(self.order.session_id))
        except Exception as exc:
            log.warning("exec session %s: cannot reach the server: %s", self.order.session_id, exc)
            return
        self._ws = ws
        inbound: threading.Thread | None = None
        try:
            if self.closed.is_set() or not self._attached(ws):
                return
            try:
                self._start(self._launch())
            except (LaunchRefused, OSError) as exc:
                ws.send(exec_control("error", code=REFUSED, message=_refusal(self.order, exc)))
                return
            inbound = threading.Thread(target=self._pump_in, args=(ws,), daemon=True)
            inbound.start()
            ended = self._pump_out(ws)
            if ended is not None:
                with contextlib.suppress(Exception):  # the user may have gone meanwhile
                    ws.send(exec_control("exit", code=ended[0], signal=ended[1]))
        finally:
            with contextlib.suppress(Exception):
                ws.close()
            self.closed.set()
            self._end_processes()
            if inbound is not None:
                inbound.join(timeout=5)

    def _attached(self, ws: ClientConnection) -> bool:
        """Wait for the server's ``attached`` (anything else: it refused, logged here)."""
        try:
            first = ws.recv(timeout=EXEC_ATTACH_S)
        except Exception as exc:
            log.warning(
                "exec session %s: no answer from the server: %s", self.order.session_id, exc
            )
            return False
        control = read_control(first) if isinstance(first, str) else None
        if control is not None and control["type"] == "attached":
            return True
        log.warning("exec session %s refused by the server: %s", self.order.session_id, first)
        return False

    def _launch(self) -> Launch:
        marked = ["env", f"{EXEC_MARKER}={self.order.session_id}", *self.order.argv]
        return self.runner.exec_launch(self.order.attempt_id, marked, self.order.tty)

    def _start(self, launch: Launch) -> None:
        argv = [*SHIM, ":".join(launch.join) or "-", "--", *launch.argv]
        options: dict[str, Any] = {"cwd": launch.cwd, "env": launch.env, "start_new_session": True}
        if not self.order.tty:
            pipe = subprocess.PIPE
            self.proc = subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=pipe, **options)
            assert self.proc.stdout is not None and self.proc.stderr is not None
            self.outputs = {
                self.proc.stdout.fileno(): EXEC_STDOUT,
                self.proc.stderr.fileno(): EXEC_STDERR,
            }
            return
        master, slave = pty.openpty()
        try:
            set_size(master, self.order.cols, self.order.rows)
            self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, **options)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self.terminal = master
        self.outputs = {master: EXEC_STDOUT}

    # ---- relaying ----

    def _pump_in(self, ws: ClientConnection) -> None:
        """WebSocket -> command, until the WebSocket closes."""
        try:
            for message in ws:
                if isinstance(message, bytes):
                    if message[:1] == bytes((EXEC_STDIN,)):
                        self._write_stdin(message[1:])
                    continue
                control = read_control(message)
                if control is not None:
                    self._control(control)
        except Exception as exc:  # closed with an error
            log.debug("exec session %s input ended: %s", self.order.session_id, exc)
        finally:
            self.closed.set()

    def _write_stdin(self, data: bytes) -> None:
        """Write to the command's stdin; once it is gone (the command ended or closed it), what
        comes is dropped: the command's exit, not this, ends the session."""
        fd = self._stdin()
        view = memoryview(data)
        with contextlib.suppress(OSError):
            while fd is not None and view:
                view = view[os.write(fd, view) :]

    def _stdin(self) -> int | None:
        if self.terminal is not None:
            return self.terminal
        stdin = self.proc.stdin if self.proc is not None else None
        return None if stdin is None or stdin.closed else stdin.fileno()

    def _control(self, control: dict[str, Any]) -> None:
        if control["type"] == "resize" and self.terminal is not None:
            cols, rows = control.get("cols"), control.get("rows")
            if isinstance(cols, int) and isinstance(rows, int) and cols > 0 and rows > 0:
                with contextlib.suppress(OSError):  # the terminal is gone: the session ends
                    set_size(self.terminal, min(cols, 1000), min(rows, 1000))
        elif control["type"] == "eof" and self.terminal is not None:
            self._write_stdin(b"\x04")  # the terminal's end of input (VEOF)
        elif control["type"] == "eof" and self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def _pump_out(self, ws: ClientConnection) -> tuple[int, int | None] | None:
        """Command -> WebSocket until the command exits (returns its exit code and signal) or
        the WebSocket closes (returns None)."""
        assert self.proc is not None
        selector = selectors.DefaultSelector()
        for fd in self.outputs:
            selector.register(fd, selectors.EVENT_READ)
        exited_at: float | None = None
        while not self.closed.is_set():
            events = selector.select(POLL_S) if selector.get_map() else []
            if not selector.get_map():
                time.sleep(POLL_S)
            for key, _ in events:
                data = _read(key.fd)
                if not data:
                    selector.unregister(key.fd)
                    continue
                try:
                    ws.send(exec_data(self.outputs[key.fd], data))
                except Exception:
                    self.closed.set()
                    return None
            if self.proc.poll() is not None:  # what it wrote last is read first, within DRAIN_S
                exited_at = exited_at or time.monotonic()
                if not events or time.monotonic() - exited_at > DRAIN_S:
                    return _exit_status(self.proc.returncode)
        selector.close()
        return None

    # ---- ending ----

    def _end_processes(self) -> None:
        """SIGHUP every process of the session (its own, and those with its marker: inside a
        container, or gone to a session of their own), SIGKILL what is left after the grace."""
        if self.proc is None:
            return
        found = session_processes(self.proc.pid, f"{EXEC_MARKER}={self.order.session_id}")
        for process in found:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGHUP)
        if self.terminal is not None:
            with contextlib.suppress(OSError):
                os.close(self.terminal)  # hangs the terminal up too
            self.terminal = None
        _, alive = psutil.wait_procs(found, timeout=HANGUP_GRACE_S)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=HANGUP_GRACE_S)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=HANGUP_GRACE_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def session_processes(leader: int, marker: str) -> list[psutil.Process]:
    """The processes in ``leader``'s session or with ``marker`` in their environment."""
    wanted = marker.encode()
    found: list[psutil.Process] = []
    own = os.getpid()
    for process in psutil.process_iter():
        if process.pid == own:
            continue
        try:
            if os.getsid(process.pid) == leader or _has_marker(process.pid, wanted):
                found.append(process)
        except OSError:
            continue
    return found


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return marker in handle.read().split(b"\0")
    except OSError:
        return False


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, READ_SIZE)
    except OSError:  # EIO: every process holding the terminal's other side has closed it
        return b""


def _exit_status(returncode: int) -> tuple[int, int | None]:
    """(exit code, signal): a signal's death reads as 128 + its number, as shells say."""
    return (returncode, None) if returncode >= 0 else (128 - returncode, -returncode)


def set_size(fd: int, cols: int, rows: int) -> None:
    """The terminal's size (the foreground process group gets SIGWINCH)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _refusal(order: ExecOrder, exc: Exception) -> str:
    if isinstance(exc, LaunchRefused):
        return str(exc)
    return f"the command {order.argv[0]!r} could not be started here: {exc}"


def connect(connection: Connection, path: str) -> ClientConnection:
    """A WebSocket to the server, with the credentials and TLS settings of the agent's HTTP
    calls (``Connection.httpx_settings``). Of several servers, the first that takes the
    connection (the session lives in the server the user asked; docs/postgresql.md)."""
    urls = server_urls(connection.server) or [connection.server]
    for url in urls[:-1]:
        with contextlib.suppress(OSError):
            return _connect(connection, url, path)
    return _connect(connection, urls[-1], path)


def _connect(connection: Connection, server: str, path: str) -> ClientConnection:
    scheme, _, rest = server.rstrip("/").partition("://")
    secure = scheme == "https"
    context: ssl.SSLContext | None = None
    if isinstance(connection.verify, ssl.SSLContext):
        context = connection.verify
    elif secure:
        context = ssl.create_default_context()
        if not connection.verify:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return ws_connect(
        f"{'wss' if secure else 'ws'}://{rest}{path}",
        additional_headers=connection.headers,
        ssl=context,
        open_timeout=EXEC_ATTACH_S,
        close_timeout=2,
        compression=None,
    )
