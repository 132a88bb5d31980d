"""Cluster descriptions for the simulator: nodes (groups of equal nodes, or the Alibaba node
list) and virtual clusters with their guarantees. Example files: ``examples/sim/``.

    name: philly-352
    node_groups:
      - {count: 352, gpus: 8, cpu: 64, memory: 512Gi}
    virtual_clusters:
      - {name: 6214e9, nodes: 64}        # a guarantee of 64 nodes' worth of GPUs
      - {name: 0e4a51, gpus: 256, borrow_limit: 128,
         aging: {policy: las, thresholds_gpu_hours: [1, 10]}}
    unknown_virtual_cluster: 6214e9      # trace jobs of VCs not listed here go there
    pools:                               # machines core.autoscale launches and removes
      - {name: v100, gpus: 8, cpus: 64, memory: 512Gi, price_per_hour: 24.48,
         min: 0, max: 44, boot_delay: 3m, idle_timeout: 15m, join_timeout: 10m}
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from shoal.core.aging import Aging, AgingError, parse_setting
from shoal.core.autoscale import PoolTemplate
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import NodeState, VirtualCluster
from shoal.sim.alibaba import read_alibaba_nodes
from shoal.sim.pools import SimPool
from shoal.sim.traces import GangRules
from shoal.spec.units import cpu_millis, duration_seconds, memory_mib

UNLIMITED = 1 << 40  # a guarantee that does not limit cpu or memory (as the server's VCs)
PORT_RANGE = (20000, 30000)


class ClusterError(ValueError):
    """A cluster file that cannot be used: names the file and the field."""


class NodeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(ge=1, le=100_000)
    gpus: int = Field(default=8, ge=0, le=64)
    cpu: float | str = 64
    memory: int | str = "512Gi"
    gpu_type: str | None = None
    name_prefix: str = "node"


class NodeList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["alibaba"] = "alibaba"
    path: str = Field(description="relative to the cluster file")


class VirtualClusterEntry(BaseModel):
    # Trace VC ids such as 103959 read as numbers in YAML; they are names.
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    name: str = Field(min_length=1)
    gpus: int | None = Field(default=None, ge=0)
    nodes: int | None = Field(default=None, ge=0)
    borrow_limit: int | None = Field(default=None, ge=0, description="GPUs; omitted: any")
    user_gpu_cap: int | None = Field(default=None, ge=1)
    preempt_within: bool = True
    # attained-service aging, as the server's VC setting: {policy: las, thresholds_gpu_hours}
    aging: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_size(self) -> VirtualClusterEntry:
        if (self.gpus is None) == (self.nodes is None):
            raise ValueError(f"virtual cluster {self.name}: give exactly one of gpus or nodes")
        try:
            parse_setting(self.aging)
        except AgingError as error:
            raise ValueError(f"virtual cluster {self.name}: {error}") from None
        return self


class PoolEntry(BaseModel):
    """A pool of machines that grows with the queue and shrinks when idle (core.autoscale)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9-]*$")
    gpus: int = Field(default=8, ge=0, le=64)
    cpus: float | str = 64
    memory: int | str = "512Gi"
    gpu_type: str | None = None
    price_per_hour: float = Field(ge=0, description="per machine")
    min: int = Field(default=0, ge=0, le=100_000)
    max: int = Field(ge=1, le=100_000)
    boot_delay: int | str = "3m"
    idle_timeout: int | str = "10m"
    join_timeout: int | str = "10m"

    @field_validator("boot_delay", "idle_timeout", "join_timeout")
    @classmethod
    def _duration(cls, value: int | str) -> int | str:
        if duration_seconds(value) < 0:
            raise ValueError(f"must not be negative, got {value!r}")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> PoolEntry:
        if self.min > self.max:
            raise ValueError(f"pool {self.name}: min ({self.min}) must not exceed max ({self.max})")
        return self

    def resolved(self) -> SimPool:
        template = PoolTemplate(
            self.name,
            ResourceVector(cpu_millis(self.cpus), memory_mib(self.memory), self.gpus),
            self.price_per_hour,
            self.min,
            self.max,
            float(duration_seconds(self.idle_timeout)),
            float(duration_seconds(self.join_timeout)),
            self.gpu_type,
        )
        return SimPool(template, float(duration_seconds(self.boot_delay)))


class GangDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu_per_gpu: float | str = 0
    memory_per_gpu: int | str = 0


class ClusterFile(BaseModel):
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    name: str = "cluster"
    node_groups: list[NodeGroup] = Field(default_factory=list)
    node_list: NodeList | None = None
    virtual_clusters: list[VirtualClusterEntry] = Field(default_factory=list)
    unknown_virtual_cluster: str | None = None
    gang: GangDefaults = Field(default_factory=GangDefaults)
    pools: list[PoolEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_nodes(self) -> ClusterFile:
        if not self.node_groups and self.node_list is None and not self.pools:
            raise ValueError("give node_groups or a node_list (or pools)")
        pools = [pool.name for pool in self.pools]
        if len(set(pools)) != len(pools):
            raise ValueError("pool names must be unique")
        names = [vc.name for vc in self.virtual_clusters]
        if len(set(names)) != len(names):
            raise ValueError("virtual cluster names must be unique")
        if self.unknown_virtual_cluster and self.unknown_virtual_cluster not in names:
            raise ValueError(
                f"unknown_virtual_cluster {self.unknown_virtual_cluster!r} is not one of the "
                "virtual_clusters"
            )
        return self


@dataclass(frozen=True, slots=True)
class VcQuota:
    """A VC as the cluster file gives it, before a policy decides borrowing and preemption."""

    name: str
    gpus: int
    borrow_limit: int | None
    user_gpu_cap: int | None
    preempt_within: bool
    aging: Aging | None = None  # under the `shoal` policy: this VC's jobs age (core.aging)


@dataclass(frozen=True, slots=True)
class SimCluster:
    name: str
    nodes: tuple[NodeState, ...]
    quotas: tuple[VcQuota, ...]
    unknown_virtual_cluster: str | None
    gang_rules: GangRules
    pools: tuple[SimPool, ...] = ()  # scaling pools (core.autoscale), beside the fixed nodes
    always_on: tuple[SimPool, ...] = ()  # pools turned into fixed nodes (see ``fixed``)

    @property
    def total_gpus(self) -> int:
        """Every GPU the cluster can have: fixed nodes and every pool at its maximum."""
        pooled = sum(p.template.capacity.gpu * p.template.max_nodes for p in self.pools)
        return sum(node.capacity.gpu for node in self.nodes) + pooled

    def fixed(self) -> SimCluster:
        """The fixed-size cluster to compare with: each pool at its maximum, always on."""
        nodes = (*self.nodes, *(n for pool in self.pools for n in pool.fixed_nodes()))
        return replace(self, nodes=nodes, pools=(), always_on=self.pools)

    def with_idle_timeout(self, seconds: float) -> SimCluster:
        """Every pool with this idle timeout (an admin's what-if)."""
        return replace(self, pools=tuple(p.with_idle_timeout(seconds) for p in self.pools))

    def virtual_clusters(
        self, *, borrowing: bool, preemption: bool, strict_fifo: bool
    ) -> tuple[VirtualCluster, ...]:
        """The VCs for ``core.schedule`` under a policy's rules."""
        return tuple(
            VirtualCluster(
                quota.name,
                ResourceVector(UNLIMITED, UNLIMITED, quota.gpus),
                _borrow_limit(quota, borrowing),
                quota.user_gpu_cap,
                preemption and quota.preempt_within,
                strict_fifo=strict_fifo,
            )
            for quota in self.quotas
        )


def _borrow_limit(quota: VcQuota, borrowing: bool) -> ResourceVector | None:
    """None: the VC may borrow any idle GPU; otherwise at most this many beyond its guarantee."""
    if not borrowing:
        return ResourceVector(0, 0, 0)
    if quota.borrow_limit is None:
        return None
    return ResourceVector(0, 0, quota.borrow_limit)


def _group_nodes(groups: list[NodeGroup]) -> list[NodeState]:
    nodes = []
    for group_index, group in enumerate(groups):
        shape = ResourceVector(cpu_millis(group.cpu), memory_mib(group.memory), group.gpus)
        prefix = group.name_prefix if len(groups) == 1 else f"{group.name_prefix}{group_index}"
        width = len(str(group.count))
        for i in range(group.count):
            name = f"{prefix}-{i:0{width}d}"
            nodes.append(
                NodeState(name, name, shape, tuple(range(group.gpus)), group.gpu_type, PORT_RANGE)
            )
    return nodes


def _quotas(
    spec: ClusterFile, nodes: tuple[NodeState, ...], pools: tuple[SimPool, ...]
) -> tuple[VcQuota, ...]:
    """VC guarantees: what the nodes and the pools at their maximum can hold."""
    nodes = (*nodes, *(n for pool in pools for n in pool.fixed_nodes()))
    total = sum(node.capacity.gpu for node in nodes)
    if not spec.virtual_clusters:
        return (VcQuota("default", total, None, None, True),)
    per_node = max((node.capacity.gpu for node in nodes), default=0)
    quotas = tuple(
        VcQuota(
            vc.name,
            vc.gpus if vc.gpus is not None else (vc.nodes or 0) * per_node,
            vc.borrow_limit,
            vc.user_gpu_cap,
            vc.preempt_within,
            parse_setting(vc.aging),
        )
        for vc in spec.virtual_clusters
    )
    guaranteed = sum(quota.gpus for quota in quotas)
    if guaranteed > total:
        raise ClusterError(
            f"the virtual clusters guarantee {guaranteed} GPUs but the nodes have {total} "
            f"(pools counted at their max); "
            "lower the guarantees, add nodes or raise a pool's max"
        )
    return quotas


def load_cluster(path: Path) -> SimCluster:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        spec = ClusterFile.model_validate(raw)
    except OSError as error:
        raise ClusterError(f"{path}: cannot read the cluster file: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ClusterError(f"{path}: not valid YAML: {error}") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ClusterError(f"{path}: {where}: {first['msg']}") from None
    nodes = _group_nodes(spec.node_groups)
    if spec.node_list is not None:
        node_file = (path.parent / spec.node_list.path).resolve()
        if not node_file.is_file():
            raise ClusterError(f"{path}: node_list.path: no such file {node_file}")
        nodes.extend(read_alibaba_nodes(node_file, PORT_RANGE))
    all_nodes = tuple(nodes)
    pools = tuple(pool.resolved() for pool in spec.pools)
    shapes = [*(n.capacity.gpu for n in all_nodes), *(p.template.capacity.gpu for p in pools)]
    gpus_per_node = max(shapes, default=0)
    rules = GangRules(
        max(gpus_per_node, 1),
        cpu_millis(spec.gang.cpu_per_gpu),
        memory_mib(spec.gang.memory_per_gpu),
    )
    quotas = _quotas(spec, all_nodes, pools)
    return SimCluster(spec.name, all_nodes, quotas, spec.unknown_virtual_cluster, rules, pools)
