"""``shoal up``, ``down``, ``status``, ``node list|cordon|drain|uncordon|events``, and the
``server``/``agent`` processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import typer

from shoal.cli.common import (
    OUTPUT_OPTION,
    SCHEDULER_OPTION,
    OutputFormat,
    SchedulerPlace,
    api_errors,
    client,
    emit,
    fail,
)
from shoal.cli.kubernetes_commands import (
    KubernetesArgs,
    kubeconfig_option,
    namespace_option,
)
from shoal.cli.kubernetes_commands import options as k8s_options
from shoal.cli.render import console, err_console, new_table
from shoal.client import ShoalError
from shoal.paths import DEFAULT_PORT, default_home
from shoal.spec import units

# shoal.local and shoal.server are imported inside `up`, `down`, `server` and `agent` only: the
# other commands are clients and start without them (tests/cli/test_cli_imports.py).

node_app = typer.Typer(help="Nodes of the cluster.", no_args_is_help=True)


def memory_option_mib(value: str | None) -> int | None:
    """A --memory option in MiB (None: not given), or a usage error naming the option."""
    if value is None:
        return None
    try:
        return units.memory_mib(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; {units.MEMORY_HINT}", param_hint="--memory") from None


def preferred_port() -> int:
    """``$SHOAL_DEFAULT_PORT``, else 8476: the port `shoal up` tries when --port is not given."""
    text = os.environ.get("SHOAL_DEFAULT_PORT", "")
    if not text:
        return DEFAULT_PORT
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise fail(f"$SHOAL_DEFAULT_PORT must be a port number (1-65535), not {text!r}")
    return int(text)


def choose_port(port: int | None, host: str = "127.0.0.1") -> int:
    """An explicit --port must be free (0: any free port); the default falls back to a free one."""
    from shoal.local.supervisor import free_port, port_in_use

    if port == 0:
        return free_port(host)
    if port is not None:
        if port_in_use(host, port):
            raise fail(
                f"--port {port}: port {port} on {host} is in use by another process; pick a "
                "free one with --port N, or leave --port out to get a free port"
            )
        return port
    wanted = preferred_port()
    if not port_in_use(host, wanted):
        return wanted
    chosen = free_port(host)
    console.print(f"port {wanted} is in use; using port {chosen} instead (--port N to choose)")
    return chosen


def up(
    port: int | None = typer.Option(
        None,
        "--port",
        help="Server port on 127.0.0.1 (0: any free port). Default 8476 ($SHOAL_DEFAULT_PORT), "
        "or a free port if that one is taken.",
    ),
    nodes: int = typer.Option(1, "--nodes", min=1, max=64, help="Simulated nodes."),
    cpus: float | None = typer.Option(None, "--cpus", min=0.001, help="Cores per node."),
    memory: str | None = typer.Option(None, "--memory", help="Memory per node: MiB or 4Gi."),
    gpus: int | None = typer.Option(None, "--gpus", min=0, max=64, help="GPUs per node."),
    gpu_type: str | None = typer.Option(None, "--gpu-type", help="GPU type of every node."),
    kill_grace: float = typer.Option(10.0, "--kill-grace", min=0, help="SIGTERM→SIGKILL (s)."),
    foreground: bool = typer.Option(False, "--foreground", help="Stay attached; Ctrl-C stops."),
    port_base: int = typer.Option(
        20000, "--port-base", min=1024, max=64000, help="First task port (1,000 per node)."
    ),
    kubernetes: bool = typer.Option(
        False,
        "--kubernetes",
        help="Nodes from a Kubernetes cluster instead of simulated ones: jobs run as Pods.",
    ),
    kubeconfig: str | None = kubeconfig_option(),
    namespace: str = namespace_option(),
    proxy_port: int | None = typer.Option(
        None,
        "--proxy-port",
        min=0,
        max=65535,
        help="The task proxy's port (docs/proxy.md). Default: --port + 1 if free, else any.",
    ),
) -> None:
    """Start a local cluster: a server and an agent running N simulated nodes (or, with
    --kubernetes, the nodes of a Kubernetes cluster)."""
    from shoal.client import ShoalClient
    from shoal.local.supervisor import UpOptions, read_run, start_local, stop_local

    home = default_home()
    running = read_run(home)
    if running is not None and ShoalClient(running.url, None, timeout=5.0).health():
        console.print(f"shoal is already running at {running.url} (stop it with `shoal down`)")
        return
    k8s_argv: tuple[str, ...] | None = None
    if kubernetes:
        args = KubernetesArgs(kubeconfig=kubeconfig, namespace=namespace)
        k8s_options(args)  # a typo in an option is said here, before anything starts
        k8s_argv = tuple(args.argv())
    elif kubeconfig is not None or namespace != "default":
        raise fail("--kubeconfig and --namespace go with --kubernetes")
    options = UpOptions(
        home=home,
        kubernetes=k8s_argv,
        port=choose_port(port),
        nodes=nodes,
        cpus=cpus,
        memory_mib=memory_option_mib(memory),
        gpus=gpus,
        gpu_type=gpu_type,
        kill_grace_s=kill_grace,
        port_base=port_base,
        proxy_port=proxy_port,
    )
    with console.status("starting the server and the agent..."):
        try:
            info = start_local(options)
        except RuntimeError as exc:
            stop_local(home)
            raise fail(str(exc)) from None
    where = f"{info.nodes} Kubernetes node(s)" if kubernetes else f"{nodes} node(s)"
    console.print(f"shoal is up at {info.url} with {where}; state in {home}")
    console.print(f"admin token: {home / 'admin.token'} (mode 0600)")
    _note_proxy(info.url, home)
    _note_task_users()
    _note_other_target(home)
    if foreground:
        _stay_attached(home)


def _note_proxy(url: str, home: Path) -> None:
    """Where tasks' labelled ports are served (docs/proxy.md)."""
    from shoal.client import ShoalClient

    with contextlib.suppress(ShoalError, OSError):
        token = (home / "admin.token").read_text().strip()
        port = ShoalClient(url, token, timeout=5.0).cluster().get("proxyPort")
        if port:
            host = url.split("://", 1)[-1].rsplit(":", 1)[0]
            console.print(
                f"tasks' ports: http://{host}:{port}/proxy/JOB/ROLE/INDEX/LABEL/ (docs/proxy.md)",
                markup=False,
                highlight=False,
            )


def _note_task_users() -> None:
    """Say whose uid tasks run as, and warn when that uid cannot run this Python."""
    from shoal.agent.task_users import TaskUsers, interpreter_reachable

    try:
        users = TaskUsers.default()
    except ValueError as exc:
        err_console.print(f"warning: {exc}", markup=False, highlight=False)
        return
    console.print(users.describe() + " (docs/security.md)", markup=False, highlight=False)
    if users.separate and not interpreter_reachable():
        err_console.print(
            f"warning: tasks cannot reach this Python ({sys.prefix}): jobs that run it will "
            "fail. Use a Python outside root's home (the Makefile builds .venv from "
            "/usr/bin/python3), or, on a machine only you use, SHOAL_TASK_USERS=agent shoal up",
            markup=False,
            highlight=False,
        )


def _note_other_target(home: Path) -> None:
    """Say so when the CLI would talk to another server than the one just started."""
    from shoal.client.config import resolve

    try:
        target = resolve()
    except ShoalError:
        return
    if target.context != "local":
        err_console.print(
            f"note: the CLI talks to {target.url} (from {target.url_source}), not to this "
            "cluster; use `--context local` or `shoal config use-context local`"
        )


def _stay_attached(home: Path) -> None:
    from shoal.local.supervisor import read_run, stop_local

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    console.print("running in the foreground; press Ctrl-C to stop")
    while not stop.wait(0.5):
        info = read_run(home)
        if info is None:
            return
    stop_local(home)
    console.print("shoal is down")


def down() -> None:
    """Stop the local cluster started by `shoal up` (its tasks are stopped first)."""
    from shoal.local.supervisor import stop_local

    home = default_home()
    with console.status("stopping the agent (and its tasks) and the server..."):
        info = stop_local(home)
    if info is None:
        console.print("shoal is not running")
        return
    console.print(f"shoal at {info.url} is down")


@api_errors
def status(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Cluster status: server, nodes, resources in use, jobs by state."""
    data = client().cluster()
    if emit(data, output):
        return
    totals, used = data["totals"], data["allocated"]
    console.print(f"server: {data['url']} (shoal {data['version']})")
    console.print(
        f"nodes: {int(totals['nodes'])} ready · cpu {used['cpus']:g}/{totals['cpus']:g} · "
        f"memory {used['memoryMiB']:g}/{totals['memoryMiB']:g} MiB · "
        f"gpu {used['gpus']:g}/{totals['gpus']:g}"
    )
    counts = ", ".join(f"{n} {s.lower()}" for s, n in data["jobs"].items() if n)
    console.print(f"jobs: {counts or 'none'}")


@api_errors
def ui() -> None:
    """The web dashboard's address, and how to sign in to it."""
    shoal = client()
    me = shoal.me()  # the server answers and the token is good: the page will take it too
    console.print(f"dashboard: {shoal.url}/ui/", highlight=False)
    console.print(
        f"sign in as {me['name']} with a user and password, or with the token this CLI uses: "
        f"{shoal.token_source or 'none'}",
        highlight=False,
    )


@node_app.command("list")
@api_errors
def node_list(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Nodes: state, allocated/capacity, tasks, agent version and the age of the last heartbeat
    (-o wide: also the address, the labels and the task ports other processes hold, never given
    to tasks)."""
    nodes = client().nodes()
    if emit(nodes, output):
        return
    wide = output is OutputFormat.WIDE
    table = new_table()
    columns = ["node", "state", "cpu", "mem (MiB)", "gpu", "tasks", "agent", "heartbeat"]
    for column in [*columns, "address", "labels", "ports held by others"] if wide else columns:
        table.add_column(column)
    for n in nodes:
        a = n["allocated"]
        labels = ",".join(f"{k}={v}" for k, v in sorted((n.get("labels") or {}).items())) or "-"
        busy = ",".join(map(str, n.get("busyPorts") or [])) or "-"
        extra = [n["address"], labels, busy] if wide else []
        table.add_row(
            n["name"],
            n["state"],
            f"{a['cpus']:g}/{n['cpus']:g}",
            f"{a['memoryMiB']:g}/{n['memoryMiB']}",
            f"{a['gpus']:g}/{n['gpus']}" + (f" {n['gpuType']}" if n["gpuType"] else ""),
            str(n.get("tasks", 0)),
            n.get("agentVersion") or "-",
            f"{max(time.time() - n['lastSeen'], 0):.0f}s ago",
            *extra,
        )
    console.print(table)
    for n in nodes:
        for what, why in sorted((n.get("unsupported") or {}).items()):
            console.print(f"node {n['name']} cannot {_CANNOT.get(what, what)}: {why}")


_CANNOT = {
    "container": "run container jobs",
    "memory": "hold tasks to their memory",
    "cpu": "hold tasks to their cpu",
    "pids": "hold tasks to their pids limit",
    "shm": "size a process task's /dev/shm",
}


def _node_action(name: str, action: str, done: str) -> None:
    node = client().node_action(name, action)
    console.print(f"node {node['name']} {done}; it is {node['state']} ({node['tasks']} task(s))")


@node_app.command("cordon")
@api_errors
def node_cordon(name: str = typer.Argument(..., help="The node.")) -> None:
    """No new tasks on NODE; the tasks running there go on (admins)."""
    _node_action(name, "cordon", "cordoned")


@node_app.command("drain")
@api_errors
def node_drain(name: str = typer.Argument(..., help="The node.")) -> None:
    """No new tasks on NODE; the running ones finish, then it is DRAINED (admins)."""
    _node_action(name, "drain", "is draining")


@node_app.command("uncordon")
@api_errors
def node_uncordon(name: str = typer.Argument(..., help="The node.")) -> None:
    """Lift a cordon or a drain: NODE takes new tasks again (admins)."""
    _node_action(name, "uncordon", "uncordoned")


@node_app.command("events")
@api_errors
def node_events(
    name: str = typer.Argument(..., help="The node."), output: OutputFormat = OUTPUT_OPTION
) -> None:
    """What happened to NODE (joins, NOT_READY and back, cordons, drains), oldest first."""
    events = client().node_events(name)
    if emit(events, output):
        return
    table = new_table()
    for column in ("time", "event", "message"):
        table.add_column(column)
    for e in events:
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(e["at"]))
        table.add_row(stamp, e["kind"], e["message"])
    console.print(table)


def server(
    home: Path = typer.Option(None, "--home", help="State directory (default $SHOAL_HOME)."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(DEFAULT_PORT, "--port"),
    kill_grace: float = typer.Option(10.0, "--kill-grace", min=0),
    node_timeout: float = typer.Option(30.0, "--node-timeout", min=0.5),
    scheduler: SchedulerPlace = SCHEDULER_OPTION,
    kubernetes: bool = False,
    kubeconfig: str | None = None,
    namespace: str = "default",
    proxy_port: int | None = None,
    proxy_port_fallback: bool = False,
) -> None:
    """Run the server in the foreground (what `shoal up` starts)."""
    from shoal.server.app import make_server, prepare
    from shoal.server.settings import FencingError, ServerSettings

    settings = ServerSettings(
        home=home or default_home(),
        host=host,
        port=port,
        kill_grace_s=kill_grace,
        node_timeout_s=node_timeout,
        scheduler=scheduler.value,
        kubernetes=kubernetes,
        kubeconfig=kubeconfig,
        kubernetes_namespace=namespace,
        proxy_port=proxy_port,
        proxy_port_fallback=proxy_port_fallback,
    )
    try:
        ctx = prepare(settings)
    except FencingError as exc:
        raise fail(str(exc)) from None
    info = settings.home / "server.json"
    info.write_text(json.dumps({"url": settings.url, "pid": os.getpid()}))
    make_server(ctx).run()


def agent(
    server_url: str = typer.Option(..., "--server", help="Server URL."),
    token_file: Path = typer.Option(..., "--token-file", help="File holding the agent token."),
    home: Path = typer.Option(..., "--home", help="Working directory for tasks."),
    nodes: int = typer.Option(1, "--nodes", min=1, max=64),
    cpus: float | None = typer.Option(None, "--cpus", min=0.001),
    memory: str | None = typer.Option(None, "--memory"),
    gpus: int | None = typer.Option(None, "--gpus", min=0, max=64),
    gpu_type: str | None = typer.Option(None, "--gpu-type"),
    address: str | None = typer.Option(
        None,
        "--address",
        help="Address peers reach tasks at (default: the address this host uses to reach the "
        "server; 127.0.0.1 for a server on loopback).",
    ),
    port_base: int = typer.Option(
        20000, "--port-base", min=1024, max=64000, help="First task port (1,000 per node)."
    ),
    grace: float = typer.Option(10.0, "--grace", help="Grace for tasks when the agent stops."),
    node_prefix: str = typer.Option(
        "node", "--node-prefix", help="Its nodes are named PREFIX-0, PREFIX-1, ..."
    ),
) -> None:
    """Run an agent in the foreground (what `shoal up` starts)."""
    from shoal.agent.address import AddressError, advertised_address
    from shoal.agent.identity import Connection
    from shoal.agent.main import Agent, AgentHomeInUse
    from shoal.agent.resources import hostname, local_nodes
    from shoal.net.failover import primary

    if not token_file.exists():
        raise fail(f"token file {token_file} does not exist")
    try:
        advertised = advertised_address(primary(server_url), address)
    except AddressError as exc:
        raise fail(str(exc)) from None
    specs = local_nodes(
        nodes,
        cpus,
        memory_option_mib(memory),
        gpus,
        gpu_type,
        advertised.address,
        node_prefix,
        port_base=port_base,
    )
    home.mkdir(parents=True, exist_ok=True)
    from shoal.cli.agent_commands import task_users_option

    users = task_users_option(None, None)  # SHOAL_TASK_USERS, SHOAL_UID_BASE: said when wrong
    connection = Connection.bearer(server_url, token_file.read_text().strip())
    running = Agent(connection, home, specs, f"{hostname()}:{home}", users)
    err_console.print(f"agent: {advertised.sentence()}", markup=False, highlight=False)
    signal.signal(signal.SIGTERM, lambda *_: running.must_stop.set())
    signal.signal(signal.SIGINT, lambda *_: running.must_stop.set())
    try:
        running.start()
    except AgentHomeInUse as exc:
        raise fail(str(exc)) from None
    running.must_stop.wait()  # a signal, or a server of another protocol version
    err_console.print("agent stopping: ending its tasks")
    running.stop(grace)
    if running.refusal is not None:
        raise fail(running.refusal, code=2)
