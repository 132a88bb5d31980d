"""``shoal run``: one job in the foreground with no server left behind (like ``maro local run``).

A throw-away server and agent run inside this process on a temporary home and a free loopback
port; the job's output streams to the terminal; the exit code is the job's result.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from shoal.agent.main import Agent
from shoal.agent.resources import local_nodes
from shoal.client import TERMINAL, ShoalClient
from shoal.local.supervisor import free_port
from shoal.server.app import make_server, prepare
from shoal.server.settings import ServerSettings


@dataclass(frozen=True)
class RunOptions:
    nodes: int = 1
    cpus: float | None = None
    memory_mib: int | None = None
    gpus: int | None = None
    kill_grace_s: float = 5.0
    keep: bool = False


class EmbeddedCluster:
    """A server (uvicorn in a thread) and an agent, both in this process."""

    def __init__(self, options: RunOptions) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="shoal-run-"))
        self.options = options
        port = free_port()
        settings = ServerSettings(
            home=self.home, port=port, kill_grace_s=options.kill_grace_s, scheduler_interval_s=0.5
        )
        self.server = make_server(prepare(settings), log_level="error")
        self.thread = threading.Thread(target=self.server.run, name="shoal-run-server", daemon=True)
        nodes = local_nodes(options.nodes, options.cpus, options.memory_mib, options.gpus)
        token = (self.home / "agent.token").read_text().strip()
        self.agent = Agent(settings.url, token, self.home / "agent", nodes, "shoal-run")
        self.client = ShoalClient(settings.url, (self.home / "admin.token").read_text().strip())

    def __enter__(self) -> EmbeddedCluster:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the embedded server did not start")
            time.sleep(0.02)
        self.agent.start()
        while not self.client.nodes():
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.agent.stop(self.options.kill_grace_s)
        self.server.close()
        self.thread.join(timeout=10)
        self.client.close()
        if not self.options.keep:
            shutil.rmtree(self.home, ignore_errors=True)


def stream_until_done(
    client: ShoalClient, job_id: str, out: TextIO = sys.stdout
) -> dict[str, object]:
    """Print every task's stdout and stderr as it arrives; return the finished job."""
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
        time.sleep(0.1)


def _write(out: TextIO, text: str, prefix: str) -> None:
    if not text:
        return
    if prefix:
        text = "".join(prefix + line for line in text.splitlines(keepends=True))
    out.write(text)
    out.flush()
