"""The servers ``bench/api.py`` measures: a real ``shoal server`` process (its scheduler in a
process of its own or in a thread) or the API alone, on a free loopback port in a given home,
with its CPU time and memory read from ``/proc``.

    .venv/bin/python bench/api_server.py HOME PORT    # the API alone, as Server starts it
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import uvicorn

from shoal.local.supervisor import alive, free_port
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from shoal.store.db import record_store, store_url


class Server:
    """A ``shoal server`` process (``scheduler``: "process" or "thread"; None: the API alone) on
    a free loopback port, in ``home``."""

    def __init__(
        self,
        home: Path,
        scheduler: str | None = "process",
        store: str | None = None,
        node_timeout: float = 3600,
    ) -> None:
        self.home = home
        self.port = free_port()
        if store is not None:  # the home's store (as `shoal server init --store` records it)
            home.mkdir(parents=True, exist_ok=True)
            record_store(home, store_url(store))
        prepare(ServerSettings(home=home, port=self.port, node_timeout_s=node_timeout)).db.dispose()
        if scheduler is not None:
            args = ["-m", "shoal", "server", "--home", str(home), "--port", str(self.port)]
            args += ["--node-timeout", f"{node_timeout:g}", "--scheduler", scheduler]
        else:
            args = [str(Path(__file__).resolve()), str(home), str(self.port)]
        log = open(home / "server.log", "ab")  # noqa: SIM115  kept open by the child
        self.proc = subprocess.Popen(
            [sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.token = (home / "admin.token").read_text().strip()
        self.agent_token = (home / "agent.token").read_text().strip()
        self._wait_healthy()

    def _wait_healthy(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited; see {self.home / 'server.log'}")
            try:
                if self.get("/api/v1/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError("the server did not answer")

    def request(self, method: str, path: str, body: Any = None, agent: bool = False) -> Any:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        headers = {"Authorization": f"Bearer {self.agent_token if agent else self.token}"}
        if agent:
            headers[PROTOCOL_HEADER] = str(PROTOCOL_VERSION)
        data = None if body is None else json.dumps(body)
        if data is not None:
            headers["Content-Type"] = "application/json"
        connection.request(method, path, data, headers)
        answer = connection.getresponse()
        payload = answer.read()
        connection.close()
        return answer.status, json.loads(payload) if payload else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def scheduler_pid(self) -> int | None:
        """The scheduler process (a child of the server), if it runs in one."""
        for child in psutil.Process(self.proc.pid).children():
            if "shoal.server.scheduler_main" in child.cmdline():
                return int(child.pid)
        return None

    def scheduler_cpu_s(self) -> float:
        pid = self.scheduler_pid()
        return 0.0 if pid is None else _cpu_s(pid)

    def cpu_s(self) -> float:
        return _cpu_s(self.proc.pid)

    def memory_mib(self, pid: int | None = None) -> tuple[float, float]:
        """Resident memory now and its peak (VmRSS, VmHWM), MiB, of the server (or ``pid``)."""
        path = Path(f"/proc/{pid or self.proc.pid}/status")
        status = dict(line.split(":", 1) for line in path.read_text().splitlines())
        return tuple(int(status[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=30)
        assert not alive(self.proc.pid)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_api_only(home: Path, port: int) -> None:
    """The server's app without its scheduler thread, as ``shoal server`` serves it otherwise."""
    ctx = prepare(ServerSettings(home=home, port=port, node_timeout_s=3600))
    app = create_app(ctx, run_scheduler=False)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def register_node(server: Server, cores: int) -> None:
    node = {
        "name": "node-0",
        "address": "127.0.0.1",
        "cpu_millis": cores * 1000,
        "memory_mib": 64 * 1024,
        "gpu_indices": [],
        "port_low": 20000,
        "port_high": 21000,
    }
    status, body = server.request(
        "POST", "/api/v1/agent/report", {"agent_id": "bench", "nodes": [node]}, agent=True
    )
    assert status == 200, body


if __name__ == "__main__":
    serve_api_only(Path(sys.argv[1]), int(sys.argv[2]))
