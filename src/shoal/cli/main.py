"""The ``shoal`` command.

Every module imported here is a client module: none imports the server, the store, the planner
or pydantic at import time (tests/cli/test_cli_imports.py), so `shoal --help` answers fast.
"""

from __future__ import annotations

import typer

from shoal import __version__
from shoal.cli import (
    admin_commands,
    agent_commands,
    cloud_commands,
    cluster_commands,
    cluster_ssh_commands,
    job_remote,
    job_views,
    kubernetes_commands,
    log_commands,
    node_join_commands,
    node_show_command,
    pool_commands,
    run_command,
    server_commands,
    sim_command,
    ssh_commands,
    usage_command,
)
from shoal.cli.config_commands import config_app, login, logout, whoami
from shoal.cli.data_commands import data_app
from shoal.cli.image_commands import image_app
from shoal.cli.job_commands import job_app
from shoal.cli.user_commands import token_app, user_app
from shoal.cli.vc_commands import vc_app
from shoal.client import ShoalError
from shoal.client import config as clientconfig

app = typer.Typer(
    name="shoal",
    help="shoal: a training-cluster manager for ML and RL teams.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain (click) help and errors: typer's rich help imports rich.markdown and markdown-it,
    # ~0.1 s on every `--help` and every usage error; tables still use rich.
    rich_markup_mode=None,
)
app.add_typer(job_app, name="job")
app.add_typer(cluster_commands.node_app, name="node")
cluster_commands.node_app.add_typer(node_join_commands.token_app, name="token")
cluster_commands.node_app.command("remove")(node_join_commands.remove)
cluster_commands.node_app.command("show")(node_show_command.show)
app.add_typer(vc_app, name="vc")
app.add_typer(user_app, name="user")
user_app.add_typer(ssh_commands.key_app, name="key")
job_app.command("ssh")(ssh_commands.job_ssh)
app.add_typer(token_app, name="token")
app.add_typer(config_app, name="config")
app.add_typer(data_app, name="data")
app.add_typer(image_app, name="image")
app.add_typer(cluster_ssh_commands.cluster_app, name="cluster")
pool_commands.register(cluster_ssh_commands.cluster_app)
app.command()(login)
app.command()(logout)
app.command()(whoami)
app.command()(cluster_commands.up)
app.command()(cluster_commands.down)
app.command()(cluster_commands.status)
app.command()(cluster_commands.ui)
app.command()(run_command.run)
app.command()(sim_command.sim)
app.command()(usage_command.usage)
app.add_typer(server_commands.server_app, name="server")
app.add_typer(agent_commands.agent_app, name="agent")
app.add_typer(kubernetes_commands.kubernetes_app, name="kubernetes")
app.add_typer(admin_commands.admin_app, name="admin")
app.add_typer(cloud_commands.cloud_app, name="cloud")
assert job_remote  # registers `job submit|stop`
assert job_views  # registers `job list|status|describe|why|events`
assert log_commands  # registers `job logs`


def _version(value: bool) -> None:
    if value:
        typer.echo(f"shoal {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    context: str | None = typer.Option(
        None,
        "--context",
        help="Use this context (`shoal config get-contexts`; `local`: the cluster under "
        "$SHOAL_HOME) instead of $SHOAL_CONTEXT, $SHOAL_URL or the current context.",
    ),
) -> None:
    """shoal: queue, gang-schedule and run multi-role training jobs."""
    clientconfig.selected_context = context


def main() -> None:
    try:
        app(prog_name="shoal")
    except ShoalError as exc:  # a command without @api_errors: still one line, exit 1
        from shoal.cli.common import error_text, fail

        fail(error_text(exc))
        raise SystemExit(1) from None
