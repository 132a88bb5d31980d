"""The synthetic cluster, virtual clusters and job mix of ``bench/scheduler.py`` (seeded, so every
run is equal)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import JobRequest, NodeState, RoleRequest, VirtualCluster

GPUS_PER_NODE = 8
CORES_PER_NODE = 96
MEMORY_PER_NODE_MIB = 1024 * 1024  # 1 TiB
GIB = 1024
PRIORITIES = (120, 100, 10, -1)
PRIORITY_WEIGHTS = (5, 15, 60, 20)
HTTP = (("http", 1),)
UNLIMITED = 1 << 40  # what the server puts in a guarantee's cpu/memory when none is given
USERS_PER_VC = 8


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
    """Deterministic stream of queued jobs: ids and submission times only increase.

    With ``demand`` (VC name, weight) pairs, each job also goes to a VC drawn by weight and to
    one of its ``USERS_PER_VC`` users; without, every job is in ``default`` (and the random
    stream is exactly the one of the benchmark without virtual clusters).
    """

    rng: random.Random
    demand: tuple[tuple[str, float], ...] = ()
    counter: int = 0
    clock: float = 0.0

    def next_job(self) -> JobRequest:
        makers, weights = zip(*JOB_MIX, strict=True)
        (maker,) = self.rng.choices(makers, weights=weights)
        (priority,) = self.rng.choices(PRIORITIES, weights=PRIORITY_WEIGHTS)
        self.counter += 1
        self.clock += self.rng.uniform(0.001, 0.1)
        vc, user = "default", ""
        if self.demand:
            names, shares = zip(*self.demand, strict=True)
            (vc,) = self.rng.choices(names, weights=shares)
            user = f"{vc}-user{self.rng.randrange(USERS_PER_VC)}"
        return JobRequest(
            job_id=f"job-{self.counter:08d}",
            roles=maker(self.rng),
            priority=priority,
            submitted_at=self.clock,
            virtual_cluster=vc,
            user=user,
        )

    def jobs(self, count: int) -> list[JobRequest]:
        return [self.next_job() for _ in range(count)]


# --------------------------------------------------------------------------------------------
# Virtual clusters
# --------------------------------------------------------------------------------------------

# Per named VC, in turn: guarantee weight, borrowing ("any" idle capacity, "same": as much again
# as its guarantee, "none"), whether higher priority classes preempt lower ones inside it, a
# per-user GPU cap (in whole nodes) and the weight of its demand (its share of submitted jobs).
# The last team of the pattern submits little: its idle guarantee is what the others borrow.
VC_PATTERN: tuple[tuple[int, str, bool, int | None, float], ...] = (
    (4, "any", True, None, 8.0),
    (2, "same", False, None, 6.0),
    (3, "any", False, 8, 7.0),
    (1, "none", True, None, 3.0),
    (2, "same", False, None, 5.0),
    (3, "any", False, None, 0.2),
)
GUARANTEED_SHARE = 0.9  # of the cluster's GPUs, over the named VCs; ``default`` gets the rest


def make_virtual_clusters(
    total_gpus: int, count: int
) -> tuple[tuple[VirtualCluster, ...], tuple[tuple[str, float], ...]]:
    """``count`` VCs (``default`` and ``count - 1`` named teams) whose GPU guarantees add up to
    ``total_gpus``, as the server builds them (cpu and memory not limited), and the demand weight
    of each (what share of the submitted jobs goes to it)."""
    if count < 2:
        raise ValueError("need at least 2 virtual clusters (default and one team)")
    teams = [VC_PATTERN[i % len(VC_PATTERN)] for i in range(count - 1)]
    weights = sum(t[0] for t in teams)
    budget = int(total_gpus * GUARANTEED_SHARE)
    vcs: list[VirtualCluster] = []
    demand: list[tuple[str, float]] = []
    for i, (weight, borrow, within, cap, share) in enumerate(teams, start=1):
        gpus = budget * weight // weights
        limit = {
            "any": None,
            "same": ResourceVector(UNLIMITED, UNLIMITED, gpus),
            "none": ResourceVector(UNLIMITED, UNLIMITED, 0),
        }[borrow]
        cap_gpus = None if cap is None else cap * GPUS_PER_NODE
        name = f"team-{i:02d}"
        guarantee = ResourceVector(UNLIMITED, UNLIMITED, gpus)
        vcs.append(VirtualCluster(name, guarantee, limit, cap_gpus, within))
        demand.append((name, share))
    left = total_gpus - sum(vc.guarantee.gpu for vc in vcs)
    default = VirtualCluster("default", ResourceVector(UNLIMITED, UNLIMITED, left))
    return (default, *vcs), (("default", 4.0), *demand)
