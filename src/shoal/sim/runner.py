"""One use case for the CLI and the benchmarks: load a cluster and a trace, replay it under
one or more policies, and summarise each run.

A cluster with scaling pools is replayed in several forms per policy: first as a fixed-size
cluster (every pool at its maximum, always on), then scaling, once per idle timeout asked for
(or with the cluster file's own), so node-hours, cost and queueing delay compare side by side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.sim.cluster import SimCluster, load_cluster
from shoal.sim.engine import SimConfig, Simulator
from shoal.sim.loading import load_trace
from shoal.sim.metrics import summarize
from shoal.sim.policies import DEFAULT_LAS_THRESHOLDS, make_policy
from shoal.sim.records import SimResult
from shoal.sim.traces import TraceFormat
from shoal.sim.workload import Trace
from shoal.spec.units import format_duration

# (policy, jobs finished, jobs in the trace)
PolicyProgress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class SimRequest:
    trace: Path
    cluster: Path
    policies: tuple[str, ...] = ("shoal",)
    trace_format: TraceFormat | None = None
    limit: int | None = None
    config: SimConfig = field(default_factory=SimConfig)
    las_thresholds: tuple[float, ...] = DEFAULT_LAS_THRESHOLDS
    las_max_preemptions: int | None = None
    idle_timeouts: tuple[float, ...] = ()  # scaling pools: replay once per idle timeout (s)
    fixed_baseline: bool = True  # scaling pools: also replay the pools at their max, always on


@dataclass(frozen=True, slots=True)
class SimOutcome:
    cluster: SimCluster
    trace: Trace
    results: list[SimResult]
    summaries: list[dict[str, Any]]


def run_simulations(request: SimRequest, progress: PolicyProgress | None = None) -> SimOutcome:
    """Raises ClusterError, TraceError or ValueError (unknown policy) before replaying."""
    cluster = load_cluster(request.cluster)
    policies = [
        make_policy(name, request.las_thresholds, request.las_max_preemptions)
        for name in request.policies
    ]
    trace = load_trace(request.trace, cluster, request.trace_format, request.limit)
    results = []
    for policy in policies:
        for variant, form in cluster_forms(cluster, request.idle_timeouts, request.fixed_baseline):
            simulator = Simulator(form, trace, policy, request.config)
            report = None
            if progress is not None:

                def report(done: int, total: int, name: str = f"{policy.name} {variant}") -> None:
                    progress(name.strip(), done, total)

            result = simulator.run(report)
            result.variant = variant
            results.append(result)
    return SimOutcome(cluster, trace, results, [summarize(r) for r in results])


def cluster_forms(
    cluster: SimCluster, idle_timeouts: tuple[float, ...], fixed_baseline: bool = True
) -> list[tuple[str, SimCluster]]:
    """The forms of ``cluster`` to replay, each with its label ("" for a cluster without pools,
    "fixed", "idle-15m")."""
    if not cluster.pools:
        return [("", cluster)]
    forms = [("fixed", cluster.fixed())] if fixed_baseline else []
    if idle_timeouts:
        forms += [(idle_label(t), cluster.with_idle_timeout(t)) for t in idle_timeouts]
    else:
        own = {p.template.idle_timeout_s for p in cluster.pools}
        forms.append((idle_label(own.pop()) if len(own) == 1 else "scaling", cluster))
    return forms


def idle_label(seconds: float) -> str:
    return f"idle-{format_duration(int(seconds))}"
