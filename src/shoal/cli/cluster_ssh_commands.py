"""``shoal cluster template|create|status|delete``: bootstrap a cluster over SSH from a cluster
file (MARO's ``grass create`` / ``node join``). The work is done by ``shoal.bootstrap``, imported
inside the commands only: it needs pydantic and asyncssh (the ``cluster`` extra), and the CLI's
start-up path loads neither (tests/cli/test_cli_imports.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, emit, fail
from shoal.cli.render import console, new_table, print_problems

if TYPE_CHECKING:
    from shoal.bootstrap.clusterfile import Cluster
    from shoal.bootstrap.hosts import HostOutcome

cluster_app = typer.Typer(
    help="Bootstrap a cluster over SSH from a cluster file (template, create, status, "
    "delete); cloud node pools (pools, scale).",
    no_args_is_help=True,
)
FILE_ARGUMENT = typer.Argument(..., help="The cluster file (`shoal cluster template` shows one).")
EXTRA_HINT = "install the cluster extra: pip install 'shoal[cluster]' (make setup does)"


def _load(file: Path) -> Cluster:
    try:
        from shoal.bootstrap.clusterfile import load_cluster
    except ImportError as exc:  # asyncssh missing: the extra is not installed
        raise fail(f"shoal cluster needs {exc.name}: {EXTRA_HINT}") from None
    from shoal.spec.errors import SpecError

    try:
        return load_cluster(file)
    except SpecError as exc:
        print_problems(str(file), exc.problems)
        raise typer.Exit(1) from None


def _bootstrap() -> Any:
    try:
        from shoal.bootstrap import usecases
    except ImportError as exc:
        raise fail(f"shoal cluster needs {exc.name}: {EXTRA_HINT}") from None
    return usecases


def _say(line: str) -> None:
    console.print(line, markup=False, highlight=False)


@cluster_app.command()
def template() -> None:
    """Print a commented cluster file to start from."""
    from importlib import resources

    text = (resources.files("shoal.bootstrap") / "template.yaml").read_text(encoding="utf-8")
    typer.echo(text, nl=False)


@cluster_app.command()
def validate(file: Path = FILE_ARGUMENT) -> None:
    """Check a cluster file (exit 1 naming each wrong field); connects to nothing."""
    cluster = _load(file)
    console.print(f"{file}: valid, {len(cluster.hosts)} host(s), server {cluster.server_url}")


def _finish(outcomes: list[HostOutcome], verb: str) -> None:
    failed = [o for o in outcomes if not o.ok]
    for outcome in outcomes:
        host = outcome.host
        if outcome.ok:
            _say(f"[{host.name} {host.address}] ok: {outcome.summary}")
        else:
            _say(f"[{host.name} {host.address}] FAILED at step {outcome.failed_step}:")
            for line in outcome.summary.splitlines():
                _say(f"    {line}")
    _say(f"{len(outcomes) - len(failed)} of {len(outcomes)} host(s) {verb}")
    if failed:
        names = ", ".join(f"{o.host.name} ({o.failed_step})" for o in failed)
        raise fail(f"{len(failed)} host(s) failed: {names}")


@cluster_app.command()
def create(file: Path = FILE_ARGUMENT) -> None:
    """Start the server here if needed (`shoal server init`, `shoal server start` in the
    background), then on every host over SSH: copy the wheels, install shoal in a venv, join
    the node and start its agent detached; wait until the node is READY. Hosts already joined
    and running are skipped. Exit 1 if any host failed (the others go on)."""
    cluster = _load(file)
    usecases = _bootstrap()
    from shoal.bootstrap.server import ServerProblem
    from shoal.bootstrap.wheels import WheelError
    from shoal.spec.errors import SpecError

    try:
        outcomes = usecases.create_cluster(cluster, _say)
    except SpecError as exc:
        print_problems(str(file), exc.problems)
        raise typer.Exit(1) from None
    except (WheelError, ServerProblem) as exc:
        raise fail(str(exc)) from None
    _finish(outcomes, "joined and running")


@cluster_app.command()
def status(file: Path = FILE_ARGUMENT, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Per host: reachable over SSH, agent process running, node state on the server."""
    cluster = _load(file)
    server_words, statuses = _bootstrap().cluster_status(cluster)
    data = {
        "server": server_words,
        "hosts": [
            {
                "name": s.host.name,
                "address": s.host.address,
                "ssh": s.reachable,
                "agent": s.agent,
                "node": s.node,
            }
            for s in statuses
        ],
    }
    if emit(data, output):
        return
    _say(f"server: {server_words}")
    table = new_table()
    for column in ("host", "address", "ssh", "agent", "node"):
        table.add_column(column)
    for row in data["hosts"]:
        table.add_row(row["name"], row["address"], row["ssh"], row["agent"], row["node"])
    console.print(table)


@cluster_app.command()
def delete(file: Path = FILE_ARGUMENT) -> None:
    """Stop what create started: each host's agent (by its pid file, over SSH), the node on the
    server (`shoal node remove`), and the server if create started it. Kills nothing by name."""
    cluster = _load(file)
    from shoal.spec.errors import SpecError

    try:
        outcomes = _bootstrap().delete_cluster(cluster, _say)
    except SpecError as exc:
        print_problems(str(file), exc.problems)
        raise typer.Exit(1) from None
    _finish(outcomes, "stopped and removed")
