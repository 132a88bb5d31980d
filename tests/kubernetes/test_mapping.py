"""The pure mappings, without a cluster: a Node as a shoal node, a launch order as a Pod (and its
Secret), a Pod's state as shoal's running and exit reports."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient

from kubernetes import client
from shoal.kubernetes import pods, status
from shoal.kubernetes.nodes import ForeignHolds, agent_node, foreign_requests, pod_requests
from shoal.kubernetes.options import KubernetesOptions
from shoal.kubernetes.raw import Obj
from shoal.protocol import DataMount, LaunchOrder, TaskLimits, task_address

OPTIONS = KubernetesOptions(namespace="shoal", tolerated_taints=("nvidia.com/gpu",))


def node(
    name: str = "n1",
    ready: str = "True",
    unschedulable: bool = False,
    taints: list[client.V1Taint] | None = None,
) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"nvidia.com/gpu.product": "H100"}),
        spec=client.V1NodeSpec(unschedulable=unschedulable, taints=taints),
        status=client.V1NodeStatus(
            allocatable={"cpu": "7500m", "memory": "32Gi", "nvidia.com/gpu": "4"},
            conditions=[client.V1NodeCondition(type="Ready", status=ready)],
            addresses=[
                client.V1NodeAddress(type="Hostname", address=name),
                client.V1NodeAddress(type="InternalIP", address="198.18.7.7"),
            ],
        ),
    )


def a_pod(
    node_name: str = "n1",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    phase: str = "Running",
) -> client.V1Pod:
    resources = client.V1ResourceRequirements(requests=requests, limits=limits)
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", namespace=namespace, labels=labels or {}),
        spec=client.V1PodSpec(
            node_name=node_name,
            containers=[client.V1Container(name="c", image="x", resources=resources)],
        ),
        status=client.V1PodStatus(phase=phase),
    )


def test_a_node_offers_its_allocatable_less_what_other_pods_request() -> None:
    others = [
        a_pod(requests={"cpu": "500m", "memory": "1Gi"}, limits={"nvidia.com/gpu": "1"}),
        a_pod(requests={"cpu": "4"}, phase="Succeeded"),  # finished: holds nothing
        a_pod(namespace="shoal", labels={"shoal.dev/instance": "shoal"}, requests={"cpu": "1"}),
    ]
    held = foreign_requests(others, OPTIONS)
    reported = agent_node(node(), held["n1"], OPTIONS)
    assert (reported.cpu_millis, reported.memory_mib, reported.gpu_indices) == (
        7000,
        31744,
        [0, 1, 2],
    )
    assert reported.gpu_type == "H100" and reported.address == "198.18.7.7"
    assert reported.ready and reported.platform_hold is None


def test_a_pod_holds_the_larger_of_its_containers_and_its_init_container() -> None:
    pod = a_pod(requests={"cpu": "1", "memory": "100Mi"})
    pod.spec.init_containers = [
        client.V1Container(name="i", resources=client.V1ResourceRequirements(requests={"cpu": "2"}))
    ]
    held = pod_requests(pod)
    assert (held.cpu_millis, held.memory_mib) == (2000, 100)


def test_not_ready_cordoned_and_tainted_nodes() -> None:
    assert not agent_node(node(ready="Unknown"), None, OPTIONS).ready
    cordoned = agent_node(node(unschedulable=True), None, OPTIONS)
    assert cordoned.platform_hold == "cordoned in Kubernetes (spec.unschedulable)"
    taint = client.V1Taint(key="dedicated", value="infra", effect="NoSchedule")
    tainted = agent_node(node(taints=[taint]), None, OPTIONS)
    assert tainted.platform_hold == "tainted dedicated=infra:NoSchedule in Kubernetes"
    tolerated = [
        client.V1Taint(key="nvidia.com/gpu", effect="NoSchedule"),
        client.V1Taint(key="node.kubernetes.io/not-ready", effect="NoExecute"),
        client.V1Taint(key="soft", effect="PreferNoSchedule"),
    ]
    assert agent_node(node(taints=tolerated), None, OPTIONS).platform_hold is None


OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "shoal-job-17", "uid": "u"}


def order(**changes: Any) -> LaunchOrder:
    fields: dict[str, Any] = {
        "attempt_id": "41.2",
        "job_id": "17",
        "role": "Learner_Main",
        "index": 3,
        "node": "n1",
        "command": "python train.py --token <% $secrets.token %>",
        "env": {
            "SHOAL_USER": "alice",
            "SHOAL_VIRTUAL_CLUSTER": "team-a",
            "SHOAL_JOB_ATTEMPT": "2",
            "CUDA_VISIBLE_DEVICES": "3",
        },
        "hostfile": "n1 slots=1\n",
        "has_code": False,
        "kill_grace_s": 7.5,
        "secrets": {"<% $secrets.token %>": "s3cret"},
        "epoch": 4,
        "limits": TaskLimits(cpu_millis=1500, memory_mib=2048, pids=4096, gpu_indices=[3]),
        "ports": {"http": [20001]},
        "image_name": "pytorch:2",
    }
    return LaunchOrder(**(fields | changes))


def test_a_launch_order_as_a_pod() -> None:
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "shoal-job-17", "uid": "u"}
    body = pods.pod(order(), OPTIONS, owner)
    assert body["metadata"]["name"] == "shoal-17-learner-main-3-41-2"
    labels = body["metadata"]["labels"]
    assert labels["shoal.dev/attempt-id"] == "41.2" and labels["shoal.dev/role"] == "Learner_Main"
    assert labels["shoal.dev/user"] == "alice" and labels["shoal.dev/virtual-cluster"] == "team-a"
    assert body["metadata"]["annotations"]["shoal.dev/epoch"] == "4"
    assert body["metadata"]["ownerReferences"] == [owner]
    spec = body["spec"]
    assert spec["nodeName"] == "n1" and spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 7 and spec["hostNetwork"] is True
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["image"] == "pytorch:2"
    wanted = {"cpu": "1500m", "memory": "2048Mi", "nvidia.com/gpu": "1"}
    assert container["resources"] == {"requests": wanted, "limits": wanted}
    env = {e["name"]: e for e in container["env"]}
    assert "CUDA_VISIBLE_DEVICES" not in env  # the device plugin chooses the GPUs
    assert env["SHOAL_COMMAND_WITH_SECRETS"]["valueFrom"]["secretKeyRef"]["name"] == (
        "shoal-17-learner-main-3-41-2"
    )
    assert "s3cret" not in str(body), "no secret value in a Pod spec"
    assert spec["volumes"][1]["configMap"]["items"] == [{"key": "hostfile-2", "path": "hostfile"}]


def test_secrets_go_to_a_secret_and_plain_commands_stay_inline() -> None:
    owner = {"name": "shoal-job-17"}
    secret = pods.attempt_secret(order(), OPTIONS, owner)
    assert secret is not None
    assert secret["stringData"] == {"command": "python train.py --token s3cret"}
    plain = order(secrets={}, command="echo hi")
    assert pods.attempt_secret(plain, OPTIONS, owner) is None
    assert pods.pod(plain, OPTIONS, owner)["spec"]["containers"][0]["command"] == [
        "/bin/sh",
        "-c",
        "echo hi",
    ]


def test_names_fit_a_dns_label_and_stay_unique_per_attempt() -> None:
    long = order(job_id="x" * 200, role="r" * 200)
    name = pods.pod_name(long, "shoal")
    assert len(name) <= 63 and name.endswith("-3-41-2")
    assert pods.pod_name(order(attempt_id="41.3"), "shoal") != pods.pod_name(order(), "shoal")
    assert len(pods.label_value("a" * 100)) <= 63
    other = pods.pod_name(long, "i" * 63)
    assert len(other) <= 63 and other.endswith("-3-41-2") and other.startswith("shoal-iiii")


def test_two_instances_in_one_namespace_share_no_object_name() -> None:
    """Both number their jobs from 1: job 1 of each has its own owner, Pods and Service (one
    deleting its owner must not garbage-collect the other's Pods)."""
    instances = ["shoal", "shoal-bar", "bar", "team.b", "team-b", "x" * 63, "x" * 62 + "y"]
    owners = {pods.owner_name("1", i) for i in instances}
    names = {pods.pod_name(order(job_id="1"), i) for i in instances}
    assert len(owners) == len(names) == len(instances)
    assert pods.owner_name("1", "shoal") == "shoal-job-1"  # the default keeps its names
    assert pods.owner_name("1", "bar") == "shoal-bar-job-1"
    for name in owners | names:
        assert re.fullmatch(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", name), name
    dotted = KubernetesOptions(namespace="ml", network="pod", instance="team.b")
    built = pods.pod(order(job_id="17"), dotted, {"name": pods.owner_name("17", "team.b")})
    pattern = agent_node(node(), None, dotted).task_address
    assert pattern is not None
    address = task_address(pattern, "17", order().role, order().index)
    spec = built["spec"]
    assert address == f"{spec['hostname']}.{spec['subdomain']}.ml.svc.cluster.local"
    assert built["metadata"]["labels"]["shoal.dev/instance"] == "team.b"


def test_code_and_data_come_through_an_init_container_with_the_attempts_credential() -> None:
    data = [DataMount(ref="alice/corpus", sha256="d" * 64, kind="dir", size=10)]
    fetching = order(has_code=True, code_hash="c" * 64, data=data, fetch_token="shoal_attempt_x")
    options = KubernetesOptions(pod_server_url="https://198.18.0.9:8443", server_ca_pem="PEM")
    body = pods.pod(fetching, options, OWNER)
    (fetch,) = body["spec"]["initContainers"]
    assert fetch["name"] == "shoal-fetch" and fetch["image"] == "pytorch:2"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in fetch["env"]}
    assert env["SHOAL_FETCH_SERVER"] == "https://198.18.0.9:8443" and env["SHOAL_FETCH_CA"] == "PEM"
    assert env["SHOAL_FETCH_CODE"] == "c" * 64 and env["SHOAL_FETCH_ATTEMPT"] == "41.2"
    assert env["SHOAL_FETCH_TOKEN"] == {
        "secretKeyRef": {"name": body["metadata"]["name"], "key": "fetch-token"}
    }
    assert "shoal_attempt_x" not in str(body), "the credential is in the Secret, not the Pod"
    secret = pods.attempt_secret(fetching, options, OWNER)
    assert secret is not None and secret["stringData"]["fetch-token"] == "shoal_attempt_x"
    assert fetch["volumeMounts"] == [{"name": "work", "mountPath": "/shoal/work"}]
    assert pods.unsupported(fetching) is None


def test_code_an_old_server_cannot_credential_is_refused_with_the_way_out() -> None:
    why = pods.unsupported(order(has_code=True, code_hash="c" * 64))
    assert why is not None and "upgrade the shoal server" in why
    old = pods.unsupported(order(has_code=True, code_hash=None, fetch_token="t"))
    assert old is not None and "submit the job again" in old


def finished_pod(
    phase: str,
    exit_code: int | None = None,
    reason: str | None = None,
    pod_reason: str | None = None,
    waiting: str | None = None,
    stop: bool = False,
) -> client.V1Pod:
    started = datetime(2026, 11, 27, 3, 0, 0, tzinfo=UTC)
    state = client.V1ContainerState()
    if exit_code is not None:
        state.terminated = client.V1ContainerStateTerminated(
            exit_code=exit_code, reason=reason, started_at=started, finished_at=started
        )
    elif waiting is not None:
        state.waiting = client.V1ContainerStateWaiting(reason=waiting, message="not found")
    else:
        state.running = client.V1ContainerStateRunning(started_at=started)
    annotations = {"shoal.dev/epoch": "2"} | ({"shoal.dev/stop-requested": "true"} if stop else {})
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="p", labels={"shoal.dev/attempt-id": "5.1"}, annotations=annotations
        ),
        spec=client.V1PodSpec(
            node_name="n1", containers=[client.V1Container(name="task", image="img:1")]
        ),
        status=client.V1PodStatus(
            phase=phase,
            reason=pod_reason,
            container_statuses=[
                client.V1ContainerStatus(
                    name="task", state=state, image="img:1", image_id="", ready=False,
                    restart_count=0,
                )
            ],
        ),
    )  # fmt: skip


def test_pod_states_as_reports() -> None:
    running = status.facts(finished_pod("Running"))
    report = status.running_report(running)
    assert report is not None and report.epoch == 2 and report.started_at == 1795748400.0
    assert status.exit_report(running, 0) is None

    failed = status.exit_report(status.facts(finished_pod("Failed", 3, "Error")), 0)
    assert failed is not None and failed.exit_code == 3 and not failed.oom_killed
    oom = status.exit_report(status.facts(finished_pod("Failed", 137, "OOMKilled")), 0)
    assert oom is not None and oom.oom_killed
    evicted = status.exit_report(status.facts(finished_pod("Failed", pod_reason="Evicted")), 0)
    assert evicted is not None and evicted.lost and "Evicted" in (evicted.lost_reason or "")
    late = status.exit_report(
        status.facts(finished_pod("Failed", pod_reason="DeadlineExceeded")), 0
    )
    assert late is not None and late.timed_out
    pull = status.exit_report(status.facts(finished_pod("Pending", waiting="ErrImageNeverPull")), 0)
    assert pull is not None and "img:1" in (pull.launch_error or "")


def test_a_pod_gone_is_stopped_when_shoal_asked_and_lost_otherwise() -> None:
    asked = status.gone_report(status.facts(finished_pod("Running", stop=True)), 9.0)
    assert asked.stop_requested and not asked.lost
    taken = status.gone_report(status.facts(finished_pod("Running")), 9.0)
    assert taken.lost and "deleted outside shoal" in (taken.lost_reason or "")


def test_the_pod_network_names_a_task_the_way_the_server_addresses_it() -> None:
    options = KubernetesOptions(namespace="ml", network="pod")
    pattern = agent_node(node(), None, options).task_address
    assert pattern is not None
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "shoal-job-17", "uid": "u"}
    spec = pods.pod(order(), options, owner)["spec"]
    assert spec["hostNetwork"] is False and spec["dnsPolicy"] == "ClusterFirst"
    service = pods.headless_service(order(), options, owner)
    # what the server writes as the task's address is the Pod's name in its job's Service
    address = task_address(pattern, "17", "Learner_Main", 3)
    assert address == f"{spec['hostname']}.{spec['subdomain']}.ml.svc.cluster.local"
    assert spec["subdomain"] == service["metadata"]["name"] == "shoal-job-17"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    assert agent_node(node(), None, OPTIONS).task_address is None  # host network: the node's


def test_the_start_barrier_is_a_sidecar_of_pod_network_gangs_that_a_job_can_turn_off() -> None:
    gang = order(hostfile="a slots=1\nb slots=1\n", secrets={}, command="run")
    on = KubernetesOptions(network="pod", start_barrier=True)
    (sidecar,) = pods.pod(gang, on, OWNER)["spec"]["initContainers"]
    assert sidecar["name"] == "shoal-barrier" and sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == "pytorch:2"  # the task's own image by default
    assert sidecar["startupProbe"]["httpGet"] == {"path": "/ready", "port": 19999}
    assert sidecar["command"][:2] == ["python3", "-c"] and "resources" not in sidecar
    given = KubernetesOptions(network="pod", start_barrier=True, helper_image="py:3")
    assert pods.pod(gang, given, OWNER)["spec"]["initContainers"][0]["image"] == "py:3"
    off = order(hostfile=gang.hostfile, env={**gang.env, "SHOAL_START_BARRIER": "0"})
    assert "initContainers" not in pods.pod(off, on, OWNER)["spec"]
    asked = order(hostfile=gang.hostfile, env={**gang.env, "SHOAL_START_BARRIER": "1"})
    assert "initContainers" in pods.pod(asked, KubernetesOptions(network="pod"), OWNER)["spec"]
    alone = order(secrets={}, command="run")  # one task: nobody to wait for
    assert "initContainers" not in pods.pod(alone, on, OWNER)["spec"]
    host = KubernetesOptions(network="host", start_barrier=True)
    assert "initContainers" not in pods.pod(asked, host, OWNER)["spec"]


def test_a_barrier_that_cannot_run_is_a_launch_error_naming_the_way_out() -> None:
    pod = finished_pod("Pending", waiting="PodInitializing")
    crashed = client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(exit_code=127, reason="Error")
    )
    pod.status.init_container_statuses = [
        client.V1ContainerStatus(
            name="shoal-barrier", state=client.V1ContainerState(), last_state=crashed,
            image="busybox", image_id="", ready=False, restart_count=1,
        )
    ]  # fmt: skip
    ended = status.exit_report(status.facts(pod), 0)
    assert ended is not None and ended.launch_error is not None
    assert "python3" in ended.launch_error and "--helper-image" in ended.launch_error
    pod.status.init_container_statuses[0].last_state = client.V1ContainerState()
    assert status.exit_report(status.facts(pod), 0) is None  # waiting for peers: fine


def test_the_served_json_reads_as_the_clients_models_do() -> None:
    """The agent reads Pods and Nodes as served (raw.Obj), not as the client's models: the
    facts, requests and nodes it takes from them must be the same."""
    served = ApiClient().sanitize_for_serialization
    for pod in (
        finished_pod("Running"),
        finished_pod("Failed", 137, "OOMKilled"),
        finished_pod("Pending", waiting="ErrImagePull"),
        a_pod("n1", requests={"cpu": "2", "memory": "1Gi"}),
    ):
        assert repr(pod_requests(Obj(served(pod)))) == repr(pod_requests(pod))
        assert status.facts(Obj(served(pod))) == status.facts(pod)
        pod.metadata.deletion_timestamp = datetime(2026, 11, 27, 4, 0, 1, 500000, tzinfo=UTC)
        assert status.facts(Obj(served(pod))) == status.facts(pod)
    tainted = [client.V1Taint(key="k", effect="NoSchedule", value="v")]
    for listed in (node(), node(ready="False"), node(unschedulable=True, taints=tainted)):
        assert agent_node(Obj(served(listed)), None, OPTIONS) == agent_node(listed, None, OPTIONS)


def test_what_other_pods_hold_kept_from_events_equals_a_fresh_sum() -> None:
    """The agent keeps foreign_requests up to date event by event (ForeignHolds): after adds,
    moves, ends and deletions it must equal the sum over the Pods left."""
    holds = ForeignHolds(OPTIONS)
    alive: dict[str, client.V1Pod] = {}

    def event(kind: str, pod: client.V1Pod) -> None:
        holds.update(kind, pod)
        if kind == "DELETED":
            alive.pop(pod.metadata.name, None)
        else:
            alive[pod.metadata.name] = pod

    for i in range(12):
        pod = a_pod(f"n{i % 3}", "shoal", requests={"cpu": f"{i + 1}00m", "memory": "1Gi"})
        pod.metadata.name = f"p{i}"
        event("ADDED", pod)
    moved = a_pod("n2", "shoal", requests={"cpu": "3", "memory": "2Gi", "nvidia.com/gpu": "1"})
    moved.metadata.name = "p0"
    event("MODIFIED", moved)
    done = a_pod("n1", "shoal", requests={"cpu": "200m"}, phase="Succeeded")
    done.metadata.name = "p1"
    event("MODIFIED", done)
    event("DELETED", alive["p4"])
    ours = a_pod("n1", "shoal", labels={"shoal.dev/instance": "shoal"}, requests={"cpu": "9"})
    ours.metadata.name = "p5"
    event("MODIFIED", ours)
    fresh = foreign_requests(alive.values(), OPTIONS)
    kept = {node: sums.key() for node, sums in holds.by_node.items() if sums.key() != (0, 0, 0)}
    assert kept == {node: sums.key() for node, sums in fresh.items()}
