"""The Alibaba GPU cluster trace (cluster-trace-gpu-v2023, ATC'23 "Beware of Fragmentation").

Pods become one-task jobs with their cpu, memory and GPU requests; the node list becomes the
cluster. It is a placement and fragmentation trace: many pods were still running when the trace
was cut, so their run time is censored (see ``../shared/traces/README.md``). What shoal cannot
express is changed and counted in the trace's notes:

- a fractional GPU (``gpu_milli`` < 1000) is rounded up to a whole GPU (shoal has no GPU sharing);
- pods never scheduled in the trace (no ``scheduled_time``) have no run time and are skipped;
- QoS maps to priority: ``Guaranteed`` -> prod (100), ``LS`` and ``Burstable`` -> test (10),
  ``BE`` (best effort) -> oppo (-1, idle capacity only, preempted first).
"""

from __future__ import annotations

from pathlib import Path

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import OPPORTUNISTIC, NodeState, RoleRequest
from shoal.sim.traces import csv_rows, number
from shoal.sim.workload import SimJob, Trace, TraceError, sort_jobs

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
QOS_PRIORITY = {"Guaranteed": 100, "LS": 10, "Burstable": 10, "BE": OPPORTUNISTIC}


def read_alibaba_pods(path: Path, limit: int | None = None) -> Trace:
    jobs: list[SimJob] = []
    unscheduled = fractional = typed_any = 0
    for line, row in csv_rows(path, POD_COLUMNS):
        if not row["scheduled_time"].strip():
            unscheduled += 1
            continue
        gpus = number(path, line, row, "num_gpu", int)
        if gpus == 1 and number(path, line, row, "gpu_milli", int) < 1000:
            fractional += 1
        qos = row["qos"].strip()
        if qos not in QOS_PRIORITY:
            raise TraceError(f"{path}:{line}: column 'qos' has unknown class {qos!r}")
        allowed = [spec for spec in row["gpu_spec"].strip().split("|") if spec]
        if len(allowed) > 1:
            typed_any += 1  # shoal asks for one GPU type or any
        shape = ResourceVector(
            number(path, line, row, "cpu_milli", int),
            number(path, line, row, "memory_mib", int),
            gpus,
        )
        scheduled = number(path, line, row, "scheduled_time")
        duration = max(number(path, line, row, "deletion_time") - scheduled, 0.0)
        jobs.append(
            SimJob(
                row["name"].strip(),
                number(path, line, row, "creation_time"),
                duration,
                (RoleRequest("pod", 1, shape, allowed[0] if len(allowed) == 1 else None, ()),),
                priority=QOS_PRIORITY[qos],
            )
        )
        if limit is not None and len(jobs) >= limit:
            break
    notes = (
        f"{unscheduled} pods never scheduled in the trace were skipped (no run time)",
        f"{fractional} pods asking for a fraction of a GPU were given a whole GPU",
        f"{typed_any} pods allowing several GPU models may use any model",
    )
    return Trace(sort_jobs(jobs), f"{path.name} (Alibaba v2023)", notes)


def read_alibaba_nodes(path: Path, port_range: tuple[int, int]) -> tuple[NodeState, ...]:
    nodes = []
    for line, row in csv_rows(path, NODE_COLUMNS):
        gpus = number(path, line, row, "gpu", int)
        nodes.append(
            NodeState(
                row["sn"].strip(),
                row["sn"].strip(),
                ResourceVector(
                    number(path, line, row, "cpu_milli", int),
                    number(path, line, row, "memory_mib", int),
                    gpus,
                ),
                tuple(range(gpus)),
                row["model"].strip() or None,
                port_range,
            )
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes in the node list")
    return tuple(nodes)
