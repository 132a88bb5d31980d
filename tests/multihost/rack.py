"""A shoal cluster on namespace hosts: the server on host 1 (HTTPS, its own CA), an agent on each
other host, joined with a token as docs/cluster.md tells an admin to, and a CLI in the root
namespace that pins the CA. Every process is started in its host's namespace and ended by its
process group (the lab kills whatever is left in its namespaces when it is torn down)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.client import ShoalClient
from tests.envs import without_shoal
from tests.multihost.netns import Host, NetnsLab

SERVER_PORT = 8476
TASK_PORT_BASE = 20000  # each host is a machine of its own: the same task ports on every one


@dataclass
class Rack:
    lab: NetnsLab
    root: Path
    node_timeout_s: float
    kill_grace_s: float
    env: dict[str, str] = field(default_factory=dict)
    server: subprocess.Popen[bytes] | None = None
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    joined: dict[str, str] = field(default_factory=dict)  # what each node's join printed
    _admin: ShoalClient | None = None

    # ---- where things are ----

    @property
    def server_host(self) -> Host:
        return self.lab.host(1)

    @property
    def home(self) -> Path:
        return self.root / "server"

    @property
    def url(self) -> str:
        return f"https://{self.server_host.address}:{SERVER_PORT}"

    @property
    def ca(self) -> Path:
        return self.home / "pki" / "ca.crt"

    def node_host(self, node: str) -> Host:
        """Node ``n<i>`` lives on host ``i + 1``."""
        return self.lab.host(int(node.removeprefix("n")) + 1)

    def agent_home(self, node: str) -> Path:
        return self.root / node

    @property
    def admin(self) -> ShoalClient:
        if self._admin is None:
            token = (self.home / "admin.token").read_text().strip()
            self._admin = ShoalClient(self.url, token, timeout=10.0, ca=str(self.ca))
        return self._admin

    # ---- commands ----

    def shoal(
        self, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The CLI in the root namespace (the admin's machine), with the rack's context (or the
        shell environment ``env``: another user's)."""
        self.lab.require_route(self.server_host.address)
        return subprocess.run(
            [sys.executable, "-m", "shoal", *args],
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def on_host(self, host: Host, *args: str) -> subprocess.CompletedProcess[str]:
        """The CLI on a namespace host."""
        return self.lab.run(host, [sys.executable, "-m", "shoal", *args], env=self.env)

    def start_server(self) -> None:
        self.server = self.lab.spawn(
            self.server_host,
            [
                sys.executable,
                "-m",
                "shoal",
                "server",
                "start",
                "--home",
                str(self.home),
                "--host",
                self.server_host.address,
                "--port",
                str(SERVER_PORT),
                "--node-timeout",
                str(self.node_timeout_s),
                "--kill-grace",
                str(self.kill_grace_s),
            ],
            self.root / "server.log",
            env=self.env,
        )
        self.lab.wait_reachable(self.server_host.address, SERVER_PORT)

    def join_line(self, *options: str) -> list[str]:
        """`shoal node token create OPTIONS` on the admin's machine: the join command it prints."""
        made = self.shoal("node", "token", "create", *options)
        assert made.returncode == 0, made.stderr
        line = made.stdout.strip().splitlines()[-1]
        assert line.startswith(f"shoal agent join {self.url} --token "), line
        return shlex.split(line)[1:]

    def join(
        self, node: str, line: list[str], cpus: float = 1.0, address: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``address``: give the host's address with --address (else join picks one)."""
        host = self.node_host(node)
        return self.on_host(
            host,
            *line,
            "--name",
            node,
            *(("--address", host.address) if address else ()),
            "--home",
            str(self.agent_home(node)),
            "--cpus",
            f"{cpus:g}",
            "--memory",
            "2Gi",
            "--gpus",
            "0",
            "--port-base",
            str(TASK_PORT_BASE),
        )

    def start_agent(self, node: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``env``: the agent's environment, if not the rack's."""
        agent = self.lab.spawn(
            self.node_host(node),
            [sys.executable, "-m", "shoal", "agent", "run", "--home", str(self.agent_home(node))],
            self.root / f"{node}.log",
            env=self.env if env is None else env,
        )
        self.agents[node] = agent
        return agent

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """``kill -9`` of a process group, as a crash would."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    # ---- looking ----

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in self.admin.nodes()}

    def wait_for(self, what: Callable[[], bool], timeout_s: float, why: str) -> float:
        """Wait until ``what()``; returns the seconds it took."""
        began = time.monotonic()
        while time.monotonic() - began < timeout_s:
            if what():
                return time.monotonic() - began
            time.sleep(0.1)
        raise AssertionError(f"{why}: not within {timeout_s:.0f}s; {self.tail_logs()}")

    def wait_state(self, node: str, state: str, timeout_s: float) -> float:
        return self.wait_for(
            lambda: self.nodes().get(node, {}).get("state") == state,
            timeout_s,
            f"node {node} {state}",
        )

    def tail_logs(self) -> str:
        parts = []
        for log in sorted(self.root.glob("*.log")):
            parts.append(f"--- {log.name}:\n{log.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
        for agent in self.agents.values():
            self.lab.stop(agent)
        if self.server is not None:
            self.lab.stop(self.server)


def build_rack(
    lab: NetnsLab,
    root: Path,
    nodes: int,
    node_timeout_s: float = 8.0,
    kill_grace_s: float = 1.0,
    address: bool = True,
) -> Rack:
    """Initialise and start the server on host 1, then join and start ``nodes`` agents (each
    with ``--address`` its host's address, or with none if not ``address``)."""
    env = without_shoal(os.environ)  # but where and as whom the run's tasks run

    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"  # tasks: the venv's python
    env["SHOAL_CONFIG"] = str(root / "config.yaml")
    env["SHOAL_HOME"] = str(root / "cli-home")
    rack = Rack(lab, root, node_timeout_s, kill_grace_s, env)
    init = subprocess.run(
        [
            sys.executable,
            "-m",
            "shoal",
            "server",
            "init",
            "--home",
            str(rack.home),
            "--host",
            rack.server_host.address,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    rack.start_server()
    made = rack.shoal(
        "config",
        "set-context",
        "rack",
        "--server",
        rack.url,
        "--token-file",
        str(rack.home / "admin.token"),
        "--ca",
        str(rack.ca),
        "--use",
    )
    assert made.returncode == 0, made.stderr
    line = rack.join_line("--ttl", "10m", "--uses", str(nodes))
    for i in range(1, nodes + 1):
        joined = rack.join(f"n{i}", line, address=address)
        assert joined.returncode == 0, joined.stderr + joined.stdout
        rack.joined[f"n{i}"] = joined.stdout
        rack.start_agent(f"n{i}")
    for i in range(1, nodes + 1):
        rack.wait_state(f"n{i}", "READY", 30)
    return rack


def as_user(rack: Rack, name: str) -> dict[str, str]:
    """The environment of ``name``'s shell: a new user of the rack, with a context of their own
    holding their token (``<root>/<name>.token``)."""
    made = rack.shoal("user", "create", name, "-o", "json")
    assert made.returncode == 0, made.stderr
    token_file = rack.root / f"{name}.token"
    token_file.write_text(json.loads(made.stdout)["token"] + "\n")
    os.chmod(token_file, 0o600)
    env = {**rack.env, "SHOAL_CONFIG": str(rack.root / f"{name}.yaml")}
    done = rack.shoal(
        "config", "set-context", name, "--server", rack.url, "--token-file", str(token_file),
        "--ca", str(rack.ca), "--use", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return env
