"""``shoal up`` / ``shoal down``: start and stop a local server and agent as background processes.

Each runs in its own session, its PID recorded in ``$SHOAL_HOME/run.json``; ``down`` signals exactly
those process groups (never anything found by name), agent first so it can stop its tasks.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from shoal.client import ShoalClient

# shoal.server (3 s of imports) is imported by start_local only: `shoal down` does not need it

RUN_FILE = "run.json"


@dataclass(frozen=True)
class UpOptions:
    home: Path
    port: int = 8476
    host: str = "127.0.0.1"
    nodes: int = 1
    cpus: float | None = None
    memory_mib: int | None = None
    gpus: int | None = None
    gpu_type: str | None = None
    kill_grace_s: float = 10.0
    port_base: int = 20000  # task ports: 1,000 per simulated node from here
    node_timeout_s: float = 30.0
    # ``shoal kubernetes agent`` options: the nodes are a Kubernetes cluster's (None: simulated)
    kubernetes: tuple[str, ...] | None = None
    proxy_port: int | None = None  # the task proxy's (docs/proxy.md); None: port + 1, or any


@dataclass(frozen=True)
class RunInfo:
    url: str
    server_pid: int
    agent_pid: int
    home: str
    nodes: int
    started_at: float


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def read_run(home: Path) -> RunInfo | None:
    path = home / RUN_FILE
    if not path.exists():
        return None
    try:
        return RunInfo(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"  # PID 1 here may not reap: a zombie is dead
    except (FileNotFoundError, IndexError):
        return False


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "shoal", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_local(options: UpOptions, timeout_s: float = 60.0) -> RunInfo:
    """Prepare the store and tokens here, then start the server and the agent side by side."""
    home = options.home
    port = options.port or free_port(options.host)
    if port_in_use(options.host, port):
        raise RuntimeError(f"port {port} on {options.host} is in use; pick another with --port")
    url = f"http://{options.host}:{port}"
    proxy_port = _proxy_port(options, port)
    kubernetes = options.kubernetes is not None
    from shoal.server.app import prepare  # noqa: PLC0415 - see the imports above
    from shoal.server.settings import ServerSettings  # noqa: PLC0415

    settings = ServerSettings(home=home, host=options.host, port=port, kubernetes=kubernetes)
    prepare(settings).db.dispose()
    server_args = [
        "server",
        "--home",
        str(home),
        "--host",
        options.host,
        "--port",
        str(port),
        "--kill-grace",
        str(options.kill_grace_s),
        "--node-timeout",
        str(options.node_timeout_s),
        "--proxy-port",
        str(proxy_port),
        *(["--proxy-port-fallback"] if not options.proxy_port else []),
        *(["--kubernetes", *_server_kubernetes_args(options.kubernetes)] if kubernetes else []),
    ]
    server = _spawn(server_args, home / "server.log")
    agent = _spawn(_agent_args(options, url), home / "agent.log")
    info = RunInfo(url, server.pid, agent.pid, str(home), options.nodes, time.time())
    (home / RUN_FILE).write_text(json.dumps(asdict(info)))
    client = ShoalClient(url, None, timeout=2.0)
    _wait(client.health, timeout_s, server, "the server did not start", home / "server.log")
    admin = ShoalClient(url, (home / "admin.token").read_text().strip(), timeout=5.0)
    if kubernetes:  # as many nodes as the cluster has: wait for the agent's first report
        _wait(
            lambda: len(admin.nodes()) > 0,
            timeout_s,
            agent,
            "the Kubernetes agent registered no node (does the cluster have Nodes?)",
            home / "agent.log",
        )
        info = RunInfo(url, server.pid, agent.pid, str(home), len(admin.nodes()), info.started_at)
        (home / RUN_FILE).write_text(json.dumps(asdict(info)))
        return info
    _wait(
        lambda: _ready_nodes(admin) >= options.nodes,
        timeout_s,
        agent,
        "the agent did not register its nodes",
        home / "agent.log",
    )
    return info


def _proxy_port(options: UpOptions, port: int) -> int:
    """The task proxy's port: as asked (taken: an error naming --proxy-port), else port + 1 when
    free, else any free port (0: the server picks; `shoal status` shows it). A default port
    taken between this check and the server's bind also gives way to any free port
    (--proxy-port-fallback)."""
    if options.proxy_port:
        if port_in_use(options.host, options.proxy_port):
            raise RuntimeError(
                f"port {options.proxy_port} on {options.host} is in use; pick another with "
                "--proxy-port"
            )
        return options.proxy_port
    if options.proxy_port is None and options.port and not port_in_use(options.host, port + 1):
        return port + 1
    return 0


def _agent_args(options: UpOptions, url: str) -> list[str]:
    if options.kubernetes is not None:
        token = str(options.home / "kubernetes.token")
        return ["kubernetes", "agent", "--server", url, "--token-file", token, *options.kubernetes]
    args = [
        "agent",
        "--server",
        url,
        "--home",
        str(options.home / "agent"),
        "--token-file",
        str(options.home / "agent.token"),
        "--nodes",
        str(options.nodes),
        "--port-base",
        str(options.port_base),
    ]
    for flag, value in (
        ("--cpus", options.cpus),
        ("--memory", options.memory_mib),
        ("--gpus", options.gpus),
        ("--gpu-type", options.gpu_type),
    ):
        if value is not None:
            args += [flag, str(value)]
    return args


def _server_kubernetes_args(agent_args: tuple[str, ...] | None) -> list[str]:
    """The agent's --kubeconfig and --namespace, which the server reads the cluster with too
    (OpenPAI's /api/v2/kubernetes)."""
    args = list(agent_args or ())
    picked: list[str] = []
    for flag in ("--kubeconfig", "--namespace"):
        if flag in args[:-1]:
            picked += [flag, args[args.index(flag) + 1]]
    return picked


def _ready_nodes(client: ShoalClient) -> int:
    return sum(1 for n in client.nodes() if n["state"] == "READY")


def _wait(
    ready: object, timeout_s: float, proc: subprocess.Popen[bytes], what: str, log: Path
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{what} (exit code {proc.returncode}); {log}:\n{tail}")
        try:
            if ready():  # type: ignore[operator]
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} within {timeout_s:.0f}s; see {log}")


def _stop_group(pid: int, timeout_s: float) -> bool:
    """SIGTERM the process group, wait, then SIGKILL it; True if it ended on SIGTERM."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return False


def stop_local(home: Path, grace_s: float = 15.0) -> RunInfo | None:
    info = read_run(home)
    if info is None:
        return None
    _stop_group(info.agent_pid, grace_s)  # the agent stops its tasks first
    _stop_group(info.server_pid, 10.0)
    (home / RUN_FILE).unlink(missing_ok=True)
    (home / "server.json").unlink(missing_ok=True)
    return info
