"""``shoal usage``: what users or virtual clusters used (accounting, like Slurm's ``sreport``)."""

from __future__ import annotations

from enum import StrEnum

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, fail, print_json
from shoal.cli.render import console, new_table
from shoal.cli.vc_update import format_mib
from shoal.spec.units import parse_duration


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
    """Jobs, GPU-hours, CPU-hours, elapsed hours and peak memory per user or VC, and, when cloud
    pools ran their jobs, the pool machine-hours and cost they held. Non-admins see their own
    jobs only."""
    if since is not None:
        try:
            parse_duration(since, "--since")
        except ValueError as exc:
            raise fail(str(exc)) from None
    report = client().usage(by.value, since)
    if output is OutputFormat.JSON:
        print_json(report)
        return
    pools = any(row.get("poolNodeHours") for row in report["rows"])  # cloud pools ran jobs
    table = new_table()
    columns = [by.value, "jobs", "gpu-hours", "cpu-hours", "elapsed-h", "peak mem"]
    for column in columns + (["pool node-h", "pool cost"] if pools else []):
        table.add_column(column, justify="left" if column == by.value else "right")
    for row in report["rows"]:
        cells = [
            row["key"],
            str(row["jobs"]),
            _hours(row["gpuHours"]),
            _hours(row["cpuHours"]),
            _hours(row["elapsedHours"]),
            format_mib(row["peakMemoryMiB"]) if row["peakMemoryMiB"] else "-",
        ]
        if pools:
            cells += [_hours(row["poolNodeHours"]), _hours(row["poolCost"])]
        table.add_row(*cells)
    console.print(table)
    window = "all time" if since is None else f"jobs active in the last {since}"
    scope = "" if report["scope"] == "everyone" else "; your own jobs only (not an admin)"
    console.print(f"{window}{scope}", style="dim", highlight=False)


def _hours(value: float) -> str:
    """Two decimals; a small non-zero amount reads "<0.01", not a misleading 0.00."""
    return "<0.01" if 0 < value < 0.005 else f"{value:.2f}"
