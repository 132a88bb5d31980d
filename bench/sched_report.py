"""Reporting for ``bench/scheduler.py``: the machine, and every table both as rich output and as
the Markdown that goes between the scheduler markers of docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import shoal.core

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- scheduler:begin -->"
END = "<!-- scheduler:end -->"
TARGET_JOBS_PER_SECOND = 5_000  # issue #5: gang jobs admitted per second at 5,000 nodes
TARGET_NODES = 5_000
TARGET_P99_SECONDS = 0.050  # issue #5: scheduling-cycle p99
# Published numbers, NOT measured by this script (context only).
REFERENCES = (
    (
        "kube-scheduler CI floor, SchedulingBasic 5000Nodes_10000Pods",
        "680 pods/s",
        "kubernetes/kubernetes test/integration/scheduler_perf/misc/performance-config.yaml",
    ),
    (
        "kube-scheduler CI floor, extended (GPU-like) resources, 5000 nodes",
        "180 pods/s",
        "same file, SchedulingWithExtendedResource/5000pods_5000nodes",
    ),
    ("Kueue end-to-end admission", "~43 workloads/s", "figure quoted in the benchmark brief"),
)


@dataclass(frozen=True)
class Section:
    """One table: rendered by rich on the console and as Markdown for the docs."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""


# --------------------------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    """Output of a read-only git command in the repository ("" if git is unavailable)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip()


def _proc_field(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine_info() -> dict[str, Any]:
    """What ran the benchmark: CPU, cores, RAM, Python, and the commit (marked if the scheduling
    core or the benchmark differ from it)."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", "src/shoal/core", "bench")
    core = Path(shoal.core.__file__).resolve().parent
    note = "with local changes in src/shoal/core or bench" if dirty else ""
    if not core.is_relative_to(ROOT):
        note = f"(the scheduling core imported from {core.parent.parent}, not this checkout)"
    memory = _proc_field("/proc/meminfo", "MemTotal")
    ram_gib = int(memory.split()[0]) / 2**20 if memory[:1].isdigit() else 0.0
    return {
        "commit": commit,
        "commit_note": note,
        "cpu_model": _proc_field("/proc/cpuinfo", "model name"),
        "cpu_count": os.cpu_count(),
        "ram_gib": round(ram_gib, 1),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "load_average_start": os.getloadavg(),
    }


def machine_section(machine: dict[str, Any]) -> Section:
    start = ", ".join(f"{x:.1f}" for x in machine["load_average_start"])
    end = ", ".join(f"{x:.1f}" for x in machine.get("load_average_end", ()))
    commit = f"`{machine['commit']}` {machine['commit_note']}".strip()
    return Section(
        "Machine",
        ["", ""],
        [
            ["CPU", f"{machine['cpu_model']}, {machine['cpu_count']} cores"],
            ["RAM", f"{machine['ram_gib']:.1f} GiB"],
            ["Python", machine["python"]],
            ["Platform", machine["platform"]],
            ["shoal commit", commit],
            ["load average (1, 5, 15 min) at start / end", f"{start} / {end}"],
        ],
    )


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _s(seconds: float) -> str:
    return f"{seconds:,.2f} s"


Row = tuple[str, Callable[[dict[str, Any]], str]]
RESULT_ROWS: tuple[Row, ...] = (
    ("queued gang jobs / virtual clusters", lambda r: f"{r['jobs']:,} / {r['vcs']}"),
    ("cold: bounded cycles until the cluster is full", lambda r: str(r["cold"].get("cycles", 1))),
    ("cold: wall time of those cycles", lambda r: _s(r["cold"]["seconds"])),
    ("cold: CPU time of those cycles", lambda r: _s(r["cold"]["cpu_seconds"])),
    (
        "cold: longest cycle (wall)",
        lambda r: _ms(r["cold"].get("max_cycle_seconds", r["cold"]["seconds"])),
    ),
    (
        "cold: jobs admitted / tasks placed",
        lambda r: f"{r['cold']['admitted']:,} / {r['cold']['tasks_placed']:,}",
    ),
    ("cold: **gang jobs admitted/s**", lambda r: f"**{r['cold']['admitted_per_second']:,.0f}**"),
    (
        "cold: gang jobs admitted per CPU-second",
        lambda r: f"{r['cold']['admitted'] / r['cold']['cpu_seconds']:,.0f}",
    ),
    (
        "cold: pending / infeasible",
        lambda r: f"{r['cold']['pending']:,} / {r['cold']['infeasible']:,}",
    ),
    ("steady: cycles", lambda r: str(r["steady"]["cycles"])),
    ("steady: mean running tasks", lambda r: f"{r['steady']['mean_running_allocations']:,.0f}"),
    ("steady: p50 cycle (wall)", lambda r: _ms(r["steady"]["p50_seconds"])),
    ("steady: p50 cycle (CPU)", lambda r: _ms(r["steady"]["p50_cpu_seconds"])),
    ("steady: **p99 cycle** (wall)", lambda r: f"**{_ms(r['steady']['p99_seconds'])}**"),
    ("steady: p99 cycle (CPU)", lambda r: _ms(r["steady"]["p99_cpu_seconds"])),
    (
        "steady: jobs admitted / preempted",
        lambda r: f"{r['steady']['admitted']:,} / {r['steady']['preempted']:,}",
    ),
    (
        "steady: admitted/s in schedule()",
        lambda r: f"{r['steady']['admitted_per_second']:,.0f}",
    ),
    ("snapshot size: nodes + queue", lambda r: f"{r['memory']['snapshot_cold_mib']:,.1f} MiB"),
    (
        "snapshot size: + running tasks (last steady)",
        lambda r: f"{r['memory']['snapshot_steady_mib']:,.1f} MiB",
    ),
    ("peak RSS (one process per size)", lambda r: f"{r['memory']['peak_rss_mib']:,.0f} MiB"),
    ("RSS after imports, before the cluster", lambda r: f"{r['memory']['base_rss_mib']:,.0f} MiB"),
)


def results_section(results: list[dict[str, Any]]) -> Section:
    headers = ["metric", *(f"{r['nodes']:,} nodes" for r in results)]
    rows = [[label, *(render(r) for r in results)] for label, render in RESULT_ROWS]
    note = (
        "p99 is the nearest-rank 99th percentile; with fewer than 100 steady cycles it is the "
        "slowest cycle. Steady cycles per size: "
        + ", ".join(f"{r['steady']['cycles']} at {r['nodes']:,} nodes" for r in results)
        + "."
    )
    return Section("Throughput, latency and memory (measured in this run)", headers, rows, note)


def targets_section(results: list[dict[str, Any]]) -> Section:
    """Each target against the wall-time figure and the CPU-time one (a loaded machine slows the
    first far more than the second)."""
    rows = []
    for r in results:
        if r["nodes"] == TARGET_NODES:
            wall = r["cold"]["admitted_per_second"]
            cpu = r["cold"]["admitted"] / r["cold"]["cpu_seconds"]
            verdict = "met" if wall >= TARGET_JOBS_PER_SECOND else "missed"
            rows.append(
                [
                    f"≥ {TARGET_JOBS_PER_SECOND:,} gang jobs admitted/s at {TARGET_NODES:,} nodes"
                    " (cold cycle)",
                    f"{wall:,.0f}/s (wall); {cpu:,.0f} per CPU-second",
                    f"{verdict}: {wall / TARGET_JOBS_PER_SECOND:.2f}× the target (wall), "
                    f"{cpu / TARGET_JOBS_PER_SECOND:.2f}× (CPU)",
                ]
            )
    for r in results:
        wall, cpu = r["steady"]["p99_seconds"], r["steady"]["p99_cpu_seconds"]
        verdict = "met" if wall <= TARGET_P99_SECONDS else "missed"
        rows.append(
            [
                f"cycle p99 ≤ {_ms(TARGET_P99_SECONDS)} at {r['nodes']:,} nodes",
                f"{_ms(wall)} (wall); {_ms(cpu)} (CPU)",
                f"{verdict}: {wall / TARGET_P99_SECONDS:,.0f}× the target (wall), "
                f"{cpu / TARGET_P99_SECONDS:,.0f}× (CPU)",
            ]
        )
    return Section("Issue #5 targets", ["target", "measured", "verdict"], rows)


def scaling_section(scaling: dict[str, Any]) -> Section:
    points = scaling["points"]
    first = points[0]["steady_cpu_seconds"] / points[0]["queued"]
    rows = []
    for p in points:
        per_job = p["steady_cpu_seconds"] / p["queued"]
        rows.append(
            [
                f"{p['queued']:,}",
                _s(p["cold_seconds"]),
                _s(p["cold_cpu_seconds"]),
                _s(p["steady_seconds"]),
                _s(p["steady_cpu_seconds"]),
                f"{per_job * 1e6:,.0f} µs",
                f"{per_job / first:.2f}",
                f"{p['steady_preempted']:,}",
            ]
        )
    cold, steady = scaling["fit_cold_cpu"], scaling["fit_steady_cpu"]
    note = (
        f"Fitted on CPU time: steady cycle ∝ queue^{steady['exponent']:.2f} "
        f"(line: {steady['seconds_per_job'] * 1e6:,.0f} µs per queued job, "
        f"R² {steady['r_squared']:.2f}); cold cycle ∝ queue^{cold['exponent']:.2f} "
        f"({cold['seconds_per_job'] * 1e6:,.0f} µs per queued job, R² {cold['r_squared']:.2f}). "
        "An exponent ≤ 1 means the cycle grows no worse than linearly with the queue."
    )
    headers = [
        "queued jobs",
        "cold wall",
        "cold CPU",
        "steady p50 wall",
        "steady p50 CPU",
        "steady CPU per queued job",
        "per-job cost ÷ first",
        "preempted (all steady cycles)",
    ]
    title = f"Cycle cost against queue length at {scaling['nodes']:,} nodes"
    return Section(title, headers, rows, note)


def profile_sections(profile: dict[str, Any]) -> list[Section]:
    sections = []
    for kind in ("cold", "steady"):
        prof = profile[kind]
        total = prof["total_seconds"]
        shares = [[label, f"{share:.0%}"] for label, share in prof["shares"].items() if share]
        sections.append(
            Section(
                f"Where a {kind} cycle's time goes at {profile['nodes']:,} nodes "
                f"(cProfile, {_s(total)} profiled)",
                ["function (cumulative, nested)", "share of the cycle"],
                shares,
            )
        )
        top = [
            [f"`{r['function']}`", f"{r['calls']:,}", f"{r['tottime']:.3f}", f"{r['cumtime']:.3f}"]
            for r in prof["top_cumulative"]
        ]
        sections.append(
            Section(
                f"Top functions of the {kind} cycle by cumulative time",
                ["function", "calls", "own s", "cumulative s"],
                top,
            )
        )
    return sections


def reference_section() -> Section:
    rows = [list(row) for row in REFERENCES]
    return Section(
        "Published numbers for context (NOT measured in this run)",
        ["system / test", "throughput", "source"],
        rows,
        "End-to-end systems placing single pods or workloads; not comparable one for one with "
        "one in-process schedule() call placing whole gangs.",
    )


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def print_sections(console: Console, sections: list[Section]) -> None:
    for section in sections:
        table = Table(title=section.title, title_justify="left")
        for k, header in enumerate(section.headers):
            table.add_column(header, justify="left" if k == 0 else "right", overflow="fold")
        for row in section.rows:
            table.add_row(*(cell.replace("**", "").replace("`", "") for cell in row))
        console.print(table)
        if section.note:
            console.print(section.note)


def markdown(sections: list[Section], intro: str) -> str:
    parts = [intro.strip(), ""]
    for section in sections:
        parts += [f"**{section.title}**", ""]
        parts.append("| " + " | ".join(section.headers) + " |")
        parts.append("|---|" + "---:|" * (len(section.headers) - 1))
        parts += ["| " + " | ".join(row) + " |" for row in section.rows]
        parts.append("")
        if section.note:
            parts += [section.note, ""]
    return "\n".join(parts).rstrip() + "\n"


def replace_region(doc: str, fragment: str) -> str:
    """``doc`` with the lines between the scheduler markers (each alone on its line) replaced;
    nothing else changes."""
    lines = doc.split("\n")
    begins = [k for k, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [k for k, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError(f"docs/benchmarks.md needs exactly one {BEGIN} ... {END} region")
    body = fragment.rstrip("\n").split("\n")
    return "\n".join([*lines[: begins[0] + 1], *body, *lines[ends[0] :]])
