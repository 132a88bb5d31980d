"""``shoal sim``: replay a job trace against a cluster description under one or more policies."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, emit, fail
from shoal.cli.render import console, err_console


class TraceFormatChoice(StrEnum):
    AUTO = "auto"
    PHILLY = "philly"
    ALIBABA = "alibaba"
    TIRESIAS = "tiresias"
    SHOAL = "shoal"


def _require_plotting() -> None:
    """--report draws PNG plots with matplotlib, an optional extra (`pip install .` skips it)."""
    from importlib.util import find_spec

    if find_spec("matplotlib") is None:
        raise fail(
            "--report draws its plots with matplotlib, which is not installed: "
            "pip install 'shoal[plots]' (or: pip install matplotlib), or leave out --report"
        )


def _policies(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise typer.BadParameter(
            "name at least one policy: fifo, shoal, las or aging", param_hint="--policy"
        )
    return names


def _thresholds(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a comma-separated list of GPU-seconds", param_hint="--las-thresholds"
        ) from None


def _idle_timeouts(text: str | None) -> tuple[float, ...]:
    from shoal.spec.units import parse_duration

    if text is None:
        return ()
    try:
        return tuple(
            float(parse_duration(part, "--idle-timeout"))
            for part in text.split(",")
            if part.strip()
        )
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--idle-timeout") from None


def sim(
    trace: Path = typer.Option(
        ..., "--trace", help="The job trace (CSV, or shoal's YAML/JSON job list)."
    ),
    cluster: Path = typer.Option(
        ..., "--cluster", help="The cluster description (YAML), e.g. examples/sim/philly-352.yaml."
    ),
    policy: str = typer.Option(
        "shoal",
        "--policy",
        help="fifo, shoal, las or aging; a comma-separated list compares them (first: baseline).",
    ),
    trace_format: TraceFormatChoice = typer.Option(
        TraceFormatChoice.AUTO, "--format", help="Trace format (auto: by header or suffix)."
    ),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Replay only the first N jobs by submission time."
    ),
    output: OutputFormat = OUTPUT_OPTION,
    report: Path | None = typer.Option(
        None, "--report", help="Write summary.json, report.md, per-job CSVs and PNG plots here."
    ),
    interval: float = typer.Option(
        0.0, "--interval", min=0.0, help="Scheduling period in seconds (0: a cycle at every event)."
    ),
    checkpoint: float = typer.Option(
        1800.0,
        "--checkpoint",
        min=0.0,
        help="Checkpoint interval (s): preempted jobs lose the work since the last one.",
    ),
    stop_grace: float = typer.Option(
        30.0,
        "--stop-grace",
        min=0.0,
        help="Seconds a preempted job holds its resources while stopping.",
    ),
    las_thresholds: str = typer.Option(
        "3600,36000", "--las-thresholds", help="LAS queue thresholds in GPU-seconds."
    ),
    las_max_preemptions: int | None = typer.Option(
        None,
        "--las-max-preemptions",
        min=1,
        help="LAS: a job preempted this many times is no longer aged (default: no limit).",
    ),
    check: bool = typer.Option(
        False, "--check", help="Verify after every cycle that nothing is over-allocated (slower)."
    ),
    idle_timeout: str | None = typer.Option(
        None,
        "--idle-timeout",
        help="Scaling pools: replay once per idle timeout, e.g. 0,5m,15m,1h "
        "(default: the cluster file's).",
    ),
    autoscale_interval: float = typer.Option(
        10.0,
        "--autoscale-interval",
        min=1.0,
        help="Scaling pools: seconds between autoscaler passes (the server's default is 10).",
    ),
    fixed_baseline: bool = typer.Option(
        True,
        "--fixed/--no-fixed",
        help="Scaling pools: also replay with every pool at its max, always on.",
    ),
) -> None:
    """Replay a trace (Philly, Alibaba, Tiresias or shoal's job list) through shoal's scheduler."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from shoal.sim.cluster import ClusterError
    from shoal.sim.engine import SimConfig
    from shoal.sim.report import cost_table, rich_table, vc_table, write_report
    from shoal.sim.runner import SimRequest, run_simulations
    from shoal.sim.traces import TraceFormat
    from shoal.sim.workload import TraceError

    if report is not None:
        _require_plotting()
    request = SimRequest(
        trace,
        cluster,
        _policies(policy),
        None if trace_format is TraceFormatChoice.AUTO else TraceFormat(trace_format.value),
        limit,
        SimConfig(interval, checkpoint, stop_grace, check, autoscale_interval),
        _thresholds(las_thresholds),
        las_max_preemptions,
        _idle_timeouts(idle_timeout),
        fixed_baseline,
    )
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console, transient=True) as bar:
        tasks: dict[str, object] = {}

        def progress(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"replaying ({name})", total=total)
            bar.update(tasks[name], completed=done)  # type: ignore[arg-type]

        try:
            outcome = run_simulations(request, progress)
        except (ClusterError, TraceError, ValueError) as error:
            raise fail(str(error)) from None
    if report is not None:
        write_report(report, outcome.results, outcome.summaries)
    if emit(outcome.summaries[0] if len(outcome.summaries) == 1 else outcome.summaries, output):
        return
    console.print(rich_table(outcome.summaries))
    if outcome.cluster.pools:
        console.print(cost_table(outcome.summaries))
    if len(outcome.summaries[0]["per_vc"]) > 1:
        console.print(vc_table(outcome.summaries))
    if report is not None:
        console.print(f"report written to {report}/ (report.md, summary.json, jobs-*.csv, *.png)")
