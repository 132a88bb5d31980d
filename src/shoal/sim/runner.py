"""One use case for the CLI and the benchmarks: load a cluster and a trace, replay it under
one or more policies, and summarise each run."""

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
        simulator = Simulator(cluster, trace, policy, request.config)
        report = None
        if progress is not None:

            def report(done: int, total: int, name: str = policy.name) -> None:
                progress(name, done, total)

        results.append(simulator.run(report))
    return SimOutcome(cluster, trace, results, [summarize(r) for r in results])
