"""Tables of ``bench/api.py``: printed with rich and written as the Markdown region of
docs/benchmarks.md. Pure formatting, plus ``commit`` (git) and ``log``."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

TARGET_SUBMITS = 1000  # acknowledged submissions/s, 20 clients (issue #11)
TARGET_READ_P99_MS = 50
TARGET_RSS_MIB = 250


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def commit(root: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "src"],
        capture_output=True,
        text=True,
        check=False,
    )
    return (out.stdout.strip() or "unknown") + (" (src/ modified)" if dirty.stdout.strip() else "")


SHAPES = {
    "process": "scheduler in its own process",
    "thread": "scheduler in a thread of the API's",
    None: "the API alone",
    True: "scheduler in a thread of the API's",  # results of runs before item 3
    False: "the API alone",
}


def submit_rows(runs: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for run in runs:
        rows.append(
            [
                SHAPES[run["scheduler"]],
                "one file, a new name each" if run["same_file"] else "a different file each",
                f"{run['per_second']:,.0f}",
                f"{run['acknowledged']:,} / {run['stored']:,}",
                f"{run['server_cpu_ms']:.2f}",
                f"{run['client_cpu_ms']:.2f}",
                f"{run['p50_ms']:.1f} / {run['p99_ms']:.1f}",
            ]
        )
    return rows


SUBMIT_HEAD = [
    "server",
    "job file",
    "acknowledged/s",
    "acknowledged / in the store after",
    "server CPU ms each",
    "client CPU ms each",
    "latency p50 / p99 ms",
]


def read_rows(reads: dict[str, Any]) -> list[list[str]]:
    rows = []
    shapes = (("busy", "process"), ("thread", "thread"), ("alone", None))
    for key, label in ((key, SHAPES[shape]) for key, shape in shapes):
        part = reads.get(key)
        if not part:
            continue
        for kind, name in (("list", "job list"), ("status", "job status"), ("report", "report")):
            r = part.get(kind)
            if r is None:  # runs before agent reports were timed
                continue
            rows.append(
                [
                    label,
                    name,
                    f"{r['count']:,}",
                    f"{r['p50_ms']:.1f}",
                    f"{r['p99_ms']:.1f}",
                    f"{r['max_ms']:.1f}",
                    f"{part['server_busy']:.0%}",
                    f"{part.get('scheduler_busy', 0):.0%}",
                ]
            )
    return rows


READ_HEAD = [
    "server",
    "read",
    "calls",
    "p50 ms",
    "p99 ms",
    "max ms",
    "API process CPU busy",
    "scheduler process CPU busy",
]


def both_peaks(history: dict[str, Any]) -> float:
    """The API process's peak RSS plus the scheduler process's: what the target bounds."""
    return float(history["peak_rss_mib"] + history["scheduler_peak_rss_mib"])


def history_rows(history: dict[str, Any]) -> list[list[str]]:
    return [
        ["finished jobs / their tasks", f"{history['jobs']:,} / {history['tasks']:,}"],
        ["store size", f"{history['db_mib']:,.0f} MiB (written in {history['insert_s']} s)"],
        ["API process RSS, idle after start", f"{history['idle_rss_mib']:.0f} MiB"],
        ["API process RSS after the reads and 1,000 submissions", f"{history['rss_mib']:.0f} MiB"],
        ["API process peak RSS (VmHWM)", f"{history['peak_rss_mib']:.0f} MiB"],
        ["scheduler process RSS, idle after start", f"{history['scheduler_idle_rss_mib']:.0f} MiB"],
        ["scheduler process RSS at the end", f"{history['scheduler_rss_mib']:.0f} MiB"],
        ["scheduler process peak RSS (VmHWM)", f"{history['scheduler_peak_rss_mib']:.0f} MiB"],
        ["the two peaks together", f"{both_peaks(history):.0f} MiB"],
        *[[f"{name}, median", f"{ms:,.1f} ms"] for name, ms in history["calls"].items()],
    ]


def _rich(title: str, head: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for column in head:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def print_tables(data: dict[str, Any]) -> None:
    console = Console(width=200)
    console.print(f"machine: {data['machine']}; commit {data['commit']}")
    if "submit" in data:
        console.print(_rich("submissions", SUBMIT_HEAD, submit_rows(data["submit"])))
    if "reads" in data:
        console.print(_rich("reads", READ_HEAD, read_rows(data["reads"])))
    if "history" in data:
        console.print(_rich("history", ["", ""], history_rows(data["history"])))


def _md(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _verdict(measured: float, target: float) -> str:
    return "met" if measured <= target else f"missed by {measured - target:.0f} MiB"


def markdown(data: dict[str, Any]) -> str:
    params = data["parameters"]
    load = ", ".join(f"{x:.2f}" for x in data["loadavg_before"])
    load_after = ", ".join(f"{x:.2f}" for x in data["loadavg_after"])
    met = sum(1 for run in data["submit"] if run["per_second"] >= TARGET_SUBMITS)
    rates = ", ".join(f"{run['per_second']:,.0f}" for run in data["submit"])
    reads = data["reads"]
    busy_p99 = max(reads["busy"][k]["p99_ms"] for k in ("list", "status"))
    thread_p99 = max(reads["thread"][k]["p99_ms"] for k in ("list", "status"))
    report_p99 = reads["busy"]["report"]["p99_ms"]
    history = data["history"]
    parts = [
        f"Measured {data['generated_at']} at commit `{data['commit']}` on {data['machine']}; "
        f"load average {load} before and {load_after} after (1, 5, 15 min; the machine is "
        "shared). Raw numbers: `bench/results/api.json`.",
        "",
        f"**Submissions** ({params['submissions']:,} per run after 200 untimed, "
        f"{params['clients']} clients). Target ≥ {TARGET_SUBMITS:,}/s: met in {met} of "
        f"{len(data['submit'])} runs ({rates}/s, in the order of the table).",
        "",
        _md(SUBMIT_HEAD, submit_rows(data["submit"])),
        "",
        f"**Reads while the scheduler works** ({reads['nodes']:,} nodes of 8 GPUs, "
        f"{reads['queue']:,} queued jobs of the scheduler benchmark's mix; the first cycle "
        f"placed {reads['placed']:,} of them in {reads['first_cycle_s']} s; 4 readers, each a "
        f"request every 100 ms for {params['read_seconds']:g} s). Target "
        f"p99 ≤ {TARGET_READ_P99_MS} ms: {busy_p99:,.1f} ms with the scheduler in its own "
        f"process ({thread_p99:,.1f} ms with it in a thread of the API's); an agent's "
        f"heartbeat report (one more client, every 100 ms) p99 {report_p99:,.1f} ms.",
        "",
        _md(READ_HEAD, read_rows(reads)),
        "",
        f"**Memory with {history['jobs']:,} finished jobs in history.** Target ≤ "
        f"{TARGET_RSS_MIB} MiB for the API process and the scheduler process together: "
        f"{both_peaks(history):.0f} MiB, {_verdict(both_peaks(history), TARGET_RSS_MIB)} (the "
        f"API process peaked at {history['peak_rss_mib']:.0f} MiB, the scheduler process at "
        f"{history['scheduler_peak_rss_mib']:.0f} MiB).",
        "",
        _md(["", ""], history_rows(history)),
    ]
    return "\n".join(parts)
