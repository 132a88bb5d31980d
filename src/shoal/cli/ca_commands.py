"""``shoal admin ca``: the cluster's CA on a server on the network, and rotating it
(docs/cluster.md, "Rotating the CA"). A client of ``/api/v1/admin/ca``: the server does the
work."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from shoal.cli.columns import Column, table_text, terminal_width
from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.cli.job_text import when
from shoal.cli.render import console

ca_app = typer.Typer(
    help="The cluster's CA: its state, and rotating it (rotate, then finish).",
    no_args_is_help=True,
)

_COLUMNS = [Column("NODE"), Column("CA"), Column("CERTIFICATE EXPIRES"), Column("SERIAL", drop=1)]


def _say(text: str) -> None:
    console.print(text, markup=False, highlight=False)


def _ca_line(label: str, ca: dict[str, Any]) -> str:
    return f"{label} sha256 {ca['sha256']}  ({ca['subject']}, until {when(ca['notAfter'])})"


def _show(state: dict[str, Any], output: OutputFormat) -> None:
    _say(_ca_line("current CA:", state["current"]))
    if state["next"] is not None:
        _say(_ca_line("next CA:   ", state["next"]))
        _say("a rotation is under way: the next CA signs node certificates, both are trusted")
    rows = [
        [n["node"], n["ca"], when(n["expiresAt"], full=True), n["serial"]] for n in state["nodes"]
    ]
    if rows:
        width = None if output is OutputFormat.WIDE else terminal_width()
        typer.echo(table_text(_COLUMNS, rows, width))
    if state["next"] is not None:
        pending = state["pending"]
        if pending:
            _say(f"not on the next CA yet: {', '.join(pending)}")
        else:
            _say("every node has a certificate of the next CA: `shoal admin ca finish` may run")


@ca_app.command("status")
@api_errors
def status(output: OutputFormat = OUTPUT_OPTION) -> None:
    """The cluster's CA, the next one during a rotation, and which CA signed each node's
    certificate (admins)."""
    state = client().ca_status()
    if not emit(state, output):
        _show(state, output)


@ca_app.command("rotate")
@api_errors
def rotate() -> None:
    """Stage a new CA (admins): it signs node certificates from now on, both CAs are trusted,
    and every agent renews onto it. Then update pinned CA files (`shoal admin ca bundle`), wait
    for the nodes (`shoal admin ca status`) and run `shoal admin ca finish`."""
    state = client().rotate_ca()
    _say(f"staged the next CA: sha256 {state['next']['sha256']}")
    _say(
        "node certificates are signed by it from now on, and both CAs are trusted; agents renew "
        "onto it within minutes (each asks every $SHOAL_CERT_CHECK_S seconds, 300 by default)"
    )
    _say("next:")
    _say("  shoal admin ca bundle --to CA_FILE   # for every CLI context pinned to the CA")
    _say("  shoal admin ca status                # until no node is left on the current CA")
    _say("  shoal admin ca finish")


@ca_app.command("bundle")
@api_errors
def bundle(
    to: Path | None = typer.Option(
        None,
        "--to",
        help="Write the bundle to this file (replaced whole, even the one this CLI pins) "
        "instead of printing it.",
    ),
) -> None:
    """The CA certificates to trust now (PEM; both during a rotation): what a CLI context's
    --ca, $SHOAL_CA or an SDK's `ca=` must name before `shoal admin ca finish` (admins)."""
    pem = str(client().ca_status()["bundle"])
    if to is None:
        typer.echo(pem, nl=False)
        return
    target = to.expanduser()
    temp = target.with_name(f".{target.name}.tmp")
    try:
        temp.write_text(pem)
        os.replace(temp, target)  # the file a context pins is never seen half-written
    except OSError as exc:
        raise fail(f"cannot write {target}: {exc}") from None
    count = pem.count("BEGIN CERTIFICATE")
    _say(f"wrote {count} CA certificate(s) to {target}")


@ca_app.command("finish")
@api_errors
def finish(
    force: bool = typer.Option(
        False,
        "--force",
        help="Finish even with nodes still on the old CA: they are removed (as `shoal node "
        "remove --force`) and must join again.",
    ),
) -> None:
    """Drop the old CA (admins): the next CA becomes the only one trusted and signs the
    server's certificate; the old CA's certificates and every join token are revoked.
    Refused while a node has no certificate of the next CA, unless --force."""
    state = client().finish_ca_rotation(force)
    _say(f"the CA is now sha256 {state['current']['sha256']}; the old one is no longer trusted")
    if state.get("retired"):
        _say(f"the old CA's certificate is kept on the server at {state['retired']}")
    if state.get("removedNodes"):
        _say(f"removed (they were still on the old CA): {', '.join(state['removedNodes'])}")
    revoked = state.get("revokedJoinTokens", 0)
    if revoked:
        _say(f"revoked {revoked} join token(s): they pinned the old CA")
    _say("new join tokens pin the new CA: `shoal node token create`")
