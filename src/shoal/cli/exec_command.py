"""``shoal job exec`` (a command in a running task's environment, over a WebSocket) and ``shoal job
exec-sessions`` (their audit log). docs/terminal.md has the whole path and the framing.

The exit status is the remote command's (128 + N when a signal N ended it); a refusal (not
allowed, no such job, the task is not running, the agent did not attach) prints its reason and
exits 1, as other commands do when the server says no."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import typer

from shoal.cli.columns import Column, table_text, terminal_width
from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.cli.render import console

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from shoal.client import Endpoint

STDIN, STDOUT, STDERR = 0, 1, 2  # the channels (shoal.protocol.EXEC_*; no pydantic at start-up)
REFUSED = 1  # the exit status of a refusal, as for the other commands
RECV_S = 0.5  # how long a wait for the server lasts between checks for signals


def register(job_app: typer.Typer) -> None:
    """Add ``exec`` and ``exec-sessions`` to ``shoal job``."""
    job_app.command("exec")(exec_in_task)
    job_app.command("exec-sessions")(list_sessions)


def exec_in_task(
    job: str = typer.Argument(..., help="The job (id or name)."),
    command: list[str] = typer.Argument(
        None, help="The command and its arguments, after `--` (none: a shell, bash or sh)."
    ),
    task: str | None = typer.Option(
        None, "--task", help="ROLE/INDEX (default: index 0 of the job's first role)."
    ),
    interactive: bool = typer.Option(False, "--stdin", "-i", help="Pass stdin to the command."),
    tty: bool = typer.Option(False, "--tty", "-t", help="Run it in a terminal (raw mode here)."),
) -> None:
    """Run a command in a running task's environment: its node, directory, env and container.

    shoal job exec train -- nvidia-smi; shoal job exec -it train --task worker/1 (a shell)."""
    from shoal.client import ShoalError, discover

    if task is not None and not _task_ok(task):
        raise typer.BadParameter(
            f"expected ROLE/INDEX (e.g. worker/0), got {task!r}", param_hint="--task"
        )
    try:
        endpoint = discover()
    except ShoalError as exc:
        raise fail(exc.message) from None
    cols, rows = _terminal_size()
    query: list[tuple[str, str]] = [("tty", "true" if tty else "false")]
    query += [("cols", str(cols)), ("rows", str(rows))] if tty else []
    query += [("task", task)] if task else []
    query += [("cmd", arg) for arg in command or []]
    path = f"/api/v1/jobs/{quote(job, safe='')}/exec?{urlencode(query)}"
    websocket = _connect(endpoint, path)
    raise typer.Exit(ExecTerminal(websocket, interactive, tty).run())


def _task_ok(task: str) -> bool:
    role, _, index = task.partition("/")
    return bool(role) and (index or "0").isdigit()


def _terminal_size() -> tuple[int, int]:
    for fd in (1, 0, 2):
        with contextlib.suppress(OSError):
            size = os.get_terminal_size(fd)
            if size.columns > 0 and size.lines > 0:  # a new pseudo-terminal says 0x0
                return min(size.columns, 1000), min(size.lines, 1000)
    return 80, 24


def _connect(endpoint: Endpoint, path: str) -> ClientConnection:
    """The WebSocket, with the token and the TLS checks of the CLI's HTTP calls."""
    import ssl

    from websockets.exceptions import InvalidHandshake
    from websockets.sync.client import connect

    from shoal.client import ServerUnavailable, UntrustedServer
    from shoal.client.transport import _untrusted

    base = endpoint.url.split(",")[0].strip().rstrip("/")  # of several servers, the first
    secure = base.startswith("https://")
    url = ("wss://" + base[8:] if secure else "ws://" + base.removeprefix("http://")) + path
    headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
    context = None
    if secure:
        try:
            context = ssl.create_default_context(cafile=endpoint.ca)
        except (OSError, ssl.SSLError) as exc:
            raise fail(f"the CA file {endpoint.ca} cannot be loaded ({exc})") from None
    try:
        return connect(url, additional_headers=headers, ssl=context, compression=None)
    except InvalidHandshake as exc:
        raise fail(f"{endpoint.url} refused the WebSocket: {exc}") from None
    except OSError as exc:
        detail = _untrusted(exc)
        if detail is not None:
            raise fail(UntrustedServer(endpoint.url, detail, endpoint.ca).message) from None
        raise fail(ServerUnavailable(endpoint.url).message) from None


class Stopped(Exception):
    """A signal asked this command to end."""

    def __init__(self, signo: int) -> None:
        super().__init__(signo)
        self.signo = signo


class ExecTerminal:
    """This side of a session: stdin (``-i``) and window sizes (``-t``) out, output in."""

    def __init__(self, websocket: ClientConnection, interactive: bool, tty: bool) -> None:
        self.websocket = websocket
        self.interactive = interactive
        self.tty = tty
        self.resized = threading.Event()

    def run(self) -> int:
        """The remote command's exit status (``REFUSED`` for a refusal)."""
        with self._signals(), _raw_terminal(self.tty and os.isatty(0)):
            if self.interactive:
                threading.Thread(target=self._forward_stdin, daemon=True).start()
            else:
                self._send(json.dumps({"type": "eof"}))
            if self.tty:
                threading.Thread(target=self._forward_sizes, daemon=True).start()
            try:
                return self._receive()
            except KeyboardInterrupt:
                return 128 + signal.SIGINT
            except Stopped as stop:
                return 128 + stop.signo
            finally:
                self.resized.set()
                with contextlib.suppress(Exception):
                    self.websocket.close()

    def _receive(self) -> int:
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                message = self.websocket.recv(timeout=RECV_S)
            except TimeoutError:
                continue
            except ConnectionClosed as exc:
                return self._closed(exc)
            if isinstance(message, bytes):
                _write(message)
                continue
            control = _control(message)
            if control.get("type") == "exit":
                code = control.get("code")
                return code if isinstance(code, int) else REFUSED
            if control.get("type") == "error":
                _say(f"error: {control.get('message') or control.get('code')}")
                return REFUSED

    def _closed(self, exc: Exception) -> int:
        """The server closed without an exit status or an error: say how."""
        received = getattr(exc, "rcvd", None)
        code = getattr(received, "code", None)
        reason = getattr(received, "reason", "") or "no reason given"
        _say(f"error: the session ended without the command's exit status ({code}: {reason})")
        return REFUSED

    def _send(self, message: str | bytes) -> bool:
        try:
            self.websocket.send(message)
        except Exception:  # closed: the receiving side says why
            return False
        return True

    def _forward_stdin(self) -> None:
        while True:
            try:
                data = os.read(0, 1 << 16)
            except OSError:
                data = b""
            if not data:
                self._send(json.dumps({"type": "eof"}))
                return
            if not self._send(bytes((STDIN,)) + data):
                return

    def _forward_sizes(self) -> None:
        while True:
            self.resized.wait()
            self.resized.clear()
            if self.websocket.close_code is not None:
                return
            cols, rows = _terminal_size()
            self._send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGWINCH sends the new size (from a thread: a handler never sends itself); SIGTERM
        and SIGHUP end the session (128 + the signal), restoring the terminal on the way out."""

        def winch(_: int, __: FrameType | None) -> None:
            self.resized.set()

        def stop(signo: int, __: FrameType | None) -> None:
            raise Stopped(signo)

        handlers: dict[signal.Signals, Callable[[int, FrameType | None], None]] = {
            signal.SIGTERM: stop,
            signal.SIGHUP: stop,
        }
        if self.tty:
            handlers[signal.SIGWINCH] = winch
        saved = {signo: signal.signal(signo, handler) for signo, handler in handlers.items()}
        try:
            yield
        finally:
            for signo, handler in saved.items():
                signal.signal(signo, handler)


@contextlib.contextmanager
def _raw_terminal(enabled: bool) -> Iterator[None]:
    """This terminal in raw mode (keys go to the remote terminal as typed), restored on every
    way out."""
    if not enabled:
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(0)
    try:
        tty.setraw(0, termios.TCSADRAIN)  # not TCSAFLUSH: keys typed already are kept
        yield
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)


def _write(frame: bytes) -> None:
    stream = sys.stderr if frame[:1] == bytes((STDERR,)) else sys.stdout
    stream.buffer.write(frame[1:])
    stream.buffer.flush()


def _say(text: str) -> None:
    sys.stderr.write(text + ("\r\n" if os.isatty(2) else "\n"))
    sys.stderr.flush()


def _control(text: str) -> dict[str, Any]:
    try:
        message = json.loads(text)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


# ---- the audit log ----

_COLUMNS = [
    Column("STARTED"),
    Column("DURATION", right=True, drop=3),
    Column("USER"),
    Column("JOB"),
    Column("TASK"),
    Column("NODE", drop=2),
    Column("EXIT", right=True),
    Column("END", drop=1),
    Column("COMMAND", drop=4),
]


@api_errors
def list_sessions(
    job: str | None = typer.Option(None, "--job", help="Only this job's sessions (its id)."),
    user: str | None = typer.Option(None, "--user", help="Only this user's (admins)."),
    limit: int = typer.Option(20, "--limit", "-n", min=1, max=1000, help="At most this many."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Who ran `shoal job exec` or opened a terminal, where, when, for how long, how it ended
    (newest first; yours, or everyone's for an admin)."""
    rows = client().exec_sessions(limit, job, user)
    if emit(rows, output):
        return
    if not rows:
        console.print("no exec sessions yet (`shoal job exec JOB -- CMD` opens one)")
        return
    cells = [_cells(row) for row in rows]
    width = None if output is OutputFormat.WIDE else terminal_width()
    typer.echo(table_text(_COLUMNS, cells, width))


def _cells(row: dict[str, Any]) -> list[str]:
    duration = row.get("durationS")
    exit_code = row.get("exitCode")
    return [
        datetime.fromtimestamp(row["startedAt"]).strftime("%Y-%m-%d %H:%M:%S"),
        "open" if duration is None else f"{duration:.1f}s",
        row["user"],
        row["job"],
        f"{row['role']}/{row['index']}",
        row["node"],
        "-" if exit_code is None else str(exit_code),
        row.get("endReason") or "open",
        " ".join(row["argv"]) + (" (tty)" if row.get("tty") else ""),
    ]
