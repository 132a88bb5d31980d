"""``shoal kubernetes agent``: run the Kubernetes agent until a signal (or its parent's end)."""

from __future__ import annotations

import dataclasses
import faulthandler
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from shoal.agent.identity import Connection
from shoal.kubernetes.options import KubernetesOptions

log = logging.getLogger("shoal.kubernetes")
AGENT_ID = "kubernetes"
CONNECTIONS = 32


class KubernetesConfigError(Exception):
    """No usable cluster configuration: the message says which and how to give one."""


def api_client(options: KubernetesOptions) -> Any:
    """A ``kubernetes.client.ApiClient`` from the kubeconfig given, else in-cluster config (in a
    Pod), else ``$KUBECONFIG`` or ~/.kube/config."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise KubernetesConfigError(
            "the Kubernetes client is not installed: pip install 'shoal[kubernetes]'"
        ) from exc
    configuration = client.Configuration()
    try:
        if options.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            path = options.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            if not Path(path).expanduser().is_file():
                raise KubernetesConfigError(
                    f"--kubeconfig {path}: no such file; give the cluster's kubeconfig "
                    "(or run shoal inside the cluster, where its ServiceAccount is used)"
                )
            config.load_kube_config(
                config_file=str(Path(path).expanduser()),
                context=options.context,
                client_configuration=configuration,
            )
    except config.ConfigException as exc:
        raise KubernetesConfigError(f"the Kubernetes configuration is not usable: {exc}") from exc
    # launches, deletions, two watches, log followers and exec sessions share the pool: the
    # client's default of 10 connections made threads wait and reconnect
    configuration.connection_pool_maxsize = CONNECTIONS
    return client.ApiClient(configuration)


def check_access(core: Any, options: KubernetesOptions) -> None:
    """Fail early, naming the call, when the cluster cannot be reached or refuses shoal."""
    try:
        core.list_node(limit=1, _request_timeout=10)
        core.list_namespaced_pod(options.namespace, limit=1, _request_timeout=10)
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status in (401, 403):
            raise KubernetesConfigError(
                f"the Kubernetes API server refused shoal ({status}): give its ServiceAccount "
                "the RBAC in deploy/kubernetes (docs/kubernetes.md, 'Permissions')"
            ) from exc
        raise KubernetesConfigError(f"cannot reach the Kubernetes API server: {exc}") from exc


def run(server: str, token_file: Path, options: KubernetesOptions, watch_fd: int | None) -> int:
    """Serve until SIGTERM/SIGINT, or until ``watch_fd`` (a pipe from the parent) closes."""
    from kubernetes import client
    from shoal.kubernetes.agent import KubernetesAgent

    token = token_file.read_text().strip()
    connection = Connection.bearer(server, token)
    ca_pem = None
    if server.startswith("https://"):
        ca = token_file.parent / "pki" / "ca.crt"
        if ca.is_file():
            import ssl

            ca_pem = ca.read_text()
            connection = Connection(
                connection.server, connection.headers, ssl.create_default_context(cafile=str(ca))
            )
    pod_server = options.pod_server_url or server  # where Pods fetch code and data
    if options.server_ca_pem is None and pod_server.startswith("https://"):
        options = dataclasses.replace(options, server_ca_pem=ca_pem)
    options = dataclasses.replace(options, pod_server_url=pod_server)
    core = client.CoreV1Api(api_client(options))
    check_access(core, options)
    agent = KubernetesAgent(connection, core, options, AGENT_ID)
    done = threading.Event()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: where each thread is
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    if watch_fd is not None:
        threading.Thread(target=_watch_parent, args=(watch_fd, done), daemon=True).start()
    agent.start()
    log.info("Kubernetes agent for %s in namespace %s", server, options.namespace)
    done.wait()
    agent.stop()
    return 0


def _watch_parent(fd: int, done: threading.Event) -> None:
    """The parent holds the pipe's other end: EOF means it is gone (even after kill -9)."""
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    done.set()


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
