"""``shoal usage``: what users or virtual clusters used (accounting, like Slurm's ``sreport``)."""

from __future__ import annotations

from enum import StrEnum

import typer
from rich.table import Table

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, print_json
from shoal.cli.render import console
from shoal.spec.units import format_memory, parse_duration


class UsageBy(StrEnum):
    USER = "user"
    VC = "vc"


@api_errors
def usage(
    by: UsageBy = typer.Option(UsageBy.USER, "--by", help="Sum per user or per vc."),
    since: str | None = typer.Option(
        None, "--since", help="Jobs active in this window, e.g. 30d, 12h, 10m (default: all)."
    ),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Jobs, GPU-hours, CPU-hours, elapsed hours and peak memory per user or VC. Non-admins
    see their own jobs only."""
    if since is not None:
        try:
            parse_duration(since, "--since")
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--since") from None
    report = client().usage(by.value, since)
    if output is OutputFormat.JSON:
        print_json(report)
        return
    table = Table(show_edge=False, pad_edge=False)
    for column in (by.value, "jobs", "gpu-hours", "cpu-hours", "elapsed-h", "peak mem"):
        table.add_column(column, justify="left" if column == by.value else "right")
    for row in report["rows"]:
        table.add_row(
            row["key"],
            str(row["jobs"]),
            f"{row['gpuHours']:.2f}",
            f"{row['cpuHours']:.2f}",
            f"{row['elapsedHours']:.2f}",
            format_memory(round(row["peakMemoryMiB"])) if row["peakMemoryMiB"] else "-",
        )
    console.print(table)
    window = "all time" if since is None else f"jobs active in the last {since}"
    scope = "" if report["scope"] == "everyone" else "; your own jobs only (not an admin)"
    console.print(f"{window}{scope}", style="dim", highlight=False)
