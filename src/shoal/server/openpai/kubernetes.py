"""``/api/v2/kubernetes/nodes`` and ``/pods``: shoal's nodes and unfinished tasks in Kubernetes'
list shapes (``NodeList``, ``PodList`` of core/v1), as OpenPAI served them from its cluster. On a
server whose nodes are a Kubernetes cluster's (docs/kubernetes.md), the cluster's own Nodes and
shoal's Pods, read from its API server (``shoal.kubernetes.objects``).

A node's capacity is its cpu, memory and GPUs (``nvidia.com/gpu``); ``allocatable`` is what its
unfinished tasks leave; its ``Ready`` condition is READY; ``spec.unschedulable`` is a cordon or
drain. A pod is one task's current attempt, in namespace ``default``, named
``<job id>-<role>-<index>``, labelled with OpenPAI's ``userName``, ``jobName``,
``virtualCluster``, ``taskRole`` and ``taskIndex``. Users see their own tasks; admins see all.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from sqlalchemy import select

from shoal.core.states import State
from shoal.server.deps import Caller, Context
from shoal.server.schemas import NodeOut
from shoal.server.services.node_views import describe_nodes
from shoal.store.models import Job, Task

router = APIRouter(prefix="/api/v2/kubernetes", tags=["openpai"])
log = logging.getLogger("shoal.server")
NAMESPACE = "default"
PHASES = {
    State.WAITING.value: "Pending",
    State.RUNNING.value: "Running",
    State.STOPPING.value: "Running",
    State.SUCCEEDED.value: "Succeeded",
    State.FAILED.value: "Failed",
    State.STOPPED.value: "Failed",
}


def _from_cluster(read: Callable[[Any], dict[str, Any]]) -> dict[str, Any] | None:
    """What ``read`` gets from the Kubernetes API server; None (shoal's own view is served, and
    the reason logged) if the server cannot be read."""
    try:
        from shoal.kubernetes import objects  # noqa: PLC0415 - only servers on Kubernetes

        return read(objects)
    except Exception as exc:
        log.warning("the Kubernetes API server could not be read (%s): shoal's view is served", exc)
        return None


def _stamp(at: float | None) -> str | None:
    if at is None:
        return None
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _resources(cpus: float, memory_mib: float, gpus: float) -> dict[str, str]:
    return {
        "cpu": f"{round(cpus * 1000)}m",
        "memory": f"{round(memory_mib)}Mi",
        "nvidia.com/gpu": str(round(gpus)),
    }


def _node(node: NodeOut) -> dict[str, Any]:
    held = node.allocated
    free = (
        node.cpus - held["cpus"],
        node.memoryMiB - held["memoryMiB"],
        node.gpus - held["gpus"],
    )
    return {
        "metadata": {"name": node.name, "labels": dict(node.labels)},
        "spec": {"unschedulable": node.hold != "NONE"},
        "status": {
            "capacity": _resources(node.cpus, node.memoryMiB, node.gpus),
            "allocatable": _resources(*free),
            "addresses": [
                {"type": "InternalIP", "address": node.address},
                {"type": "Hostname", "address": node.name},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if node.state != "NOT_READY" else "False",
                    "lastHeartbeatTime": _stamp(node.lastSeen),
                }
            ],
            "nodeInfo": {"kubeletVersion": f"shoal-agent {node.agentVersion or 'unknown'}"},
        },
    }


@router.get("/nodes", response_model=None)
def nodes(ctx: Context, caller: Caller) -> dict[str, Any]:
    if ctx.settings.kubernetes:  # the cluster's own Nodes
        cluster = _from_cluster(lambda objects: objects.node_list(ctx.settings.kubeconfig))
        if cluster is not None:
            return cluster
    return {
        "kind": "NodeList",
        "apiVersion": "v1",
        "metadata": {},
        "items": [_node(node) for node in describe_nodes(ctx)],
    }


def _pod(task: Task, job: Job) -> dict[str, Any]:
    gpus = len(task.gpu_indices)
    return {
        "metadata": {
            "name": f"{job.id}-{task.role}-{task.index}",
            "namespace": NAMESPACE,
            "uid": task.attempt_id,
            "creationTimestamp": _stamp(task.created_at),
            "labels": {
                "userName": job.user,
                "jobName": job.name,
                "virtualCluster": job.virtual_cluster,
                "taskRole": task.role,
                "taskIndex": str(task.index),
            },
        },
        "spec": {
            "nodeName": task.node,
            "containers": [
                {
                    "name": task.role,
                    "resources": {
                        "limits": _resources(task.cpu_millis / 1000, task.memory_mib, gpus)
                    },
                }
            ],
        },
        "status": {
            "phase": PHASES.get(task.state, "Unknown"),
            "podIP": task.address,
            "hostIP": task.address,
            "startTime": _stamp(task.started_at),
        },
    }


@router.get("/pods", response_model=None)
def pods(ctx: Context, caller: Caller, namespace: str | None = None) -> dict[str, Any]:
    """The current attempts of unfinished tasks (the caller's, or everyone's for an admin); on
    Kubernetes, shoal's Pods as the API server serves them."""
    settings = ctx.settings
    if settings.kubernetes:
        if namespace not in (None, "", settings.kubernetes_namespace):
            return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}
        user = None if caller.is_admin else caller.user
        cluster = _from_cluster(
            lambda objects: objects.pod_list(
                settings.kubeconfig, settings.kubernetes_namespace, user
            )
        )
        if cluster is not None:
            return cluster
    items: list[dict[str, Any]] = []
    if namespace in (None, "", NAMESPACE):
        unfinished = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)
        query = (
            select(Task, Job)
            .join(Job, Job.id == Task.job_id)
            .where(Task.state.in_(unfinished), Task.job_attempt == Job.attempt)
            .order_by(Task.id)
        )
        if not caller.is_admin:
            query = query.where(Job.user == caller.user)
        with ctx.db.read() as session:
            items = [_pod(task, job) for task, job in session.execute(query)]
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
