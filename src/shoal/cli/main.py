"""The ``shoal`` command."""

from __future__ import annotations

import typer

from shoal import __version__
from shoal.cli import (
    cluster_commands,
    job_remote,
    job_views,
    log_commands,
    run_command,
    sim_command,
    usage_command,
)
from shoal.cli.job_commands import job_app
from shoal.cli.user_commands import login, token_app, user_app
from shoal.cli.vc_commands import vc_app

app = typer.Typer(
    name="shoal",
    help="shoal: a training-cluster manager for ML and RL teams.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(job_app, name="job")
app.add_typer(cluster_commands.node_app, name="node")
app.add_typer(vc_app, name="vc")
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")
app.command()(login)
app.command()(cluster_commands.up)
app.command()(cluster_commands.down)
app.command()(cluster_commands.status)
app.command()(run_command.run)
app.command()(sim_command.sim)
app.command()(usage_command.usage)
app.command(hidden=True)(cluster_commands.server)
app.command(hidden=True)(cluster_commands.agent)
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
) -> None:
    """shoal: queue, gang-schedule and run multi-role training jobs."""


def main() -> None:
    app()
