"""PNG plots of simulation results (matplotlib, no display needed): the JCT CDF, the queue
length over time and the GPU utilisation over time, one line per policy."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from shoal.sim.records import SimResult
from shoal.sim.report import sampled

DAY = 86_400.0


def plot_all(directory: Path, results: list[SimResult]) -> list[Path]:
    return [
        _jct_cdf(directory / "jct_cdf.png", results),
        _over_time(directory / "queue_length.png", results, "queued", "jobs waiting"),
        _over_time(directory / "utilization.png", results, "busy_gpus", "GPU utilisation"),
    ]


def _jct_cdf(path: Path, results: list[SimResult]) -> Path:
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for result in results:
        jct = np.sort([r.jct_s for r in result.records if r.end_s is not None])
        if len(jct):
            axes.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=result.run)
    axes.set_xscale("log")
    axes.set_xlabel("job completion time (s, log scale)")
    axes.set_ylabel("fraction of jobs")
    return _save(figure, axes, f"JCT CDF: {results[0].trace}", path)


def _over_time(path: Path, results: list[SimResult], series: str, label: str) -> Path:
    figure, axes = plt.subplots(figsize=(9, 4.2))
    unit = "days"
    for result in results:
        timeline = result.timeline
        if not len(timeline):
            continue
        times, values = sampled(timeline.times, getattr(timeline, series))
        if series == "busy_gpus":
            values = values / max(result.total_gpus, 1)
        span = times[-1] - times[0]
        scale, unit = (DAY, "days") if span > 2 * DAY else (3600.0, "hours")
        axes.step((times - times[0]) / scale, values, where="post", label=result.run, lw=0.8)
    axes.set_xlabel(f"time since the first submission ({unit})")
    axes.set_ylabel(label)
    return _save(figure, axes, f"{label}: {results[0].trace} on {results[0].cluster}", path)


def _save(figure: Figure, axes: Axes, title: str, path: Path) -> Path:
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
