"""Rows for ``bench/api.py``, written straight into a server's store (before the server starts):
finished jobs that look like real ones (their job file, spec, tasks with usage, events), queued
jobs, and READY nodes. Plain multi-row inserts in large transactions: 100,000 jobs in seconds,
where 100,000 HTTP submissions and runs would take an hour.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import func, insert, select

from shoal.core.snapshot import JobRequest
from shoal.spec.loader import load_job_text
from shoal.store.db import Database, home_store
from shoal.store.models import Event, Job, Node, Task
from workload import JobFactory  # bench/workload.py, beside this script

USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")
NODE_GPUS = 8
CHUNK = 5_000  # rows per insert statement batch
# Job files of the kinds people submit, by weight: one GPU, a CPU sweep point, a 2-role job.
FILES = (
    (
        6,
        "version: 1\nname: {name}\nroles:\n  train:\n    resources: {{cpu: 8, memory: 64Gi, "
        "gpu: 1}}\n    command: python train.py --lr {{{{ params.lr }}}} --seed {seed}\n"
        "params: {{lr: '0.001'}}\nenv: {{WANDB_MODE: offline}}\n",
    ),
    (
        3,
        "version: 1\nname: {name}\nroles:\n  sweep:\n    resources: {{cpu: 2, memory: 4Gi}}\n"
        "    command: python sweep.py --point {seed}\n",
    ),
    (
        1,
        "version: 1\nname: {name}\nretries: 1\nroles:\n  learner:\n    resources: {{cpu: 8, "
        "memory: 64Gi, gpu: 2, ports: {{grpc: 1}}}}\n    command: python learner.py\n"
        "  actor:\n    instances: 3\n    resources: {{cpu: 4, memory: 8Gi}}\n"
        "    command: python actor.py --learner $SHOAL_LEARNER_HOSTS --seed {seed}\n",
    ),
)
ENDINGS = (  # state, exit class, exit code, weight
    ("SUCCEEDED", "SUCCEEDED", 0, 80),
    ("FAILED", "USER_FAILURE", 1, 15),
    ("STOPPED", "STOPPED", -210, 5),
)
ENV = {"PATH": "/home/u/.venv/bin:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def database(home: Path) -> Database:
    """The home's store: SQLite in it, or what ``store.url`` names (docs/postgresql.md)."""
    return Database(home_store(home))


def _chunks(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(rows), CHUNK):
        yield rows[start : start + CHUNK]


def add_nodes(home: Path, count: int, now: float, cores: int = 96) -> list[str]:
    """``count`` READY nodes of ``NODE_GPUS`` GPUs (as the scheduler benchmark's)."""
    rows = [
        {
            "name": f"gpu-node-{i:05d}",
            "agent_id": f"agent-{i // 100}",
            "address": f"198.{18 + i // 65536}.{(i // 256) % 256}.{i % 256}",
            "cpu_millis": cores * 1000,
            "memory_mib": 1024 * 1024,
            "gpu_indices": list(range(NODE_GPUS)),
            "gpu_type": "a100",
            "port_low": 20000,
            "port_high": 21000,
            "busy_ports": [],
            "schedulable": True,
            "state": "READY",
            "hold": "NONE",
            "epoch": 0,
            "last_seen": now,
            "registered_at": now,
            "usage": {},
            "labels": {},
        }
        for i in range(count)
    ]
    db = database(home)
    with db.engine.begin() as connection:
        for chunk in _chunks(rows):
            connection.execute(insert(Node), chunk)
    db.dispose()
    return [str(row["name"]) for row in rows]


class _Specs:
    """Each job file kind read once by the real reader; a job's own spec is a copy renamed."""

    def __init__(self) -> None:
        self.kinds = []
        for weight, text in FILES:
            (spec,) = load_job_text(text.format(name="x", seed=0), {}).jobs
            self.kinds.append((weight, text, spec.model_dump(mode="json", exclude={"secrets"})))

    def pick(self, rng: random.Random, name: str, seed: int) -> tuple[str, dict[str, Any]]:
        _, text, spec = rng.choices(self.kinds, weights=[k[0] for k in self.kinds])[0]
        return text.format(name=name, seed=seed), {**spec, "name": name}


def _job(seq: int, name: str, user: str, text: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": str(seq),
        "seq": seq,
        "name": name,
        "user": user,
        "virtual_cluster": "default",
        "version": 3,
        "priority": 10,
        "priority_class": "test",
        "attempt": 1,
        "job_retry_count": int(spec.get("job_retry_count", 0)),
        "source_format": "native",
        "source_text": text,
        "spec": spec,
        "secrets": {},
        "has_code": False,
        "data_sets": {},
        "inherited_env": ENV,
        "submit_dir": f"/home/{user}/work",
        "stop_requested": False,
        "diagnostics": "",
        "retries_user": 0,
        "retries_platform": 0,
        "retries_resource": 0,
        "array_held": False,
    }


def add_history(home: Path, count: int, now: float, nodes: list[str], seed: int = 7) -> int:
    """``count`` finished jobs over the last 30 days, with their tasks and five events each;
    returns the number of tasks written."""
    rng = random.Random(seed)
    specs = _Specs()
    db = database(home)
    tasks_written = 0
    with db.engine.begin() as connection:
        for start in range(0, count, CHUNK):
            jobs, tasks, events = [], [], []
            for seq in range(start + 1, min(count, start + CHUNK) + 1):
                job, job_tasks, job_events = _finished(rng, specs, seq, now, nodes)
                jobs.append(job)
                tasks += job_tasks
                events += job_events
            connection.execute(insert(Job), jobs)
            connection.execute(insert(Task), tasks)
            connection.execute(insert(Event), events)
            tasks_written += len(tasks)
    db.dispose()
    return tasks_written


def _finished(
    rng: random.Random, specs: _Specs, seq: int, now: float, nodes: list[str]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    user = rng.choice(USERS)
    name = f"{rng.choice(('train', 'sweep', 'eval', 'rl'))}-{seq}"
    text, spec = specs.pick(rng, name, seq)
    state, exit_class, exit_code, _ = rng.choices(ENDINGS, weights=[e[3] for e in ENDINGS])[0]
    submitted = now - 30 * 86400 + seq * (30 * 86400 / 200_000)
    launched = submitted + rng.uniform(0.05, 600)
    completed = launched + rng.uniform(5, 4 * 3600)
    job = _job(seq, name, user, text, spec)
    job |= {
        "state": state,
        "submitted_at": submitted,
        "launched_at": launched,
        "completed_at": completed,
        "exit_class": exit_class,
        "exit_code": exit_code,
        "diagnostics": "" if state == "SUCCEEDED" else f"{exit_class.lower()}: exit code 1",
    }
    node = rng.choice(nodes)
    tasks = []
    for role in spec["roles"]:
        for index in range(role["instances"]):
            gpus = role["resources"]["gpu"]
            tasks.append(
                {
                    "job_id": str(seq),
                    "job_attempt": 1,
                    "role": role["name"],
                    "index": index,
                    "attempt": 1,
                    "state": state,
                    "node": node,
                    "address": "198.18.0.1",
                    "cpu_millis": role["resources"]["cpu_millis"],
                    "memory_mib": role["resources"]["memory_mib"],
                    "gpu_indices": list(range(gpus)),
                    "ports": [["http", [20000 + index]]],
                    "launch_acked": True,
                    "kill_requested": False,
                    "pid": rng.randint(1000, 400000),
                    "created_at": launched,
                    "started_at": launched + 0.02,
                    "finished_at": completed,
                    "exit_code": exit_code,
                    "exit_class": exit_class,
                    "diagnostics": "",
                    "usage": {
                        "cpuSeconds": round(rng.uniform(1, 3600), 1),
                        "maxRssMiB": round(rng.uniform(50, 8000), 1),
                    },
                    "earlier_usage": {},
                    "log_bytes": {"stdout": rng.randint(0, 10**6), "stderr": rng.randint(0, 10**4)},
                }
            )
    placed = f"attempt 1: all {len(tasks)} tasks placed on {node}"
    events = [
        (submitted, "queued", f"submitted by {user} to virtual cluster default"),
        (launched, "placed", placed),
        (launched + 0.02, "started", f"{tasks[0]['role']}[0] started on {node}"),
        (completed, "exited", f"{tasks[0]['role']}[0] attempt 1 exited: {exit_class}"),
        (completed, state.lower(), job["diagnostics"] or "every task succeeded"),
    ]
    rows = [
        {
            "job_id": str(seq),
            "at": at,
            "kind": kind,
            "message": message,
            "role": None,
            "index": None,
        }
        for at, kind, message in events
    ]
    return job, tasks, rows


PRIORITY_CLASSES = {120: "crit", 100: "prod", 10: "test", -1: "oppo"}


def _queued_spec(request: JobRequest, name: str) -> tuple[str, dict[str, Any]]:
    """A job file and its spec for one job of ``bench/workload.py``'s mix."""
    roles = {
        role.name: {
            "instances": role.instances,
            "resources": {
                "cpu": role.per_instance.cpu_millis // 1000,
                "memory": role.per_instance.memory_mib,
                "gpu": role.per_instance.gpu,
                "ports": {label: count for label, count in role.ports if label != "http"},
            },
            "command": f"python {role.name}.py",
        }
        for role in request.roles
    }
    document = {
        "version": 1,
        "name": name,
        "priority": PRIORITY_CLASSES[request.priority],
        "roles": roles,
    }
    text = yaml.safe_dump(document, sort_keys=False)
    (spec,) = load_job_text(text, {}).jobs
    return text, spec.model_dump(mode="json", exclude={"secrets"})


def add_queue(home: Path, count: int, now: float, seed: int = 11) -> None:
    """``count`` WAITING jobs of the scheduler benchmark's mix (``bench/workload.py``: 1 to 8
    GPUs, whole nodes, distributed gangs, actor-learner, CPU-only; four priority classes),
    numbered after the last job and spread over the users: a queue whose cycles do real work."""
    rng = random.Random(seed)
    factory = JobFactory(random.Random(seed))
    memo: dict[tuple[object, ...], tuple[str, dict[str, Any]]] = {}
    db = database(home)
    with db.engine.begin() as connection:
        first = (connection.execute(select(func.max(Job.seq))).scalar() or 0) + 1
        rows = []
        for seq in range(first, first + count):
            name = f"queued-{seq}"
            request = factory.next_job()
            key = (request.roles, request.priority)
            if key not in memo:
                memo[key] = _queued_spec(request, "x")
            text, spec = memo[key]
            job = _job(
                seq,
                name,
                rng.choice(USERS),
                text.replace("name: x", f"name: {name}", 1),
                {**spec, "name": name},
            )
            submitted = now - (first + count - seq)  # one a second, the last just now
            job |= {
                "state": "WAITING",
                "version": 1,
                "attempt": 0,
                "submitted_at": submitted,
                "priority": request.priority,
                "priority_class": PRIORITY_CLASSES[request.priority],
            }
            rows.append(job)
        for chunk in _chunks(rows):
            connection.execute(insert(Job), chunk)
    db.dispose()
