"""The synthetic cluster and job mix of ``bench/scheduler.py`` (seeded, so every run is equal)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import JobRequest, NodeState, RoleRequest

GPUS_PER_NODE = 8
CORES_PER_NODE = 96
MEMORY_PER_NODE_MIB = 1024 * 1024  # 1 TiB
GIB = 1024
PRIORITIES = (120, 100, 10, -1)
PRIORITY_WEIGHTS = (5, 15, 60, 20)
HTTP = (("http", 1),)


# --------------------------------------------------------------------------------------------
# Synthetic cluster and workload
# --------------------------------------------------------------------------------------------


def make_nodes(count: int) -> tuple[NodeState, ...]:
    """``count`` identical 8-GPU nodes with distinct names and 198.18.0.0/15 addresses."""
    capacity = ResourceVector(CORES_PER_NODE * 1000, MEMORY_PER_NODE_MIB, GPUS_PER_NODE)
    gpus = tuple(range(GPUS_PER_NODE))
    return tuple(
        NodeState(
            name=f"gpu-node-{i:05d}",
            address=f"198.{18 + i // 65536}.{(i // 256) % 256}.{i % 256}",
            capacity=capacity,
            gpu_indices=gpus,
            gpu_type="a100",
        )
        for i in range(count)
    )


def _role(
    name: str,
    instances: int,
    cores: int,
    memory_gib: int,
    gpus: int,
    ports: tuple[tuple[str, int], ...] = HTTP,
) -> RoleRequest:
    return RoleRequest(
        name, instances, ResourceVector(cores * 1000, memory_gib * GIB, gpus), ports=ports
    )


def _single_gpu(rng: random.Random) -> tuple[RoleRequest, ...]:
    return (_role("main", 1, rng.choice((4, 8, 12)), rng.choice((32, 64, 96)), 1),)


def _multi_gpu(rng: random.Random) -> tuple[RoleRequest, ...]:
    gpus = rng.choice((2, 4))
    cores = gpus * rng.choice((6, 8, 12))
    return (_role("main", 1, cores, gpus * rng.choice((64, 96, 128)), gpus),)


def _full_node(rng: random.Random) -> tuple[RoleRequest, ...]:
    return (_role("main", 1, rng.choice((64, 80, 96)), rng.choice((512, 768, 1000)), 8),)


def _distributed(rng: random.Random) -> tuple[RoleRequest, ...]:
    ports = (("http", 1), ("nccl", 1))
    workers = rng.randint(2, 8)
    return (_role("worker", workers, rng.choice((64, 80, 96)), rng.choice((512, 768)), 8, ports),)


def _actor_learner(rng: random.Random) -> tuple[RoleRequest, ...]:
    learner = _role("learner", 1, 8, 64, 1)
    actors = _role("actor", rng.randint(4, 32), rng.choice((1, 2, 4)), rng.choice((4, 8, 16)), 0)
    return (learner, actors)


def _cpu_only(rng: random.Random) -> tuple[RoleRequest, ...]:
    workers = rng.randint(2, 16)
    return (_role("worker", workers, rng.choice((4, 8, 16)), rng.choice((16, 32, 64)), 0),)


JOB_MIX: tuple[tuple[Callable[[random.Random], tuple[RoleRequest, ...]], int], ...] = (
    (_single_gpu, 40),
    (_multi_gpu, 20),
    (_full_node, 15),
    (_distributed, 10),
    (_actor_learner, 10),
    (_cpu_only, 5),
)


@dataclass
class JobFactory:
    """Deterministic stream of queued jobs: ids and submission times only increase."""

    rng: random.Random
    counter: int = 0
    clock: float = 0.0

    def next_job(self) -> JobRequest:
        makers, weights = zip(*JOB_MIX, strict=True)
        (maker,) = self.rng.choices(makers, weights=weights)
        (priority,) = self.rng.choices(PRIORITIES, weights=PRIORITY_WEIGHTS)
        self.counter += 1
        self.clock += self.rng.uniform(0.001, 0.1)
        return JobRequest(
            job_id=f"job-{self.counter:08d}",
            roles=maker(self.rng),
            priority=priority,
            submitted_at=self.clock,
        )

    def jobs(self, count: int) -> list[JobRequest]:
        return [self.next_job() for _ in range(count)]
