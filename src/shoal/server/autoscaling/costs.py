"""What the pools' machines cost, per user or virtual cluster (``shoal usage``; docs/cloud.md).

A task on a pool machine is charged its share of the machine's price for as long as it ran:
the largest of its shares of the machine's cpu, memory and GPUs (what it kept others from
using), times the price per hour. What no task was charged is the pools' idle cost, shown by
``shoal cluster pools`` (node-hours at price, less what tasks were charged).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from shoal.store.models import CloudInstanceRow, Job, Task

ACTIVE = ("WAITING", "RUNNING", "STOPPING")


@dataclass
class Charge:
    node_hours: float = 0.0  # machine-hours, weighted by the task's share
    cost: float = 0.0


def share(task_cpu: int, task_mib: int, task_gpus: int, machine: CloudInstanceRow) -> float:
    parts = [
        task_cpu / machine.cpu_millis if machine.cpu_millis else 0.0,
        task_mib / machine.memory_mib if machine.memory_mib else 0.0,
        task_gpus / machine.gpus if machine.gpus else 0.0,
    ]
    return min(1.0, max(parts))


def charges(
    session: Session, by: str, since_s: float | None, now: float, user: str | None = None
) -> dict[str, Charge]:
    """Per user or VC (``by``), what their jobs' tasks on pool machines cost, over the jobs
    active in the window (as ``accounting.usage`` counts them)."""
    query = (
        select(
            Job.user,
            Job.virtual_cluster,
            Job.state,
            Job.completed_at,
            Task.cpu_millis,
            Task.memory_mib,
            Task.gpu_indices,
            Task.started_at,
            Task.finished_at,
            CloudInstanceRow,
        )
        .join(Task, Task.job_id == Job.id)
        .join(CloudInstanceRow, CloudInstanceRow.node == Task.node)
        .where(Task.started_at.is_not(None))
    )
    if since_s is not None:
        query = query.where(or_(Job.completed_at.is_(None), Job.completed_at >= now - since_s))
    if user is not None:
        query = query.where(Job.user == user)
    found: dict[str, Charge] = {}
    for row in session.execute(query):
        machine: CloudInstanceRow = row.CloudInstanceRow
        end = row.finished_at
        if end is None:
            end = now if row.state in ACTIVE else (row.completed_at or now)
        hours = max(0.0, end - row.started_at) / 3600
        part = share(row.cpu_millis, row.memory_mib, len(row.gpu_indices or ()), machine)
        charge = found.setdefault(row.user if by == "user" else row.virtual_cluster, Charge())
        charge.node_hours += hours * part
        charge.cost += hours * part * machine.price_per_hour
    return found
