"""A launch order as Kubernetes objects (pure: dicts the API takes as they are).

One Pod per task attempt, bound to the node shoal chose through ``spec.nodeName`` (the scheduler
already decided; kube-scheduler is not asked, and the kubelet still admits or refuses it). Its
name is unique per attempt, so a retried create answers 409 and changes nothing. Each job has one
owner ConfigMap (``shoal-job-ID``) that holds its host lists; every Pod and Secret of the job
names it as owner, so deleting it garbage-collects all of them. A command with secrets is kept in
a Secret of its own and reaches the container through ``secretKeyRef``: no secret value and no
user token is ever in a Pod spec. The mapping table is in docs/kubernetes.md.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from shoal.kubernetes import options as names
from shoal.kubernetes.helpers import helper_containers
from shoal.kubernetes.options import (
    DATA_DIR,
    META_DIR,
    SECRET_COMMAND,
    SECRET_FETCH_TOKEN,
    WORKDIR,
    KubernetesOptions,
)
from shoal.protocol import LaunchOrder, dns_label, fill_in

COMMAND_VARIABLE = "SHOAL_COMMAND_WITH_SECRETS"
# The env contract names GPUs by the indices shoal chose; in a Pod the device plugin chooses and
# the container sees its own GPUs from 0, so these are left to the device plugin.
DEVICE_PLUGIN_VARIABLES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
MAX_NAME = 63  # a Pod's name is its hostname: one DNS label


def slug(text: str, limit: int = 20) -> str:
    """``text`` as a part of a DNS label: lower case, digits and dashes."""
    return dns_label(text, limit)


def label_value(text: str) -> str:
    """``text`` as a label value (63 characters of ``[A-Za-z0-9_.-]``); a value that does not
    fit keeps a hash, and the exact text is in an annotation."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.-")
    if cleaned == text and len(text) <= 63:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{cleaned[:50].strip('_.-')}-{digest}".strip("-")


def name_prefix(instance: str) -> str:
    """What every object name of one shoal instance starts with: ``shoal`` for the default
    instance, ``shoal-INSTANCE`` for another. Two instances in one namespace both number their
    jobs from 1; without it they would share job 1's owner, and one deleting it would make the
    garbage collector delete the other's Pods. An instance that is not a short DNS label as it
    is (a dot, or too long) keeps a hash of its exact text."""
    if instance == "shoal":
        return "shoal"
    label = dns_label(instance, 14)
    if label != instance:
        label = f"{label}-{hashlib.sha256(instance.encode()).hexdigest()[:6]}"
    return f"shoal-{label}"


def owner_name(job_id: str, instance: str) -> str:
    """The job's owner ConfigMap, and its headless Service in the pod-network mode."""
    return f"{name_prefix(instance)}-job-{dns_label(job_id)}"


def headless_service(
    order: LaunchOrder, options: KubernetesOptions, owner: dict[str, Any]
) -> dict[str, Any]:
    """The pod-network mode's Service of a job: no cluster IP, every Pod's DNS name published
    from its creation on (a peer may look it up before it is ready)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": owner_name(order.job_id, options.instance),
            "namespace": options.namespace,
            "labels": common_labels(order, options),
            "ownerReferences": [owner],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {names.INSTANCE: options.instance, names.JOB: label_value(order.job_id)},
        },
    }


def pod_name(order: LaunchOrder, instance: str) -> str:
    """``PREFIX-JOB-ROLE-INDEX-TASK-ATTEMPT`` (``name_prefix``): readable, and unique per
    attempt and instance."""
    task_id, _, attempt = order.attempt_id.partition(".")
    tail = f"-{order.index}-{task_id}-{attempt}"
    head = f"{name_prefix(instance)}-{slug(order.job_id, 16)}-{slug(order.role, 16)}"
    return (head[: MAX_NAME - len(tail)].rstrip("-") + tail)[:MAX_NAME]


def hostfile_key(order: LaunchOrder) -> str:
    return f"hostfile-{order.env.get('SHOAL_JOB_ATTEMPT', '0')}"


def common_labels(order: LaunchOrder, options: KubernetesOptions) -> dict[str, str]:
    return {
        names.MANAGED_BY: "shoal",
        names.INSTANCE: options.instance,
        names.JOB: label_value(order.job_id),
    }


def owner_config_map(order: LaunchOrder, options: KubernetesOptions) -> dict[str, Any]:
    """The job's owner object, holding the host list of this job attempt."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": owner_name(order.job_id, options.instance),
            "namespace": options.namespace,
            "labels": common_labels(order, options),
            "annotations": {names.JOB: order.job_id},
        },
        "data": {hostfile_key(order): order.hostfile},
    }


def owner_reference(owner: dict[str, Any] | Any) -> dict[str, Any]:
    """An owner reference to the job's ConfigMap (a dict or a client object)."""
    meta = owner["metadata"] if isinstance(owner, dict) else owner.metadata
    name = meta["name"] if isinstance(meta, dict) else meta.name
    uid = meta["uid"] if isinstance(meta, dict) else meta.uid
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid}


def attempt_secret(
    order: LaunchOrder, options: KubernetesOptions, owner: dict[str, Any]
) -> dict[str, Any] | None:
    """The attempt's Secret: its command with its secrets filled in, and the credential that
    fetches its code and data (None: it needs neither)."""
    data: dict[str, str] = {}
    if order.secrets:
        data[SECRET_COMMAND] = fill_in(order.command, order.secrets)
    if order.fetch_token and (order.has_code or order.data):
        data[SECRET_FETCH_TOKEN] = order.fetch_token
    if not data:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": pod_name(order, options.instance),
            "namespace": options.namespace,
            "labels": {**common_labels(order, options), names.ATTEMPT: order.attempt_id},
            "ownerReferences": [owner],
        },
        "stringData": data,
    }


def _environment(order: LaunchOrder, node_name: str, secret_name: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in order.env.items() if k not in DEVICE_PLUGIN_VARIABLES}
    env |= {
        "SHOAL_HOSTFILE": f"{META_DIR}/hostfile",
        "SHOAL_WORKDIR": WORKDIR,
        "SHOAL_DATA_DIR": DATA_DIR,
        "SHOAL_KUBERNETES_NODE": node_name,
    }
    listed: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    if order.secrets:
        ref = {"secretKeyRef": {"name": secret_name, "key": SECRET_COMMAND}}
        listed.append({"name": COMMAND_VARIABLE, "valueFrom": ref})
    return listed


def _argv(order: LaunchOrder) -> list[str]:
    if not order.secrets:
        return ["/bin/sh", "-c", order.command]
    return ["/bin/sh", "-c", f'eval "unset {COMMAND_VARIABLE}; ${COMMAND_VARIABLE}"']


def _resources(order: LaunchOrder) -> dict[str, Any]:
    limits = order.limits
    if limits is None:
        return {}
    wanted: dict[str, str] = {
        "cpu": f"{max(limits.cpu_millis, 1)}m",
        "memory": f"{max(limits.memory_mib, 1)}Mi",
    }
    if limits.gpu_indices:
        wanted["nvidia.com/gpu"] = str(len(limits.gpu_indices))
    return {"requests": dict(wanted), "limits": dict(wanted)}


def _tolerations(options: KubernetesOptions) -> list[dict[str, Any]]:
    """Readiness taints are tolerated for good: Kubernetes never evicts a shoal Pod from a node
    it lost touch with; shoal replaces it only once it is confirmed gone (docs/kubernetes.md)."""
    kept = [
        {"key": key, "operator": "Exists", "effect": "NoExecute"}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    return kept + [{"key": key, "operator": "Exists"} for key in options.tolerated_taints]


def pod(order: LaunchOrder, options: KubernetesOptions, owner: dict[str, Any]) -> dict[str, Any]:
    """The Pod of one task attempt, bound to ``order.node``."""
    task_id, _, attempt = order.attempt_id.partition(".")
    user = order.env.get("SHOAL_USER") or order.env.get("PAI_USER_NAME") or ""
    vc = order.env.get("SHOAL_VIRTUAL_CLUSTER") or order.env.get("PAI_VIRTUAL_CLUSTER") or ""
    labels = {
        **common_labels(order, options),
        names.ATTEMPT: order.attempt_id,
        names.ROLE: label_value(order.role),
        names.INDEX: str(order.index),
        names.TASK_ATTEMPT: attempt,
        names.USER: label_value(user),
        names.VC: label_value(vc),
    }
    container: dict[str, Any] = {
        "name": names.TASK_CONTAINER,
        "image": order.image_name or options.default_image,
        "command": _argv(order),
        "env": _environment(order, order.node, pod_name(order, options.instance)),
        "resources": _resources(order),
        "workingDir": WORKDIR,
        "volumeMounts": [
            {"name": "work", "mountPath": WORKDIR},
            {"name": "meta", "mountPath": META_DIR, "readOnly": True},
        ],
    }
    if options.image_pull_policy:
        container["imagePullPolicy"] = options.image_pull_policy
    if order.ports:
        container["ports"] = [
            {"name": slug(f"{label}-{i}", 15), "containerPort": port, "protocol": "TCP"}
            for label, ports in sorted(order.ports.items())
            for i, port in enumerate(ports)
        ][:100]
    spec: dict[str, Any] = {
        "nodeName": order.node,
        "restartPolicy": "Never",
        "hostNetwork": options.network == "host",
        "dnsPolicy": "ClusterFirstWithHostNet" if options.network == "host" else "ClusterFirst",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": max(int(order.kill_grace_s), 0),
        "tolerations": _tolerations(options),
        "containers": [container],
        "volumes": [
            {"name": "work", "emptyDir": {}},
            {
                "name": "meta",
                "configMap": {
                    "name": owner["name"],
                    "items": [{"key": hostfile_key(order), "path": "hostfile"}],
                },
            },
        ],
    }
    helpers = helper_containers(order, options, pod_name(order, options.instance))
    if helpers:
        spec["initContainers"] = helpers
    if order.deadline_s is not None:
        spec["activeDeadlineSeconds"] = max(int(order.deadline_s), 1)
    if options.network == "pod":  # <role>-<index>.<service>: nodes.task_address_pattern
        spec["hostname"] = f"{dns_label(order.role)}-{order.index}"
        spec["subdomain"] = owner_name(order.job_id, options.instance)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(order, options.instance),
            "namespace": options.namespace,
            "labels": labels,
            "annotations": {
                names.JOB: order.job_id,
                names.ROLE: order.role,
                names.USER: user,
                names.EPOCH: str(order.epoch),
                f"{names.PREFIX}/task-id": task_id,
            },
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def unsupported(order: LaunchOrder) -> str | None:
    """Why this order cannot run as a Pod (None: it can)."""
    if order.has_code and order.code_hash is None:
        return (
            "the job's code archive was stored before code was content-addressed: submit the "
            "job again to run it on Kubernetes"
        )
    if (order.has_code or order.data) and not order.fetch_token:
        return (
            "the job has code or data sets, and the server sent no credential to fetch them "
            "with: upgrade the shoal server to the agent's version"
        )
    return None
