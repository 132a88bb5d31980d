"""A Kubernetes Node as a shoal node (pure: objects of the ``kubernetes`` client in, protocol out).

- Capacity: the Node's ``allocatable`` cpu, memory and ``nvidia.com/gpu``, less what Pods shoal
  does not manage request on it (so shoal shares a cluster without overcommitting it).
- GPU type: the value of a configurable label (``nvidia.com/gpu.product`` by default).
- Ready: the ``Ready`` condition. A Node that is not ready is NOT_READY in shoal, but its tasks
  are kept: only the Pod's end, confirmed, ends them.
- Held: ``spec.unschedulable`` (a cordon) or a NoSchedule/NoExecute taint shoal's Pods do not
  tolerate keep new tasks off it (``AgentNode.platform_hold``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from shoal.kubernetes.options import INSTANCE, NODE_OPT_OUT, KubernetesOptions
from shoal.kubernetes.pods import name_prefix
from shoal.protocol import AgentNode

GPU = "nvidia.com/gpu"
TERMINAL_PHASES = ("Succeeded", "Failed")
# Taints Kubernetes itself sets for readiness: the Ready condition says the same, and shoal's
# Pods tolerate them (docs/kubernetes.md, "Never two attempts").
READINESS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


@functools.lru_cache(maxsize=4096)
def quantity(value: object) -> Decimal:
    """A Kubernetes quantity (``500m``, ``4Gi``, ``2``) as a number (remembered: a cluster's
    Pods and Nodes repeat a few values, and parsing one costs more than the rest of a report)."""
    from kubernetes.utils import parse_quantity

    return Decimal(parse_quantity(value))


class Requests:
    """cpu millicores, memory MiB and GPUs, summed."""

    __slots__ = ("cpu_millis", "gpus", "memory_mib")

    def __init__(self, cpu_millis: int = 0, memory_mib: int = 0, gpus: int = 0) -> None:
        self.cpu_millis, self.memory_mib, self.gpus = cpu_millis, memory_mib, gpus

    def add(self, other: Requests) -> None:
        self.cpu_millis += other.cpu_millis
        self.memory_mib += other.memory_mib
        self.gpus += other.gpus

    def subtract(self, other: Requests) -> None:
        self.cpu_millis -= other.cpu_millis
        self.memory_mib -= other.memory_mib
        self.gpus -= other.gpus

    def copy(self) -> Requests:
        return Requests(self.cpu_millis, self.memory_mib, self.gpus)

    def key(self) -> tuple[int, int, int]:
        return (self.cpu_millis, self.memory_mib, self.gpus)

    def __repr__(self) -> str:
        return f"Requests({self.cpu_millis}m, {self.memory_mib}Mi, {self.gpus} GPU)"


def _of(resources: dict[str, Any] | None) -> Requests:
    resources = resources or {}
    cpu = resources.get("cpu")
    memory = resources.get("memory")
    gpus = resources.get(GPU)
    return Requests(
        math.ceil(quantity(cpu) * 1000) if cpu is not None else 0,
        math.ceil(quantity(memory) / (1 << 20)) if memory is not None else 0,
        int(quantity(gpus)) if gpus is not None else 0,
    )


def _container_requests(container: Any) -> Requests:
    """A container's requests; a resource with only a limit requests its limit (as Kubernetes
    defaults it)."""
    resources = container.resources
    if resources is None:
        return Requests()
    merged = dict(resources.limits or {})
    merged.update(resources.requests or {})
    return _of(merged)


def pod_requests(pod: Any) -> Requests:
    """What a Pod holds on its node, as kube-scheduler counts it: the larger of its containers'
    sum and its largest init container, plus its overhead."""
    spec = pod.spec
    total = Requests()
    for container in spec.containers or ():
        total.add(_container_requests(container))
    for init in spec.init_containers or ():
        one = _container_requests(init)
        total.cpu_millis = max(total.cpu_millis, one.cpu_millis)
        total.memory_mib = max(total.memory_mib, one.memory_mib)
        total.gpus = max(total.gpus, one.gpus)
    if spec.overhead:
        total.add(_of(spec.overhead))
    return total


def is_ours(pod: Any, options: KubernetesOptions) -> bool:
    labels = pod.metadata.labels or {}
    return labels.get(INSTANCE) == options.instance and pod.metadata.namespace == options.namespace


def foreign_requests(pods: Iterable[Any], options: KubernetesOptions) -> dict[str, Requests]:
    """By node: what the Pods shoal does not manage request there (finished Pods hold nothing)."""
    held: dict[str, Requests] = {}
    for pod in pods:
        node = pod.spec.node_name
        if (
            not node
            or is_ours(pod, options)
            or (pod.status and pod.status.phase in TERMINAL_PHASES)
        ):
            continue
        held.setdefault(node, Requests()).add(pod_requests(pod))
    return held


class ForeignHolds:
    """``foreign_requests`` kept up to date from watch events, so a report costs nothing per
    Pod: what each Pod shoal does not manage holds, and the sums by node."""

    def __init__(self, options: KubernetesOptions) -> None:
        self.options = options
        self.by_node: dict[str, Requests] = {}
        self._pods: dict[str, tuple[str, Requests]] = {}  # namespace/name -> (node, requests)

    def update(self, kind: str, pod: Any) -> bool:
        """Take one watch event; whether what some node holds changed."""
        key = f"{pod.metadata.namespace or ''}/{pod.metadata.name}"
        before = self._pods.pop(key, None)
        if before is not None:
            self.by_node[before[0]].subtract(before[1])
        node = pod.spec.node_name if pod.spec else None
        phase = pod.status.phase if pod.status else None
        holds = kind != "DELETED" and node and phase not in TERMINAL_PHASES
        now = None
        if holds and node and not is_ours(pod, self.options):
            now = (node, pod_requests(pod))
            self._pods[key] = now
            self.by_node.setdefault(node, Requests()).add(now[1])
        if before is None or now is None:
            return before is not now
        return before[0] != now[0] or before[1].key() != now[1].key()


def is_ready(node: Any) -> bool:
    for condition in (node.status.conditions if node.status else None) or ():
        if condition.type == "Ready":
            return bool(condition.status == "True")
    return False


def platform_hold(node: Any, options: KubernetesOptions) -> str | None:
    """Why Kubernetes keeps new Pods of shoal off the node, or None."""
    if node.spec and node.spec.unschedulable:
        return "cordoned in Kubernetes (spec.unschedulable)"
    for taint in (node.spec.taints if node.spec else None) or ():
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if taint.key in READINESS_TAINTS or taint.key in options.tolerated_taints:
            continue
        value = f"={taint.value}" if taint.value else ""
        return f"tainted {taint.key}{value}:{taint.effect} in Kubernetes"
    return None


def address_of(node: Any) -> str:
    """The node's InternalIP (what host-network Pods listen on), else its first address."""
    addresses = (node.status.addresses if node.status else None) or []
    for wanted in ("InternalIP", "ExternalIP", "Hostname"):
        for address in addresses:
            if address.type == wanted:
                return str(address.address)
    return str(node.metadata.name)


def agent_node(node: Any, held: Requests | None, options: KubernetesOptions) -> AgentNode:
    """The node as the agent protocol reports it: what shoal may use of it."""
    allocatable = _of(node.status.allocatable if node.status else None)
    held = held or Requests()
    labels = dict(node.metadata.labels or {})
    gpus = max(allocatable.gpus - held.gpus, 0)
    return AgentNode(
        name=node.metadata.name,
        address=address_of(node),
        cpu_millis=max(allocatable.cpu_millis - held.cpu_millis, 0),
        memory_mib=max(allocatable.memory_mib - held.memory_mib, 0),
        gpu_indices=list(range(gpus)),
        gpu_type=labels.get(options.gpu_type_label),
        port_low=options.port_low,
        port_high=options.port_high,
        labels=labels,
        unsupported={},
        ready=is_ready(node),
        platform_hold=platform_hold(node, options),
        task_address=task_address_pattern(options),
    )


def task_address_pattern(options: KubernetesOptions) -> str | None:
    """In the pod-network mode, a task's DNS name: its Pod's hostname in its job's headless
    Service (pods.py names both the same way)."""
    if options.network != "pod":
        return None
    service = f"{name_prefix(options.instance)}-job-{{job}}"  # pods.owner_name
    return f"{{role}}-{{index}}.{service}.{options.namespace}.svc.{options.cluster_domain}"


def wanted(node: Any) -> bool:
    """Whether shoal uses the node at all (an administrator may exclude one by annotation)."""
    annotations = node.metadata.annotations or {}
    return annotations.get(NODE_OPT_OUT) != "true"
