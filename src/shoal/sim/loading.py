"""Reading a trace in any supported format, with the cluster's rules for GPU-count-only jobs."""

from __future__ import annotations

from pathlib import Path

from shoal.sim.alibaba import read_alibaba_pods
from shoal.sim.cluster import SimCluster
from shoal.sim.traces import TraceFormat, detect_format, read_philly, read_shoal, read_tiresias
from shoal.sim.workload import Trace, TraceError


def load_trace(
    path: Path, cluster: SimCluster, fmt: TraceFormat | None = None, limit: int | None = None
) -> Trace:
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    if limit is not None and limit < 1:
        raise TraceError(f"--limit must be at least 1, got {limit}")
    chosen = fmt or detect_format(path)
    rules = cluster.gang_rules
    if chosen is TraceFormat.PHILLY:
        return read_philly(path, rules, limit)
    if chosen is TraceFormat.TIRESIAS:
        return read_tiresias(path, rules, limit)
    if chosen is TraceFormat.ALIBABA:
        return read_alibaba_pods(path, limit)
    return read_shoal(path, rules, limit)
