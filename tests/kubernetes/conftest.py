"""Fixtures of the Kubernetes tests: a control plane per test module (real etcd, kube-apiserver
and controller-manager from scripts/k8s-build.sh), shoal's RBAC applied in the namespace
``shoal``, and a shoal server with the Kubernetes agent running as that ServiceAccount, so a verb
the RBAC lacks fails the test."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shoal.client import ShoalClient
from shoal.local.supervisor import UpOptions, start_local, stop_local
from tests.kubernetes.harness import ControlPlane, Kwok, missing, wait_for

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "deploy" / "kubernetes" / "rbac"
NAMESPACE = "shoal"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    why = missing()
    if why is not None:
        pytest.skip(why)
    started = ControlPlane(tmp_path_factory.mktemp("k8s"))
    try:
        started.start()
        started.kubectl("create", "namespace", NAMESPACE)
        started.kubectl("apply", "-k", str(RBAC))
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def kwok(plane: ControlPlane) -> Iterator[Kwok]:
    running = Kwok(plane).start()
    try:
        yield running
    finally:
        running.stop()


@dataclass
class KubeShoal:
    """A shoal server whose nodes are the test cluster's, and its admin client."""

    home: Path
    client: ShoalClient
    core: Any  # the cluster, as its admin
    plane: ControlPlane
    instance: str = "shoal"

    def own_pods(self) -> list[Any]:
        selector = f"shoal.dev/instance={self.instance}"
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=selector)
        return [p for p in pods.items if p.metadata.deletion_timestamp is None]

    def pods_of(self, job_id: str) -> list[Any]:
        return [p for p in self.own_pods() if p.metadata.labels.get("shoal.dev/job") == job_id]

    def node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.client.nodes() if n["name"] == name)

    def wait_job(self, job_id: str, states: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            job = self.client.job(job_id)
            return job if job["state"] in states else None

        found: dict[str, Any] = wait_for(reached, timeout, f"job {job_id} in {states}", 0.1)
        return found

    def wait_running(self, job_id: str, timeout: float = 60) -> dict[str, Any]:
        """Every task of the job runs (its Pod's container started)."""

        def running() -> dict[str, Any] | None:
            job = self.client.job(job_id)
            tasks = job["tasks"]
            return job if tasks and all(t["state"] == "RUNNING" for t in tasks) else None

        try:
            found: dict[str, Any] = wait_for(running, timeout, f"job {job_id}'s tasks running")
        except TimeoutError as exc:
            why = self.client.why(job_id)
            detail = f"{exc}: {self.client.job(job_id)} {why} {self.client.nodes()}"
            raise AssertionError(detail) from None
        return found


def start_shoal(plane: ControlPlane, home: Path, *extra: str, instance: str = "shoal") -> KubeShoal:
    kubeconfig = plane.service_account_kubeconfig(NAMESPACE, "shoal")
    argv = (
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        NAMESPACE,
        "--instance",
        instance,
        *extra,
    )
    options = UpOptions(home=home, port=0, kill_grace_s=2.0, kubernetes=argv)
    info = start_local(options, timeout_s=60)
    token = (home / "admin.token").read_text().strip()
    return KubeShoal(home, ShoalClient(info.url, token), plane.core(), plane, instance)


@contextlib.contextmanager
def running_shoal(
    plane: ControlPlane, home: Path, *extra: str, instance: str = "shoal"
) -> Iterator[KubeShoal]:
    shoal = start_shoal(plane, home, *extra, instance=instance)
    try:
        yield shoal
    finally:
        stop_local(home)
        # the Pods shoal left (a test that failed half-way): deleted with their owners
        selector = f"shoal.dev/instance={instance}"
        with contextlib.suppress(Exception):
            shoal.core.delete_collection_namespaced_config_map(NAMESPACE, label_selector=selector)
            shoal.core.delete_collection_namespaced_pod(
                NAMESPACE, label_selector=selector, grace_period_seconds=0
            )


def settle(seconds: float = 1.0) -> None:
    """Give the watches a moment to carry a change (only where nothing can be polled for)."""
    time.sleep(seconds)
