"""``shoal agent join`` and ``shoal agent run``: a machine joins a server on the network with a
join token and runs its agent with its own node certificate (mutual TLS). ``shoal agent`` with
no subcommand is still the local-mode agent ``shoal up`` starts (a bearer token)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from shoal.cli.cluster_commands import memory_option_mib
from shoal.cli.common import fail
from shoal.cli.render import console, err_console

# shoal.agent is imported inside the commands only: `shoal --help` stays fast.
if TYPE_CHECKING:
    from shoal.agent.task_users import TaskUsers

agent_app = typer.Typer(
    help="This machine as a node of a server on the network: `join` once, then `run`.",
    invoke_without_command=True,
)
DEFAULT_AGENT_HOME = Path("~/.shoal-agent")
HOME_OPTION = typer.Option(
    DEFAULT_AGENT_HOME, "--home", help="The agent's state: identity (0600) and task files."
)


@agent_app.callback()
def local_agent(
    ctx: typer.Context,
    server_url: str | None = typer.Option(None, "--server", hidden=True),
    token_file: Path | None = typer.Option(None, "--token-file", hidden=True),
    home: Path | None = typer.Option(None, "--home", hidden=True),
    nodes: int = typer.Option(1, "--nodes", min=1, max=64, hidden=True),
    cpus: float | None = typer.Option(None, "--cpus", min=0.001, hidden=True),
    memory: str | None = typer.Option(None, "--memory", hidden=True),
    gpus: int | None = typer.Option(None, "--gpus", min=0, max=64, hidden=True),
    gpu_type: str | None = typer.Option(None, "--gpu-type", hidden=True),
    address: str | None = typer.Option(None, "--address", hidden=True),
    port_base: int = typer.Option(20000, "--port-base", min=1024, max=64000, hidden=True),
    grace: float = typer.Option(10.0, "--grace", hidden=True),
    node_prefix: str = typer.Option("node", "--node-prefix", hidden=True),
) -> None:
    """With no subcommand: the local-mode agent in the foreground (what `shoal up` starts)."""
    if ctx.invoked_subcommand is not None:
        return
    if server_url is None or token_file is None or home is None:
        raise fail(
            "the local-mode agent needs --server, --token-file and --home; a machine "
            "joins a server on the network with `shoal agent join`"
        )
    from shoal.cli.cluster_commands import agent

    agent(
        server_url,
        token_file,
        home,
        nodes,
        cpus,
        memory,
        gpus,
        gpu_type,
        address,
        port_base,
        grace,
        node_prefix,
    )


def _labels(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    labels: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r}: write labels as k=v,k2=v2", param_hint="--labels")
        labels[key] = value
    return labels


JOIN_TOKEN_ENV = "SHOAL_JOIN_TOKEN"


def join_token_text(token: str | None, token_file: Path | None) -> tuple[str, str]:
    """The join token and where it came from: ``--token``, ``--token-file`` (``-``: standard
    input) or ``$SHOAL_JOIN_TOKEN``, in that order; exactly one of the first two, if any."""
    if token is not None and token_file is not None:
        raise fail("give the join token once: --token or --token-file, not both")
    if token is not None:
        return token.strip(), "--token"
    if token_file is not None:
        where = f"--token-file {token_file}"
        try:
            text = sys.stdin.read() if str(token_file) == "-" else token_file.read_text()
        except OSError as exc:
            raise fail(f"{where}: cannot read it: {exc.strerror or exc}") from None
        if not text.strip():
            raise fail(f"{where}: the file is empty; it should hold the join token")
        return text.strip(), where
    text = os.environ.get(JOIN_TOKEN_ENV, "").strip()
    if text:
        return text, f"${JOIN_TOKEN_ENV}"
    raise fail(
        "no join token: give the one `shoal node token create` made with --token-file FILE, "
        f"${JOIN_TOKEN_ENV} or --token (which other users of this host see in `ps`)"
    )


@agent_app.command("join")
def join(
    server: str = typer.Argument(..., help="The server, https://SERVER:PORT."),
    token: str | None = typer.Option(
        None,
        "--token",
        help="The join token `shoal node token create` made. Other users of this host see it "
        f"in `ps` while join runs: prefer --token-file or ${JOIN_TOKEN_ENV}.",
    ),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help=f"A file holding the join token ('-': standard input). Without it or --token, "
        f"${JOIN_TOKEN_ENV} holds it.",
    ),
    name: str | None = typer.Option(None, "--name", help="The node's name (default: hostname)."),
    labels: str | None = typer.Option(None, "--labels", help="k=v,k2=v2"),
    cpus: float | None = typer.Option(None, "--cpus", min=0.001, help="Cores (default: all)."),
    memory: str | None = typer.Option(None, "--memory", help="MiB or 4Gi (default: all)."),
    gpus: int | None = typer.Option(None, "--gpus", min=0, max=64, help="Default: NVML's count."),
    address: str | None = typer.Option(
        None,
        "--address",
        help="Address peers reach this node's tasks at (default: the address this host uses "
        "to reach the server; 127.0.0.1 for a server on loopback).",
    ),
    port_base: int = typer.Option(
        20000, "--port-base", min=1024, max=64000, help="First of 1,000 task ports."
    ),
    home: Path = HOME_OPTION,
) -> None:
    """Join a server on the network: check its CA against the token, get this node's
    certificate (its key never leaves this machine). Then run `shoal agent run`."""
    from shoal.agent.address import AddressError, advertised_address
    from shoal.agent.identity import Identity, JoinError
    from shoal.agent.identity import join as join_server
    from shoal.agent.resources import hostname
    from shoal.net.failover import primary, server_urls
    from shoal.pki import NODE_NAME_HINT, NODE_NAME_PATTERN, BadJoinToken, JoinToken

    if not server_urls(server) or not all(u.startswith("https://") for u in server_urls(server)):
        raise fail(f"{server!r}: a server on the network is https://SERVER:PORT (several: commas)")
    text, source = join_token_text(token, token_file)
    try:
        parsed = JoinToken.parse(text)
    except BadJoinToken as exc:
        raise fail(f"{source}: {exc}") from None
    node = name or hostname().split(".")[0]
    if not NODE_NAME_PATTERN.match(node):
        raise fail(f"node name {node!r}: {NODE_NAME_HINT}; give one with --name")
    try:
        advertised = advertised_address(primary(server), address)
    except AddressError as exc:
        raise fail(str(exc)) from None
    home = home.expanduser().resolve()
    identity = Identity(
        home=str(home),
        server=server.rstrip("/"),
        node=node,
        labels=_labels(labels),
        cpus=cpus,
        memory_mib=memory_option_mib(memory),
        gpus=gpus,
        address=advertised.address,
        port_base=port_base,
    )
    if identity.files.settings.exists():
        raise fail(
            f"{home} already holds the identity of a node; run `shoal agent run --home "
            f"{home}`, or give another --home"
        )
    try:
        joined = join_server(identity, parsed)
    except JoinError as exc:
        raise fail(str(exc)) from None
    console.print(
        f"node {joined.node} joined {identity.server}; identity in "
        f"{identity.files.directory} (mode 0600)",
        markup=False,
    )
    console.print(advertised.sentence(), markup=False, highlight=False)
    console.print(f"next: shoal agent run --home {home}", markup=False, highlight=False)


@agent_app.command("run")
def run(
    home: Path = HOME_OPTION,
    grace: float = typer.Option(10.0, "--grace", help="Grace for tasks when the agent stops."),
    task_users: str | None = typer.Option(
        None,
        "--task-users",
        envvar="SHOAL_TASK_USERS",
        help="Whose uid tasks run as: pool (uid-base + user number; default as root), accounts "
        "(the node's account of the user's name) or agent (the agent's own; docs/security.md).",
    ),
    uid_base: int | None = typer.Option(
        None, "--uid-base", envvar="SHOAL_UID_BASE", help="First uid of --task-users pool."
    ),
    task_root: Path | None = typer.Option(
        None,
        "--task-root",
        envvar="SHOAL_TASK_ROOT",
        help="Where tasks' directories and data sets live (default /var/lib/shoal/tasks).",
    ),
) -> None:
    """Run this node's agent in the foreground, with its node certificate (mutual TLS)."""
    from shoal.agent.identity import Connection, Identity, JoinError
    from shoal.agent.main import Agent, AgentHomeInUse
    from shoal.agent.resources import local_nodes

    users = task_users_option(task_users, uid_base)
    home = home.expanduser().resolve()
    try:
        identity = Identity.load(home)
    except JoinError as exc:
        raise fail(str(exc)) from None
    spec = local_nodes(
        1,
        identity.cpus,
        identity.memory_mib,
        identity.gpus,
        None,
        identity.address,
        port_base=identity.port_base,
    )[0]
    from dataclasses import replace

    spec = replace(spec, name=identity.node, labels=dict(identity.labels))
    running = Agent(
        Connection.mutual_tls(identity), home, [spec], f"{identity.node}:{home}", users, task_root
    )
    signal.signal(signal.SIGTERM, lambda *_: running.must_stop.set())
    signal.signal(signal.SIGINT, lambda *_: running.must_stop.set())
    console.print(f"agent of node {identity.node} talking to {identity.server}", markup=False)
    try:
        running.start()
    except AgentHomeInUse as exc:
        raise fail(str(exc)) from None
    running.must_stop.wait()  # a signal, the node removed, or another protocol version
    err_console.print("agent stopping: ending its tasks")
    running.stop(grace)
    if running.refusal is not None:
        raise fail(running.refusal, code=2)


@agent_app.command("install-service")
def install_service(
    home: Path = HOME_OPTION,
    grace: float = typer.Option(10.0, "--grace", help="Grace for tasks when the agent stops."),
    output: Path | None = typer.Option(
        None,
        "--output",
        help="Write the unit here (a file, or a directory for shoal-agent.service) instead of "
        "/etc/systemd/system.",
    ),
    print_unit: bool = typer.Option(False, "--print", help="Print the unit; write nothing."),
) -> None:
    """Write a systemd unit that runs `shoal agent run` on this home (this Python's
    `python -m shoal`, Restart=on-failure, tasks kept if the agent dies), and print the
    systemctl line that starts it."""
    from shoal.cli.service_units import agent_unit, install, note

    home = home.expanduser().resolve()
    if not (home / "identity" / "identity.json").exists():
        note(f"{home} holds no node identity yet: run `shoal agent join ... --home {home}` first")
    install(agent_unit(home, grace), output, print_unit, "agent")


def task_users_option(mode: str | None, uid_base: int | None) -> TaskUsers:
    """``--task-users`` and ``--uid-base`` as the agent's policy; a clear error when wrong."""
    from shoal.agent.task_users import DEFAULT_UID_BASE, TaskUsers

    try:
        if mode is None and uid_base is None:
            return TaskUsers.default()
        mode = mode or TaskUsers.default().mode
        return TaskUsers(mode, uid_base or DEFAULT_UID_BASE)  # type: ignore[arg-type]
    except ValueError as exc:
        raise fail(str(exc)) from None
