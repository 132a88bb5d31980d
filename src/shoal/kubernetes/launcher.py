"""Creating and deleting the Kubernetes objects of task attempts (``pods.py`` decides their shape).

Every call is idempotent: a create answered 409 (it exists) or a delete answered 404 (it is gone)
is success, so an order repeated after a restart of either side changes nothing. The objects of
one job are created and deleted under the job's lock, so the owner ConfigMap is never deleted
while a Pod that names it is being created; jobs launch in parallel (the agent's pool).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from typing import Any

from shoal.kubernetes import options as names
from shoal.kubernetes.options import KubernetesOptions
from shoal.kubernetes.pods import (
    attempt_secret,
    headless_service,
    hostfile_key,
    owner_config_map,
    owner_name,
    owner_reference,
    pod,
    pod_name,
    unsupported,
)
from shoal.protocol import LaunchOrder

log = logging.getLogger("shoal.kubernetes")


class LaunchFailed(Exception):
    """The API server refused the attempt's objects for good (a 4xx other than 409)."""


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


class Launcher:
    def __init__(self, core: Any, options: KubernetesOptions) -> None:
        self.core = core  # a kubernetes.client.CoreV1Api
        self.options = options
        self.requests = 0  # API requests made (bench/kubernetes.py reads it)
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._locks_lock = threading.Lock()
        # job -> (its owner reference, the host-list keys it holds); under the job's lock
        self._owners: dict[str, tuple[dict[str, Any], set[str]]] = {}
        # job -> the Pods this process created and has not removed; under the job's lock. The
        # owner is never deleted while one is left: its watch event may not have come in yet.
        self._live: dict[str, set[str]] = {}

    def _lock(self, job_id: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks[job_id]

    def launch(self, order: LaunchOrder) -> None:
        """Create the attempt's objects; ``LaunchFailed`` if it can never run as a Pod."""
        why = unsupported(order)
        if why is not None:
            raise LaunchFailed(why)
        with self._lock(order.job_id):
            try:
                owner = self._owner_of(order)
                secret = attempt_secret(order, self.options, owner)
                if secret is not None:
                    self._create(self.core.create_namespaced_secret, secret)
                self._create(self.core.create_namespaced_pod, pod(order, self.options, owner))
                self._live.setdefault(order.job_id, set()).add(
                    pod_name(order, self.options.instance)
                )
            except Exception as exc:
                status = _status(exc)
                if status is not None and 400 <= status < 500 and status not in (409, 429):
                    raise LaunchFailed(_refusal(exc)) from exc
                raise

    def _owner_of(self, order: LaunchOrder) -> dict[str, Any]:
        """The job's owner reference: made (with the pod network's Service) by the first launch
        of each job attempt, then remembered, so a gang's other Pods cost one request each."""
        key = hostfile_key(order)
        known = self._owners.get(order.job_id)
        if known is not None and key in known[1]:
            return known[0]
        found = self._owner(order)
        owner = owner_reference(found)
        if self.options.network == "pod":
            service = headless_service(order, self.options, owner)
            self._create(self.core.create_namespaced_service, service)
        self._owners[order.job_id] = (owner, set(found.data or {}) | {key})
        return owner

    def forget(self, job_id: str) -> None:
        """The job's owner may be gone (a Pod of it was deleted behind shoal's back)."""
        with self._lock(job_id):
            self._owners.pop(job_id, None)

    def _create(self, create: Any, body: dict[str, Any]) -> None:
        self.requests += 1
        try:  # the answer is not read into objects: parsing a Pod costs more than sending it
            _drain(create(self.options.namespace, body, _preload_content=False))
        except Exception as exc:
            if _status(exc) != 409:  # 409: it exists (a repeated order)
                raise

    def _owner(self, order: LaunchOrder) -> Any:
        """The job's owner ConfigMap, holding this job attempt's host list."""
        body = owner_config_map(order, self.options)
        name = owner_name(order.job_id, self.options.instance)
        self.requests += 1
        try:
            return self.core.create_namespaced_config_map(self.options.namespace, body)
        except Exception as exc:
            if _status(exc) != 409:
                raise
        self.requests += 1
        found = self.core.read_namespaced_config_map(name, self.options.namespace)
        key = hostfile_key(order)
        if (found.data or {}).get(key) != order.hostfile:
            self.requests += 1
            found = self.core.patch_namespaced_config_map(
                name, self.options.namespace, {"data": {key: order.hostfile}}
            )
        return found

    def stop(self, name: str, grace_s: float) -> None:
        """Stop a Pod: mark it as stopped by shoal, then delete it with its grace period."""
        try:
            self.requests += 2
            patch = {"metadata": {"annotations": {names.STOP: "true"}}}
            _drain(
                self.core.patch_namespaced_pod(
                    name, self.options.namespace, patch, _preload_content=False
                )
            )
            _drain(
                self.core.delete_namespaced_pod(
                    name,
                    self.options.namespace,
                    grace_period_seconds=max(int(grace_s), 0),
                    _preload_content=False,
                )
            )
        except Exception as exc:
            if _status(exc) != 404:
                raise

    def remove(self, job_id: str, name: str, last_of_job: bool, with_secret: bool) -> None:
        """Delete an ended Pod (its logs are shipped) and, ``with_secret``, its Secret; with
        ``last_of_job`` (no other Pod of the job in the watch), the job's owner ConfigMap too,
        unless a Pod of the job was created since."""
        with self._lock(job_id):
            self._delete(self.core.delete_namespaced_pod, name)
            if with_secret:
                self._delete(self.core.delete_namespaced_secret, name)
            live = self._live.get(job_id, set())
            live.discard(name)
            if not live:
                self._live.pop(job_id, None)
            if last_of_job and not live:
                self._owners.pop(job_id, None)
                self._delete(
                    self.core.delete_namespaced_config_map,
                    owner_name(job_id, self.options.instance),
                )

    def _delete(self, delete: Any, name: str) -> None:
        self.requests += 1
        try:
            _drain(delete(name, self.options.namespace, _preload_content=False))
        except Exception as exc:
            if _status(exc) != 404:
                raise


def _drain(response: Any) -> None:
    """Read a raw answer to its end, so its connection goes back to the pool."""
    release = getattr(response, "release_conn", None)
    if release is not None:
        response.read()
        release()


def _refusal(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    message = None
    if isinstance(body, str | bytes):
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
    return f"the Kubernetes API server refused the Pod: {message or exc}"


__all__ = ["LaunchFailed", "Launcher", "pod_name"]
