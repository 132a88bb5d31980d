"""Simulation reports: a terminal table, JSON, Markdown, per-job CSV and PNG plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from shoal.sim.records import SimResult

HEADLINE = (
    ("jobs", "jobs", "{:,}"),
    ("completed", "completed", "{:,}"),
    ("avg_jct_s", "avg JCT", "dur"),
    ("p50_jct_s", "p50 JCT", "dur"),
    ("p95_jct_s", "p95 JCT", "dur"),
    ("p99_jct_s", "p99 JCT", "dur"),
    ("avg_queue_delay_s", "avg queue delay", "dur"),
    ("p95_queue_delay_s", "p95 queue delay", "dur"),
    ("p99_queue_delay_s", "p99 queue delay", "dur"),
    ("makespan_s", "makespan", "dur"),
    ("gpu_utilization", "GPU utilisation", "{:.1%}"),
    ("idle_gpus_while_waiting", "GPUs idle while jobs wait", "{:.1%}"),
    ("fragmentation", "fragmented GPUs", "{:.2%}"),
    ("avg_queue_length", "avg queue length", "{:,.1f}"),
    ("preemptions", "preemptions", "{:,}"),
    ("max_job_preemptions", "most preemptions of one job", "{:,}"),
    ("lost_gpu_hours", "GPU-hours lost to preemption", "{:,.1f}"),
    ("fairness_jain", "fairness (Jain, per-VC slowdown)", "{:.3f}"),
    ("wall_s", "replay wall time", "{:.1f} s"),
    ("scheduling_s", "of it in core.schedule", "{:.1f} s"),
)
LOWER_IS_BETTER = ("avg_jct_s", "p95_jct_s", "avg_queue_delay_s", "p95_queue_delay_s")


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7_200:
        return f"{seconds / 60:,.1f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86_400:,.1f} d"


def _cell(value: Any, fmt: str) -> str:
    return duration(float(value)) if fmt == "dur" else fmt.format(value)


def _ratio(base: float, other: float) -> str:
    if other <= 0:
        return "∞" if base > 0 else "="
    return f"{base / other:.2f}×"


def headline_rows(summaries: list[dict[str, Any]]) -> list[list[str]]:
    """One row per metric, one column per policy, and (for two or more) the gain over the
    first policy for the delay metrics."""
    rows = []
    for key, label, fmt in HEADLINE:
        row = [label, *(_cell(s[key], fmt) for s in summaries)]
        if len(summaries) > 1:
            base = float(summaries[0][key])
            gains = [_ratio(base, float(s[key])) for s in summaries[1:]]
            row.append(", ".join(gains) if key in LOWER_IS_BETTER else "")
        rows.append(row)
    return rows


def _columns(summaries: list[dict[str, Any]]) -> list[str]:
    columns = ["metric", *(s["run"] for s in summaries)]
    if len(summaries) > 1:
        columns.append(f"better than {summaries[0]['run']} by")
    return columns


def rich_table(summaries: list[dict[str, Any]]) -> Table:
    first = summaries[0]
    table = Table(title=f"{first['trace']} on {first['cluster']} ({first['total_gpus']:,} GPUs)")
    for index, column in enumerate(_columns(summaries)):
        table.add_column(column, justify="left" if index == 0 else "right")
    for row in headline_rows(summaries):
        table.add_row(*row)
    return table


COST_COLUMNS = (
    "run",
    "node-hours",
    "cost",
    "avg nodes",
    "peak",
    "launches",
    "paid GPUs busy",
    "avg queue delay",
    "p50 queue delay",
    "p95 queue delay",
    "avg JCT",
    "preemptions",
)


def cost_rows(summaries: list[dict[str, Any]]) -> list[list[str]]:
    """Per run of a cluster with pools: what its machines cost and how long jobs waited."""
    rows = []
    for s in summaries:
        if "pools" not in s:
            continue
        pools = s["pools"].values()
        rows.append(
            [
                s["run"],
                f"{s['node_hours']:,.0f}",
                f"{s['cost']:,.0f}",
                f"{sum(p['avg_nodes'] for p in pools):,.1f}",
                f"{sum(p['peak_nodes'] for p in pools):,}",
                f"{sum(p['launches'] for p in pools):,}",
                f"{s['paid_gpu_utilization']:.1%}",
                duration(s["avg_queue_delay_s"]),
                duration(s["p50_queue_delay_s"]),
                duration(s["p95_queue_delay_s"]),
                duration(s["avg_jct_s"]),
                f"{s['preemptions']:,}",
            ]
        )
    return rows


def cost_table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(title="scaling pools: what the machines cost, and how long jobs waited")
    for index, column in enumerate(COST_COLUMNS):
        table.add_column(column, justify="left" if index == 0 else "right")
    for row in cost_rows(summaries):
        table.add_row(*row)
    return table


def vc_rows(summaries: list[dict[str, Any]]) -> list[list[str]]:
    """Per VC: jobs, then average queue delay and JCT under each policy."""
    rows = []
    for vc, base in summaries[0]["per_vc"].items():
        row = [vc, f"{base['jobs']:,}"]
        row += [duration(s["per_vc"][vc]["avg_queue_delay_s"]) for s in summaries]
        row += [duration(s["per_vc"][vc]["avg_jct_s"]) for s in summaries]
        rows.append(row)
    return rows


def _vc_columns(summaries: list[dict[str, Any]]) -> list[str]:
    return [
        "VC",
        "jobs",
        *(f"delay {s['run']}" for s in summaries),
        *(f"JCT {s['run']}" for s in summaries),
    ]


def vc_table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(title="per virtual cluster: average queueing delay, then average JCT")
    for index, column in enumerate(_vc_columns(summaries)):
        table.add_column(column, justify="left" if index == 0 else "right")
    for row in vc_rows(summaries):
        table.add_row(*row)
    return table


def markdown(summaries: list[dict[str, Any]]) -> str:
    first = summaries[0]
    lines = [
        f"### {first['trace']} on {first['cluster']} ({first['total_gpus']:,} GPUs)",
        "",
        _md_table(_columns(summaries), headline_rows(summaries)),
        "",
        "Per virtual cluster (average queueing delay, then average JCT, per policy):",
        "",
        _md_table(_vc_columns(summaries), vc_rows(summaries)),
    ]
    costs = cost_rows(summaries)
    if costs:
        lines += ["", "Scaling pools (cost in the pools' price unit):", ""]
        lines.append(_md_table(list(COST_COLUMNS), costs))
    notes = [note for note in first["notes"] if not note.startswith("0 ")]
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def _md_table(columns: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" + "---:|" * (len(columns) - 1)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def write_report(
    directory: Path,
    results: list[SimResult],
    summaries: list[dict[str, Any]],
    jobs_csv: bool = True,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps(summaries, indent=2) + "\n")
    (directory / "report.md").write_text(markdown(summaries))
    for result in results if jobs_csv else ():
        suffix = f"-{result.variant}" if result.variant else ""
        _write_jobs(directory / f"jobs-{result.policy}{suffix}.csv", result)
    from shoal.sim.plots import plot_all  # noqa: PLC0415 - matplotlib loads only for reports

    plot_all(directory, results)


def _write_jobs(path: Path, result: SimResult) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "job_id",
                "virtual_cluster",
                "gpus",
                "submit_s",
                "duration_s",
                "first_start_s",
                "end_s",
                "preemptions",
                "lost_s",
                "never_reason",
            ]
        )
        for r in result.records:
            writer.writerow(
                [
                    r.job_id,
                    r.virtual_cluster,
                    r.gpus,
                    r.submit_s,
                    r.duration_s,
                    "" if r.first_start_s is None else r.first_start_s,
                    "" if r.end_s is None else r.end_s,
                    r.preemptions,
                    r.lost_s,
                    r.never_reason or "",
                ]
            )


def sampled(times: Any, values: Any, points: int = 2_000) -> tuple[Any, Any]:
    """The step function's value at ``points`` evenly spaced instants (for plotting)."""
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    if len(t) <= points:
        return t, v
    grid = np.linspace(t[0], t[-1], points)
    return grid, v[np.searchsorted(t, grid, side="right") - 1]
