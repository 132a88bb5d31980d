"""shoal on a real API server with kwok's fake nodes (GPU nodes of two types): the cluster's
Nodes become shoal's nodes, shoal's decisions decide which Pods exist, and Kubernetes' own state
(other Pods, cordons) limits what shoal may use. The Kubernetes agent runs as the ServiceAccount
of deploy/kubernetes/rbac, so a verb it lacks fails these tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubernetes.conftest import NAMESPACE, KubeShoal, running_shoal
from tests.kubernetes.harness import ControlPlane, Kwok, decode, fake_node, wait_for

GPU_LABEL = "nvidia.com/gpu.product"

# one worker runs the whole module: its cluster is started once (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("kubernetes-kwok")


def job(name: str, gpus: int, instances: int = 1, cpu: str = "1") -> str:
    return (
        f"version: 1\nname: {name}\nroles:\n  w:\n    instances: {instances}\n"
        f"    resources: {{cpu: {cpu}, memory: 1Gi, gpu: {gpus}}}\n"
        "    command: sleep 3600\n"
    )


@pytest.fixture(scope="module")
def shoal(
    plane: ControlPlane, kwok: Kwok, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeShoal]:
    core = plane.core()
    core.create_node(fake_node("kw-a100", labels={GPU_LABEL: "A100", "pool": "gpu"}))
    core.create_node(fake_node("kw-v100", labels={GPU_LABEL: "V100", "pool": "gpu"}))

    def ready() -> bool:
        return all(
            any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or ()))
            for n in core.list_node().items
        )

    wait_for(ready, 60, "kwok's nodes Ready")
    home: Path = tmp_path_factory.mktemp("shoal-k8s") / "home"
    with running_shoal(plane, home, "--no-logs") as running:
        wait_for(lambda: len(running.client.nodes()) == 2, 30, "two shoal nodes")
        yield running


def ready_node(shoal: KubeShoal, name: str, gpus: int) -> bool:
    node = shoal.node(name)
    return node["state"] == "READY" and node["gpus"] == gpus


def test_the_cluster_nodes_are_shoal_nodes(shoal: KubeShoal) -> None:
    nodes = {n["name"]: n for n in shoal.client.nodes()}
    assert set(nodes) == {"kw-a100", "kw-v100"}
    a100 = nodes["kw-a100"]
    assert (a100["cpus"], a100["memoryMiB"], a100["gpus"]) == (32, 256 * 1024, 8)
    assert a100["gpuType"] == "A100" and nodes["kw-v100"]["gpuType"] == "V100"
    assert a100["labels"]["pool"] == "gpu"  # the Node's labels are kept
    assert a100["state"] == "READY"


def test_a_gpu_type_request_gets_a_pod_bound_to_that_type(shoal: KubeShoal) -> None:
    text = job("typed", 2).replace("gpu: 2}", "gpu: 2, gpu_type: V100}")
    job_id = shoal.client.submit(text)[0]["id"]
    shoal.wait_running(job_id)
    (pod,) = shoal.pods_of(job_id)
    assert pod.spec.node_name == "kw-v100"
    container = pod.spec.containers[0]
    assert container.resources.requests == container.resources.limits
    assert container.resources.limits["nvidia.com/gpu"] == "2"
    assert pod.spec.restart_policy == "Never" and pod.spec.host_network
    assert pod.spec.automount_service_account_token is False
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name) == ("ConfigMap", f"shoal-job-{job_id}")
    labels = pod.metadata.labels
    assert labels["shoal.dev/role"] == "w" and labels["shoal.dev/index"] == "0"
    assert labels["shoal.dev/user"] == "admin" and labels["shoal.dev/virtual-cluster"] == "default"
    env = {e.name: e.value for e in container.env}
    assert env["SHOAL_TASK_ROLE"] == "w" and env["PAI_TASK_INDEX"] == "0"
    assert "CUDA_VISIBLE_DEVICES" not in env  # the device plugin chooses the GPUs in a Pod
    shoal.client.stop(job_id)
    shoal.wait_job(job_id, ("STOPPED",))
    wait_for(lambda: not shoal.pods_of(job_id), 30, "the stopped job's Pod deleted")


def test_pods_outside_shoal_and_cordons_limit_what_shoal_uses(shoal: KubeShoal) -> None:
    core = shoal.core
    outside = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "not-shoals", "namespace": "default"},
        "spec": {
            "nodeName": "kw-a100",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "4", "nvidia.com/gpu": "3"},
                        "limits": {"nvidia.com/gpu": "3"},
                    },
                }
            ],
        },
    }
    core.create_namespaced_pod("default", outside)
    try:
        wait_for(lambda: ready_node(shoal, "kw-a100", 5), 30, "kw-a100 with 3 GPUs fewer")
        assert shoal.node("kw-a100")["cpus"] == 28
        core.patch_node("kw-v100", {"spec": {"unschedulable": True}})
        wait_for(lambda: shoal.node("kw-v100")["state"] != "READY", 30, "kw-v100 held")
        # 6 GPUs fit on no node now: kw-a100 has 5 left, kw-v100 is cordoned
        job_id = shoal.client.submit(job("six", 6))[0]["id"]
        waiting = shoal.client.why(job_id)
        assert shoal.client.job(job_id)["state"] == "WAITING", waiting
        assert not shoal.pods_of(job_id)
        core.patch_node("kw-v100", {"spec": {"unschedulable": False}})
        shoal.wait_running(job_id, timeout=30)
        (pod,) = shoal.pods_of(job_id)
        assert pod.spec.node_name == "kw-v100"
        shoal.client.stop(job_id)
        shoal.wait_job(job_id, ("STOPPED",))
    finally:
        core.patch_node("kw-v100", {"spec": {"unschedulable": False}})
        core.delete_namespaced_pod("not-shoals", "default", grace_period_seconds=0)
    wait_for(lambda: ready_node(shoal, "kw-a100", 8), 30, "kw-a100 whole again")


def test_a_gang_that_does_not_fit_creates_no_pod(shoal: KubeShoal) -> None:
    halves = shoal.client.submit(job("halves", 4, instances=2))[0]["id"]
    shoal.wait_running(halves)
    assert len(shoal.pods_of(halves)) == 2
    # 2 x 8 GPUs fits the cluster, but not beside `halves` (4 GPUs left on each node)
    gang = shoal.client.submit(job("gang", 8, instances=2))[0]["id"]
    wait_for(lambda: shoal.client.job(gang).get("pending"), 30, "the gang's pending reason")
    assert not shoal.pods_of(gang), "a gang that does not fit whole starts no Pod at all"
    shoal.client.stop(halves)
    shoal.wait_running(gang, timeout=60)
    pods = shoal.pods_of(gang)
    assert sorted(p.spec.node_name for p in pods) == ["kw-a100", "kw-v100"]
    shoal.client.stop(gang)
    shoal.wait_job(gang, ("STOPPED",))


def test_quota_borrowing_and_reclaim_decide_which_pods_exist(shoal: KubeShoal) -> None:
    for name in ("team-a", "team-b"):
        shoal.client.save_vc(name, {"guarantee_gpu": 8, "members": []}, create=True)
    a_jobs = [
        shoal.client.submit(job(f"a{i}", 4), virtual_cluster="team-a")[0]["id"] for i in range(4)
    ]
    for job_id in a_jobs:  # team-a borrows team-b's idle half
        shoal.wait_running(job_id)
    by_vc = [p.metadata.labels["shoal.dev/virtual-cluster"] for p in shoal.own_pods()]
    assert by_vc.count("team-a") == 4
    b_job = shoal.client.submit(job("b0", 8), virtual_cluster="team-b")[0]["id"]
    shoal.wait_running(b_job, timeout=60)  # team-b reclaims its guarantee

    def pods_by_vc() -> dict[str, int]:
        counted: dict[str, int] = {}
        for pod in shoal.own_pods():
            vc = pod.metadata.labels["shoal.dev/virtual-cluster"]
            counted[vc] = counted.get(vc, 0) + 1
        return counted

    wait_for(lambda: pods_by_vc() == {"team-a": 2, "team-b": 1}, 30, "2 team-a Pods, 1 team-b")
    preempted = [j for j in a_jobs if shoal.client.job(j)["state"] == "WAITING"]
    assert len(preempted) == 2
    for job_id in preempted:
        kinds = [e["kind"] for e in shoal.client.events(job_id)]
        assert "preempted" in kinds and "requeued" in kinds
    for job_id in [*a_jobs, b_job]:
        shoal.client.stop(job_id)
    wait_for(lambda: not shoal.own_pods(), 30, "every Pod deleted")

    def owners() -> list[object]:
        selector = "shoal.dev/instance"
        return list(shoal.core.list_namespaced_config_map(NAMESPACE, label_selector=selector).items)

    wait_for(lambda: not owners(), 30, "each job's owner ConfigMap gone with its last Pod")


def test_secrets_reach_the_pod_through_a_secret_never_its_spec(shoal: KubeShoal) -> None:
    secret = "k8s-s3cret-value"
    text = (
        f"version: 1\nname: secretive\nsecrets: {{token: {secret}}}\nroles:\n  w:\n"
        "    resources: {cpu: 1, memory: 1Gi}\n"
        "    command: 'login --token {{ secrets.token }}; sleep 3600'\n"
    )
    job_id = shoal.client.submit(text)[0]["id"]
    shoal.wait_running(job_id)
    (pod,) = shoal.pods_of(job_id)
    assert secret not in str(pod.to_dict()), "the value is in no Pod field"
    env = {e.name: e for e in pod.spec.containers[0].env}
    ref = env["SHOAL_COMMAND_WITH_SECRETS"].value_from.secret_key_ref
    stored = shoal.core.read_namespaced_secret(ref.name, NAMESPACE)
    assert decode(stored, ref.key) == f"login --token {secret}; sleep 3600"
    assert stored.metadata.owner_references[0].name == f"shoal-job-{job_id}"
    shoal.client.stop(job_id)
    shoal.wait_job(job_id, ("STOPPED",))

    def secret_gone() -> bool:
        names = [s.metadata.name for s in shoal.core.list_namespaced_secret(NAMESPACE).items]
        return ref.name not in names

    wait_for(secret_gone, 30, "the attempt's Secret deleted with its Pod")


def test_openpai_kubernetes_routes_answer_with_the_clusters_objects(shoal: KubeShoal) -> None:
    job_id = shoal.client.submit(job("openpai-view", 1))[0]["id"]
    shoal.wait_running(job_id)
    nodes = shoal.client._call("GET", "/api/v2/kubernetes/nodes")
    by_name = {n["metadata"]["name"]: n for n in nodes["items"]}
    assert set(by_name) == {"kw-a100", "kw-v100"}
    # the Node as Kubernetes serves it: kwok's annotation, the allocatable as written
    assert by_name["kw-a100"]["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert by_name["kw-a100"]["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    pods = shoal.client._call("GET", "/api/v2/kubernetes/pods")
    (pod,) = [p for p in pods["items"] if p["metadata"]["labels"]["shoal.dev/job"] == job_id]
    assert pod["spec"]["nodeName"] in by_name and pod["status"]["phase"] == "Running"
    other = shoal.client._call(
        "GET", "/api/v2/kubernetes/pods", params={"namespace": "kube-system"}
    )
    assert other["items"] == []
    shoal.client.stop(job_id)
    shoal.wait_job(job_id, ("STOPPED",))
