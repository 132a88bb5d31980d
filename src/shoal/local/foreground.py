"""``shoal run``: one job in the foreground with no server left behind (like ``maro local run``).

A throw-away server and agent run inside this process on a temporary home and a free loopback
port; the job's output streams to the terminal; the exit code is the job's result.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

import httpx

from shoal.agent.identity import Connection
from shoal.agent.main import Agent
from shoal.agent.resources import local_nodes
from shoal.client import TERMINAL, ShoalClient, ShoalError
from shoal.local.supervisor import free_port
from shoal.server.app import ShoalServer, make_server, prepare
from shoal.server.settings import ServerSettings


@dataclass(frozen=True)
class RunOptions:
    nodes: int = 1
    cpus: float | None = None
    memory_mib: int | None = None
    gpus: int | None = None
    kill_grace_s: float = 5.0
    keep: bool = False
    port_base: int = 30000  # task ports: 1,000 per simulated node from here


class EmbeddedCluster:
    """A server (uvicorn in a thread) and an agent, both in this process, on a temporary home.

    Leaving the ``with`` block, however it is left (the job's end, an error, an interrupting
    signal), stops the agent (its tasks get SIGTERM, then SIGKILL after the grace) and the server,
    and removes the home unless ``keep``. A failure while starting cleans up the same way."""

    def __init__(self, options: RunOptions, check: Callable[[], None] = lambda: None) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="shoal-run-"))
        self.options = options
        self.check = check  # between start-up steps: raises to abandon the start (a signal)
        self.server: ShoalServer | None = None
        self.thread: threading.Thread | None = None
        self.agent: Agent | None = None
        self._client: ShoalClient | None = None

    @property
    def client(self) -> ShoalClient:
        assert self._client is not None, "the embedded cluster is not started"
        return self._client

    def __enter__(self) -> EmbeddedCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        options = self.options
        settings = ServerSettings(
            home=self.home,
            port=free_port(),
            kill_grace_s=options.kill_grace_s,
            scheduler_interval_s=0.5,
            # one job on a throw-away server: a thread starts at once, a process takes ~0.8 s
            scheduler="thread",
        )
        self.check()
        self.server = make_server(prepare(settings), log_level="error")
        self.check()
        self.thread = threading.Thread(target=self.server.run, name="shoal-run-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the embedded server did not start")
            self.check()
            time.sleep(0.02)
        self._client = ShoalClient(settings.url, (self.home / "admin.token").read_text().strip())
        nodes = local_nodes(
            options.nodes,
            options.cpus,
            options.memory_mib,
            options.gpus,
            port_base=options.port_base,
        )
        token = (self.home / "agent.token").read_text().strip()
        self.agent = Agent(
            Connection.bearer(settings.url, token), self.home / "agent", nodes, "shoal-run"
        )
        self.agent.start()
        while not self.client.nodes():
            self.check()
            time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the agent (and its tasks) and the server; remove the home unless ``keep``."""
        try:
            if self.agent is not None:
                self.agent.stop(self.options.kill_grace_s)
            if self.server is not None:
                self.server.close()
            if self.thread is not None:
                self.thread.join(timeout=10)
            if self._client is not None:
                self._client.close()
        finally:
            if not self.options.keep:
                shutil.rmtree(self.home, ignore_errors=True)

    def stop_job(self, job_id: str) -> dict[str, object] | None:
        """Ask the server to stop the job and wait (bounded) until it has; None if it could not
        say (the agent's own stop then ends whatever is left)."""
        try:
            self.client.stop(job_id)
            return self.client.wait(job_id, timeout_s=self.options.kill_grace_s + 10, poll_s=0.05)
        except (ShoalError, httpx.HTTPError, TimeoutError):
            return None


class Interrupted(BaseException):
    """A signal asked ``shoal run`` to stop (a BaseException, like KeyboardInterrupt, so that
    nothing catching ``Exception`` swallows it)."""

    def __init__(self, signo: int) -> None:
        super().__init__(signal.Signals(signo).name)
        self.signo = signo

    @property
    def name(self) -> str:
        return signal.Signals(self.signo).name


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalStop:
    """While inside, the first SIGINT, SIGTERM or SIGHUP is noted, and ``check()`` (called by the
    main thread between steps: never from inside a lock, a request or a migration) then raises
    ``Interrupted``, unless disarmed (the cleanup has begun). Every later signal only says that
    the stop is under way, so the cleanup is never cut short. ``received``: the first signal."""

    def __init__(self, note: TextIO = sys.stderr) -> None:
        self.note = note
        self.armed = True
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signo: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signo
            return
        self.note.write(f"got {signal.Signals(signo).name}: already stopping, please wait\n")
        self.note.flush()

    def check(self) -> None:
        """Raise ``Interrupted`` if a stop signal came while armed (once)."""
        if self.armed and self.received is not None:
            self.armed = False
            raise Interrupted(self.received)

    def sleep(self, seconds: float) -> None:
        """Wait up to ``seconds`` in small steps, returning early (by raising) on a signal."""
        deadline = time.monotonic() + seconds
        while True:
            self.check()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.02))

    def disarm(self) -> None:
        self.armed = False

    def __enter__(self) -> SignalStop:
        self._previous = {signo: signal.signal(signo, self._handle) for signo in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for signo, handler in self._previous.items():
            signal.signal(signo, handler)  # type: ignore[arg-type]


def stream_until_done(
    client: ShoalClient,
    job_id: str,
    out: TextIO = sys.stdout,
    pause: Callable[[float], None] = time.sleep,
) -> dict[str, object]:
    """Print every task's stdout and stderr as it arrives; return the finished job (``pause``
    waits between polls: ``SignalStop.sleep`` ends the wait on a stop signal)."""
    offsets: dict[tuple[str, int, int, str], int] = {}
    while True:
        job = client.job(job_id)
        prefix = len(job["tasks"]) > 1
        finished = job["state"] in TERMINAL
        all_read = True
        for task in job["tasks"]:
            for stream in ("stdout", "stderr"):
                key = (task["role"], task["index"], task["attempt"], stream)
                chunk = client.logs(
                    job_id, task["role"], task["index"], stream, offsets.get(key, 0)
                )
                offsets[key] = chunk["nextOffset"]
                all_read &= bool(chunk["complete"])
                _write(out, chunk["data"], f"[{task['role']}/{task['index']}] " if prefix else "")
        if finished and all_read:
            return job
        pause(0.1)


def _write(out: TextIO, text: str, prefix: str) -> None:
    if not text:
        return
    if prefix:
        text = "".join(prefix + line for line in text.splitlines(keepends=True))
    out.write(text)
    out.flush()
