"""``shoal node show NODE``: a node's resources, its recent load (docs/metrics.md) and the tasks
on it."""

from __future__ import annotations

import time
from typing import Any

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.cli.render import console, new_table

BARS = "▁▂▃▄▅▆▇█"
# (series, label, the series it is a share of: its bar's top) in the order shown
FIGURES = (
    ("cpuUsed", "cpu used (cores)", "cpuCapacity"),
    ("cpuAllocated", "cpu reserved (cores)", "cpuCapacity"),
    ("memoryUsedMiB", "memory used (MiB)", "memoryCapacityMiB"),
    ("memoryAllocatedMiB", "memory reserved (MiB)", "memoryCapacityMiB"),
    ("hostCpuPercent", "host cpu (%)", None),
    ("hostMemoryUsedMiB", "host memory (MiB)", "hostMemoryTotalMiB"),
    ("gpuUsed", "gpu busy (GPUs)", "gpuCapacity"),
    ("gpuMemoryUsedMiB", "gpu memory (MiB)", "gpuMemoryTotalMiB"),
)


def sparkline(values: list[float | None], top: float | None) -> str:
    """One character per point, scaled to ``top`` (else to the largest value); a gap is ' '."""
    known = [v for v in values if v is not None]
    scale = top if top else max(known, default=0.0)
    if not scale:
        return "".join(" " if v is None else BARS[0] for v in values)
    return "".join(
        " " if v is None else BARS[min(len(BARS) - 1, int(v / scale * (len(BARS) - 1) + 0.5))]
        for v in values
    )


def _latest(values: list[float | None]) -> float | None:
    return next((v for v in reversed(values) if v is not None), None)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.4g}"


def _load_table(metrics: dict[str, Any]) -> None:
    series = metrics["series"]
    table = new_table()
    for column in ("figure", "now", "max", f"last {len(metrics['t'])} x {metrics['step']:g}s"):
        table.add_column(column)
    for key, label, top_key in FIGURES:
        values = series[key]
        known = [v for v in values if v is not None]
        if not known:
            continue  # never measured here (GPU figures without NVML)
        top = _latest(series[top_key]) if top_key else 100.0
        table.add_row(label, _number(_latest(values)), _number(max(known)), sparkline(values, top))
    for gpu in metrics["gpus"]:
        values = gpu["series"]["utilizationPercent"]
        known = [v for v in values if v is not None]
        latest, peak = _number(_latest(values)), _number(max(known, default=None))
        table.add_row(f"gpu {gpu['index']} busy (%)", latest, peak, sparkline(values, 100.0))
    console.print(table)


def _tasks_table(tasks: list[dict[str, Any]]) -> None:
    if not tasks:
        console.print("no task on this node")
        return
    table = new_table()
    for column in ("job", "task", "user", "state", "cpu", "mem (MiB)", "gpus", "since"):
        table.add_column(column)
    for task in tasks:
        since = task["startedAt"] or task["placedAt"]
        table.add_row(
            f"{task['jobId']} {task['jobName']}",
            f"{task['role']}/{task['index']}",
            task["user"],
            task["state"],
            f"{task['cpu']:g}",
            str(task["memoryMiB"]),
            ",".join(map(str, task["gpus"])) or "-",
            f"{max(time.time() - since, 0):.0f}s ago",
        )
    console.print(table)


@api_errors
def show(
    name: str = typer.Argument(..., help="The node."),
    minutes: float = typer.Option(10.0, "--minutes", min=1, max=1440, help="How far back."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """A node: state and resources, its load over the last minutes (its tasks, its host, its
    GPUs when NVML reports them) and the tasks on it."""
    api = client()
    nodes = [n for n in api.nodes() if n["name"] == name]
    if not nodes:
        raise fail(f"no node {name!r}; see `shoal node list`")
    (node,) = nodes
    step = max(10.0, minutes * 60 / 30)  # about 30 points
    metrics = api.node_metrics(name, since=-minutes * 60, step=step)
    tasks = api.node_tasks(name)
    if emit({"node": node, "metrics": metrics, "tasks": tasks}, output):
        return
    a = node["allocated"]
    console.print(
        f"node {name} · {node['state']} · cpu {a['cpus']:g}/{node['cpus']:g} · memory "
        f"{a['memoryMiB']:g}/{node['memoryMiB']} MiB · gpu {a['gpus']:g}/{node['gpus']}"
        + (f" {node['gpuType']}" if node["gpuType"] else "")
        + f" · agent {node.get('agentVersion') or '-'}",
        highlight=False,
    )
    _load_table(metrics)
    _tasks_table(tasks)
