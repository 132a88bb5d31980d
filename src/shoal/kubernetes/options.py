"""What an administrator configures about the Kubernetes cluster shoal runs jobs on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Labels and annotations on everything shoal creates (docs/kubernetes.md, "Mapping").
PREFIX = "shoal.dev"
MANAGED_BY = "app.kubernetes.io/managed-by"
INSTANCE = f"{PREFIX}/instance"  # which shoal: several may share a cluster
ATTEMPT = f"{PREFIX}/attempt-id"  # TASK.ATTEMPT, the agent protocol's key
JOB = f"{PREFIX}/job"
ROLE = f"{PREFIX}/role"
INDEX = f"{PREFIX}/index"
TASK_ATTEMPT = f"{PREFIX}/attempt"
USER = f"{PREFIX}/user"
VC = f"{PREFIX}/virtual-cluster"
EPOCH = f"{PREFIX}/epoch"  # annotation: the node epoch the attempt was launched under
STOP = f"{PREFIX}/stop-requested"  # annotation set before shoal deletes a Pod it stops
TASK_CONTAINER = "task"
FETCH_CONTAINER = "shoal-fetch"  # the init container that fetches code and data (fetch_script.py)
BARRIER_CONTAINER = "shoal-barrier"  # the start barrier's sidecar (barrier_script.py)
BARRIER_SWITCH = "SHOAL_START_BARRIER"  # a job's env: 1 or 0, over the agent's --start-barrier
# Where things are in a Pod (docs/kubernetes.md, "Mapping"), and the keys of an attempt's Secret.
WORKDIR = "/shoal/work"
META_DIR = "/shoal/meta"
DATA_DIR = f"{WORKDIR}/.shoal/data"
SECRET_COMMAND = "command"
SECRET_FETCH_TOKEN = "fetch-token"
# A Node shoal never uses (a kwok node's annotation is not one: kwok nodes are real to shoal).
NODE_OPT_OUT = f"{PREFIX}/exclude"

DEFAULT_IMAGE = "python:3.11-slim"


@dataclass(frozen=True)
class KubernetesOptions:
    """``kubeconfig`` None: in-cluster config when running in a Pod, else ~/.kube/config."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "default"
    # A label selector (``pool=gpu,!spot``): shoal sees only the Nodes it matches.
    node_selector: str = ""
    gpu_type_label: str = "nvidia.com/gpu.product"
    # host: Pods on the node's network, shoal allocates their ports (OpenPAI's way); pod: Pods
    # on the cluster's network, reached by DNS names of a headless Service per job
    network: Literal["host", "pod"] = "host"
    cluster_domain: str = "cluster.local"
    default_image: str = DEFAULT_IMAGE
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    port_low: int = 20000
    port_high: int = 29999
    # Taint keys shoal's Pods tolerate; a Node tainted with another NoSchedule or NoExecute key
    # takes no new shoal task.
    tolerated_taints: tuple[str, ...] = field(default_factory=tuple)
    instance: str = "shoal"  # the value of the shoal.dev/instance label
    # Ship each task's log through pods/log (off: kwok's fake nodes serve no logs, bench).
    follow_logs: bool = True
    # The start barrier (pod network only): a task's command starts once every peer's Pod
    # answers on ``barrier_port``; a job's SHOAL_START_BARRIER=1/0 turns it on or off for it.
    start_barrier: bool = False
    barrier_port: int = 19999  # below the task port range, so no task is given it
    # The image of shoal's helpers in a Pod (the barrier's sidecar, the init container that
    # fetches code and data); None: the task's own image (they need python3)
    helper_image: str | None = None
    # How a Pod reaches the shoal server to fetch its code and data (None: the agent's own URL),
    # and the server's CA certificate (PEM) when that is HTTPS
    pod_server_url: str | None = None
    server_ca_pem: str | None = None
