"""Summary metrics of a simulation, computed from the per-job records and the timeline only."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from shoal.sim.records import JobRecord, SimResult, Timeline

PERCENTILES = (50, 95, 99)


def _spread(values: list[float], prefix: str) -> dict[str, float]:
    if not values:
        return {f"avg_{prefix}_s": 0.0, **{f"p{p}_{prefix}_s": 0.0 for p in PERCENTILES}}
    data = np.asarray(values, dtype=float)
    out = {f"avg_{prefix}_s": float(data.mean())}
    for p in PERCENTILES:
        out[f"p{p}_{prefix}_s"] = float(np.percentile(data, p))
    return out


def time_average(timeline: Timeline, values: Any, start: float, end: float) -> float:
    """The mean of a step function (each sample holds until the next) over [start, end]."""
    if end <= start or len(timeline) == 0:
        return 0.0
    times = np.clip(np.asarray(timeline.times, dtype=float), start, end)
    widths = np.diff(np.append(times, end))
    return float(np.dot(np.asarray(values, dtype=float), widths) / (end - start))


def gpu_seconds_used(timeline: Timeline) -> float:
    """The integral of busy GPUs over time (each sample holds until the next)."""
    if len(timeline) < 2:
        return 0.0
    times = np.asarray(timeline.times, dtype=float)
    return float(np.dot(np.asarray(timeline.busy_gpus[:-1], dtype=float), np.diff(times)))


def _jain(values: list[float]) -> float:
    """Jain's fairness index: 1.0 when every VC fares the same, 1/n when one takes all."""
    if not values:
        return 1.0
    data = np.asarray(values, dtype=float)
    return float(data.sum() ** 2 / (len(data) * (data**2).sum())) if data.any() else 1.0


def per_vc(records: list[JobRecord]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[JobRecord]] = defaultdict(list)
    for record in records:
        groups[record.virtual_cluster].append(record)
    out: dict[str, dict[str, float]] = {}
    for vc in sorted(groups):
        done = [r for r in groups[vc] if r.completed]
        delays = [r.queue_delay_s for r in done]
        slowdowns = [r.jct_s / max(r.duration_s, 1.0) for r in done]
        out[vc] = {
            "jobs": len(groups[vc]),
            "completed": len(done),
            "avg_jct_s": float(np.mean([r.jct_s for r in done])) if done else 0.0,
            "avg_queue_delay_s": float(np.mean(delays)) if delays else 0.0,
            "p95_queue_delay_s": float(np.percentile(delays, 95)) if delays else 0.0,
            "avg_slowdown": float(np.mean(slowdowns)) if slowdowns else 0.0,
            "gpu_hours": sum(r.gpus * r.duration_s for r in groups[vc]) / 3600,
            "preemptions": sum(r.preemptions for r in groups[vc]),
        }
    return out


def summarize(result: SimResult) -> dict[str, Any]:
    records = result.records
    done = [r for r in records if r.completed]
    start = min((r.submit_s for r in records), default=0.0)
    end = max((r.end_s for r in done if r.end_s is not None), default=start)
    timeline = result.timeline
    capacity = max(result.total_gpus, 1)
    vcs = per_vc(records)
    return {
        "policy": result.policy,
        "run": result.run,
        "variant": result.variant,
        "cluster": result.cluster,
        "trace": result.trace,
        "jobs": len(records),
        "completed": len(done),
        "never_completed": len(records) - len(done),
        **_spread([r.jct_s for r in done], "jct"),
        **_spread([r.queue_delay_s for r in done], "queue_delay"),
        "avg_run_s": float(np.mean([r.duration_s for r in done])) if done else 0.0,
        "makespan_s": end - start,
        "gpu_utilization": time_average(timeline, timeline.busy_gpus, start, end) / capacity,
        "avg_queue_length": time_average(timeline, timeline.queued, start, end),
        "max_queue_length": max(timeline.queued, default=0),
        "fragmentation": time_average(timeline, timeline.fragmented_gpus, start, end) / capacity,
        "idle_gpus_while_waiting": _idle_while_waiting(timeline, capacity, start, end) / capacity,
        "preemptions": sum(r.preemptions for r in records),
        "max_job_preemptions": max((r.preemptions for r in records), default=0),
        "lost_gpu_hours": sum(r.lost_s * r.gpus for r in records) / 3600,
        "fairness_jain": _jain([v["avg_slowdown"] for v in vcs.values() if v["completed"]]),
        "per_vc": vcs,
        "cycles": result.cycles,
        "scheduling_s": result.scheduling_s,
        "wall_s": result.wall_s,
        "total_gpus": result.total_gpus,
        **pool_costs(result, end - start),
        "notes": list(result.notes),
        "config": {
            "interval_s": result.config.interval_s,
            "checkpoint_s": result.config.checkpoint_s,
            "stop_s": result.config.stop_s,
            "autoscale_interval_s": result.config.autoscale_interval_s,
        },
    }


def pool_costs(result: SimResult, makespan_s: float) -> dict[str, Any]:
    """Node-hours and cost per pool and in all, and the share of paid GPU time that ran jobs
    (nodes outside the pools count as paid over the makespan); nothing without pools."""
    if not result.pools:
        return {}
    pools = {
        u.name: {
            "node_hours": u.node_hours,
            "cost": u.cost,
            "price_per_hour": u.price_per_hour,
            "avg_nodes": u.node_seconds / makespan_s if makespan_s > 0 else 0.0,
            "peak_nodes": u.peak_nodes,
            "launches": u.launches,
            "terminations": u.terminations,
            "idle_timeout_s": u.idle_timeout_s,
        }
        for u in result.pools
    }
    pooled_max = sum(u.max_nodes * u.gpus_per_node for u in result.pools)
    paid = sum(u.node_seconds * u.gpus_per_node for u in result.pools)
    paid += (result.total_gpus - pooled_max) * makespan_s
    busy = gpu_seconds_used(result.timeline)
    return {
        "pools": pools,
        "node_hours": sum(p["node_hours"] for p in pools.values()),
        "cost": sum(p["cost"] for p in pools.values()),
        "paid_gpu_utilization": busy / paid if paid > 0 else 0.0,
    }


def _idle_while_waiting(timeline: Timeline, capacity: int, start: float, end: float) -> float:
    """Mean idle GPUs, counted only while some job waits: capacity the policy leaves unused."""
    if len(timeline) == 0:
        return 0.0
    busy = np.asarray(timeline.busy_gpus, dtype=float)
    waiting = np.asarray(timeline.queued, dtype=float) > 0
    return time_average(timeline, np.where(waiting, capacity - busy, 0.0), start, end)
