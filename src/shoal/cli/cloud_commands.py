"""``shoal cloud``: clouds shoal creates machines in. ``shoal cloud local serve`` runs the local
cloud, whose machines are network namespaces on a bridge (docs/cloud.md, "The local provider")."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from shoal.cli.common import fail
from shoal.cli.render import print_problems

cloud_app = typer.Typer(help="Clouds shoal creates machines in.", no_args_is_help=True)
local_app = typer.Typer(
    help="The local cloud: machines are network namespaces on a bridge (root).",
    no_args_is_help=True,
)
cloud_app.add_typer(local_app, name="local")


@local_app.command("serve")
def serve(
    state: Path = typer.Option(..., "--state", help="Its state (state.json) and machines' files."),
    catalog: Path = typer.Option(..., "--catalog", help="What it sells: a YAML catalog."),
    listen: str = typer.Option(
        ..., "--listen", help="ADDRESS:PORT on the bridge (PORT 0: any; STATE/endpoint says)."
    ),
    bridge_netns: str = typer.Option(..., "--bridge-netns", help="The bridge's namespace."),
    bridge: str = typer.Option("br0", "--bridge", help="The bridge machines are plugged in."),
    subnet: str = typer.Option(..., "--subnet", help="The bridge's /24 in 198.18.0.0/15."),
    first_host: int = typer.Option(
        10, "--first-host", min=1, max=250, help="Machines' addresses start at this host number."
    ),
    grace: float = typer.Option(
        5.0, "--grace", min=0, help="Seconds a machine's processes get after SIGTERM."
    ),
    cleanup_on_exit: bool = typer.Option(
        False, "--cleanup-on-exit", help="Terminate every machine when the daemon stops."
    ),
) -> None:
    """Play a cloud on this machine until SIGTERM or Ctrl-C; its machines outlive it."""
    from shoal.cloud.local.catalog import load_catalog
    from shoal.cloud.local.daemon import ServeOptions, network_of
    from shoal.cloud.local.daemon import serve as run_cloud
    from shoal.cloud.local.machines import bridge_usable
    from shoal.spec.errors import SpecError

    try:
        loaded = load_catalog(catalog)
    except SpecError as exc:
        print_problems(str(catalog), exc.problems)
        raise typer.Exit(1) from None
    options = ServeOptions(
        state, loaded, listen, bridge_netns, bridge, subnet, first_host, grace, cleanup_on_exit
    )
    try:
        network_of(options)
    except ValueError as exc:
        raise fail(str(exc)) from None
    problem = bridge_usable(bridge_netns, bridge)
    if problem is not None:
        raise fail(problem)
    logging.basicConfig(format="shoal cloud: %(levelname)s %(message)s", level=logging.INFO)
    try:
        run_cloud(options)
    except ValueError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"--listen {listen}: {exc.strerror or exc}") from None
