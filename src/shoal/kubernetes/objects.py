"""The cluster's own Nodes and shoal's Pods, as the API server serves them, for OpenPAI's
``/api/v2/kubernetes/nodes`` and ``/pods`` on a server whose nodes are a Kubernetes cluster's
(docs/openpai-compat.md). Read with the server's kubeconfig (or in-cluster config); one client
per process."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from shoal.kubernetes.options import INSTANCE, USER, KubernetesOptions
from shoal.kubernetes.pods import label_value


@lru_cache(maxsize=4)
def _core(kubeconfig: str | None, context: str | None) -> Any:
    from kubernetes import client
    from shoal.kubernetes.main import api_client

    return client.CoreV1Api(api_client(KubernetesOptions(kubeconfig=kubeconfig, context=context)))


def node_list(kubeconfig: str | None, selector: str = "") -> dict[str, Any]:
    core = _core(kubeconfig, None)
    answer = core.list_node(label_selector=selector or None, _request_timeout=10)
    return _plain(core, answer, "NodeList")


def pod_list(
    kubeconfig: str | None, namespace: str, user: str | None, instance: str = "shoal"
) -> dict[str, Any]:
    """shoal's Pods in its namespace; ``user`` set: only that user's."""
    selector = f"{INSTANCE}={instance}"
    if user is not None:
        selector += f",{USER}={label_value(user)}"
    core = _core(kubeconfig, None)
    answer = core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=10)
    return _plain(core, answer, "PodList")


def _plain(core: Any, answer: Any, kind: str) -> dict[str, Any]:
    body: dict[str, Any] = core.api_client.sanitize_for_serialization(answer)
    body["kind"], body["apiVersion"] = kind, "v1"
    return body
