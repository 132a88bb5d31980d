"""``shoal admin audit``: the audit log of security-relevant actions (docs/audit.md)."""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from shoal.cli.columns import Column, table_text, terminal_width
from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit
from shoal.cli.job_text import since_epoch, when
from shoal.cli.render import console

_COLUMNS = [
    Column("TIME"),
    Column("ACTOR"),
    Column("ACTION"),
    Column("TARGET"),
    Column("OUTCOME", drop=2),
    Column("CLIENT", drop=3),
    Column("DETAIL", drop=4),
]


@api_errors
def audit(
    since: str | None = typer.Option(
        None, "--since", help="Only since then: 30m, 12h, 7d or a date (2026-05-01)."
    ),
    user: str | None = typer.Option(None, "--user", help="Only what this actor did."),
    action: str | None = typer.Option(
        None, "--action", help="One action (login) or a family ending in '.' (token.)."
    ),
    refused: bool = typer.Option(False, "--refused", help="Only refused attempts."),
    limit: int = typer.Option(50, "--limit", "-n", min=1, max=10_000, help="At most this many."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Who signed in, made tokens, changed users, groups, VCs or nodes, stopped others' jobs
    or opened terminals, from where, and whether it was allowed (admins; newest first)."""
    start = None
    if since is not None:
        try:
            start = since_epoch(since, time.time())
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--since") from None
    rows = client().audit_log(limit, start, user, action, "refused" if refused else None)
    if emit(rows, output):
        return
    if not rows:
        console.print("no audit events match")
        return
    width = None if output is OutputFormat.WIDE else terminal_width()
    typer.echo(table_text(_COLUMNS, [_cells(row) for row in rows], width))


def _cells(row: dict[str, Any]) -> list[str]:
    detail = {k: v for k, v in row["detail"].items() if k != "userAgent"}
    return [
        when(row["at"], full=True),
        row["actor"],
        row["action"],
        row["target"],
        row["outcome"],
        row["client"],
        json.dumps(detail, separators=(",", ":"))[:80] if detail else "",
    ]
