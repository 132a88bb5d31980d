"""shoal's helper containers in a task's Pod, both running a short standard-library Python
program with ``python3 -c`` in the task's image (or ``--helper-image``):

- ``shoal-fetch``, an init container that brings the attempt's code and data in from the shoal
  server with the attempt's own credential (fetch_script.py);
- ``shoal-barrier``, the start barrier's sidecar (barrier_script.py).

docs/kubernetes.md has the why of both.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from shoal.kubernetes import options as names
from shoal.kubernetes.options import (
    DATA_DIR,
    META_DIR,
    SECRET_FETCH_TOKEN,
    WORKDIR,
    KubernetesOptions,
)
from shoal.protocol import LaunchOrder

BARRIER_SCRIPT = (resources.files("shoal.kubernetes") / "barrier_script.py").read_text()
FETCH_SCRIPT = (resources.files("shoal.kubernetes") / "fetch_script.py").read_text()
# The startup probe's failures allowed, one a second: a peer missing this long (a day) is not
# coming; the kubelet then restarts the sidecar, which waits again.
BARRIER_PROBES = 86_400


def helper_containers(
    order: LaunchOrder, options: KubernetesOptions, secret_name: str
) -> list[dict[str, Any]]:
    """The Pod's init containers, in order: the fetch (runs to its end), then the barrier."""
    return [*_fetch(order, options, secret_name), *_barrier(order, options)]


def _image(order: LaunchOrder, options: KubernetesOptions) -> dict[str, Any]:
    image = {"image": options.helper_image or order.image_name or options.default_image}
    if options.image_pull_policy:
        image["imagePullPolicy"] = options.image_pull_policy
    return image


def _fetch(
    order: LaunchOrder, options: KubernetesOptions, secret_name: str
) -> list[dict[str, Any]]:
    if not (order.has_code or order.data) or not order.fetch_token:
        return []
    data = [{"ref": m.ref, "sha256": m.sha256, "kind": m.kind} for m in order.data]
    env: list[dict[str, Any]] = [
        {"name": "SHOAL_FETCH_SERVER", "value": options.pod_server_url or ""},
        {"name": "SHOAL_FETCH_ATTEMPT", "value": order.attempt_id},
        {"name": "SHOAL_FETCH_CODE", "value": order.code_hash if order.has_code else ""},
        {"name": "SHOAL_FETCH_DATA", "value": json.dumps(data)},
        {"name": "SHOAL_WORKDIR", "value": WORKDIR},
        {"name": "SHOAL_DATA_DIR", "value": DATA_DIR},
        {
            "name": "SHOAL_FETCH_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": SECRET_FETCH_TOKEN}},
        },
    ]
    if options.server_ca_pem:
        env.append({"name": "SHOAL_FETCH_CA", "value": options.server_ca_pem})
    return [
        {
            "name": names.FETCH_CONTAINER,
            **_image(order, options),
            "command": ["python3", "-c", FETCH_SCRIPT],
            "env": env,
            "workingDir": WORKDIR,
            "volumeMounts": [{"name": "work", "mountPath": WORKDIR}],
        }
    ]


def barrier_on(order: LaunchOrder, options: KubernetesOptions) -> bool:
    """Whether the attempt's Pod waits at the start barrier: in the pod network, for a job of
    more than one task, as the job's SHOAL_START_BARRIER or else the agent's option says."""
    if options.network != "pod" or len(order.hostfile.splitlines()) < 2:
        return False
    switch = order.env.get(names.BARRIER_SWITCH, "").strip().lower()
    if switch in ("1", "true", "yes", "on"):
        return True
    if switch in ("0", "false", "no", "off"):
        return False
    return options.start_barrier


def _barrier(order: LaunchOrder, options: KubernetesOptions) -> list[dict[str, Any]]:
    """The start barrier as a sidecar (a restartable init container): its startup probe holds
    the task's container back until every peer answers (barrier_script.py)."""
    if not barrier_on(order, options):
        return []
    port = options.barrier_port
    return [
        {
            "name": names.BARRIER_CONTAINER,
            **_image(order, options),
            "restartPolicy": "Always",
            "command": ["python3", "-c", BARRIER_SCRIPT],
            "env": [
                {"name": "SHOAL_BARRIER_PORT", "value": str(port)},
                {"name": "SHOAL_BARRIER_HOSTFILE", "value": f"{META_DIR}/hostfile"},
            ],
            "ports": [{"name": "shoal-barrier", "containerPort": port, "protocol": "TCP"}],
            "startupProbe": {
                "httpGet": {"path": "/ready", "port": port},
                "periodSeconds": 1,
                "failureThreshold": BARRIER_PROBES,
            },
            "volumeMounts": [{"name": "meta", "mountPath": META_DIR, "readOnly": True}],
        }
    ]
