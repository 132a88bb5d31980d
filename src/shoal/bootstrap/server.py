"""The server on this machine, as ``shoal cluster`` drives it: through the ``shoal`` commands
(``server init``, ``server start``, ``node token create``, ``node list``, ``node remove``) run with
``SHOAL_HOME`` set to the cluster's server home and ``--context local``, so the admin token and
the CA are the ones ``shoal server init`` wrote there, whatever context the user has chosen.

A server ``shoal cluster create`` starts is recorded in ``cluster-server.pid`` (pid and start
time, see ``hostctl``); ``shoal cluster delete`` stops only that one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.bootstrap import hostctl

SERVER_PIDFILE = "cluster-server.pid"
SERVER_LOG = "cluster-server.log"


class ServerProblem(Exception):
    """The local server could not be set up or asked (the message says which command and why)."""


def _tail(text: str, lines: int = 12) -> str:
    kept = text.strip().splitlines()[-lines:]
    return "\n".join(kept) if kept else "(no output)"


@dataclass(frozen=True)
class LocalServer:
    home: Path
    address: str
    port: int

    @property
    def pidfile(self) -> Path:
        return self.home / SERVER_PIDFILE

    @property
    def log(self) -> Path:
        return self.home / SERVER_LOG

    def shoal(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in _CLIENT_ENV}
        env["SHOAL_HOME"] = str(self.home)
        command = [sys.executable, "-m", "shoal", "--context", "local", *args]
        return subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )

    def _must(self, *args: str, timeout_s: float = 120.0) -> str:
        done = self.shoal(*args, timeout_s=timeout_s)
        if done.returncode != 0:
            shown = " ".join(a if not a.startswith("shoaljoin") else "TOKEN" for a in args)
            raise ServerProblem(
                f"`shoal {shown}` exited {done.returncode}:\n{_tail(done.stderr + done.stdout)}"
            )
        return done.stdout

    # ---- set up ----

    def initialised(self) -> bool:
        return (self.home / "pki" / "ca.crt").is_file() and (self.home / "admin.token").is_file()

    def init(self) -> None:
        self._must("server", "init", "--home", str(self.home), "--host", self.address)

    def answering(self) -> bool:
        with socket.socket(socket.AF_INET6 if ":" in self.address else socket.AF_INET) as sock:
            sock.settimeout(1.0)
            return sock.connect_ex((self.address, self.port)) == 0

    def started_pid(self) -> int | None:
        """The pid of the server ``cluster create`` started, if it still runs."""
        return hostctl.running_pid(str(self.pidfile))

    def start(self, timeout_s: float = 60.0) -> int:
        command = [sys.executable, "-m", "shoal", "server", "start", "--home", str(self.home)]
        command += ["--host", self.address, "--port", str(self.port)]
        pid, message = hostctl.launch(str(self.pidfile), str(self.log), str(self.home), command)
        if pid is None:
            raise ServerProblem(f"`shoal server start` {message}:\n{self._log_tail()}")
        deadline = time.monotonic() + timeout_s
        while not self.answering():
            if self.started_pid() is None or time.monotonic() > deadline:
                raise ServerProblem(
                    f"the server did not answer on {self.address}:{self.port} within "
                    f"{timeout_s:.0f}s:\n{self._log_tail()}"
                )
            time.sleep(0.2)
        return pid

    def _log_tail(self) -> str:
        try:
            return _tail(self.log.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 30.0) -> str:
        return hostctl.terminate(str(self.pidfile), grace_s)

    # ---- asking it ----

    def join_token(self) -> str:
        """A one-use join token (valid 30 minutes) from ``shoal node token create``."""
        printed = self._must("node", "token", "create", "--ttl", "30m", "--uses", "1").split()
        if "--token" not in printed or printed.index("--token") + 1 >= len(printed):
            raise ServerProblem(f"`shoal node token create` printed no --token: {printed!r}")
        return printed[printed.index("--token") + 1]

    def nodes(self) -> dict[str, dict[str, Any]]:
        listed = json.loads(self._must("node", "list", "-o", "json", timeout_s=30.0))
        return {node["name"]: node for node in listed}

    def node_state(self, name: str) -> str:
        node = self.nodes().get(name)
        return "ABSENT" if node is None else str(node["state"])

    def remove_node(self, name: str) -> None:
        self._must("node", "remove", name, "--force")


_CLIENT_ENV = ("SHOAL_URL", "SHOAL_TOKEN", "SHOAL_CONTEXT", "SHOAL_CA", "SHOAL_HOME")
