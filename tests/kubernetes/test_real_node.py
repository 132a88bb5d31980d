"""shoal on a real Kubernetes node (kubelet + containerd + crun, local images): real processes in
Pods, their exit codes and OOM kills in shoal's terms, host lists that reach across roles over
TCP, logs that follow and outlive their Pods, and exec through ``pods/exec``."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from shoal.client import ShoalClient
from tests.envs import is_user_setting
from tests.kubernetes import shoal_image
from tests.kubernetes.conftest import REPO, KubeShoal, running_shoal
from tests.kubernetes.harness import ControlPlane, free_port, wait_for
from tests.kubernetes.real_node import BUSYBOX, NODE_NAME, PYTHON, RealNode, missing

SERVER = (
    "import os, socket\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', int(os.environ['PAI_PORT_LIST_server_0_http']))); s.listen()\n"
    "c = s.accept()[0]; c.sendall(b'pong ' + c.recv(100)); c.close()\n"
    "print('served', flush=True)\n"
)
CLIENT = (
    "import os, socket, time\n"
    "host = os.environ['PAI_HOST_IP_server_0']\n"
    "port = int(os.environ['PAI_PORT_LIST_server_0_http'])\n"
    "for _ in range(200):\n"
    "    try:\n"
    "        c = socket.create_connection((host, port), timeout=2); break\n"
    "    except OSError:\n"
    "        time.sleep(0.1)\n"
    "c.sendall(b'from ' + os.environ['PAI_TASK_INDEX'].encode()); print(c.recv(100).decode())\n"
)

# one worker runs the whole module: its cluster is started once (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("kubernetes-real-node")


def indented(code: str, by: int = 8) -> str:
    return "".join(f"{' ' * by}{line}\n" for line in code.splitlines())


# The real node is this machine: 2 cores, so a server and a client of one core each.
PING_PONG = f"""protocolVersion: 2
name: ping-pong
type: job
prerequisites:
  - {{type: dockerimage, name: py, uri: "{PYTHON}"}}
taskRoles:
  server:
    instances: 1
    dockerImage: py
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0, ports: {{http: 1}}}}
    commands:
      - |
        python3 - <<'EOF'
{indented(SERVER)}        EOF
  client:
    instances: 1
    dockerImage: py
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands:
      - |
        python3 - <<'EOF'
{indented(CLIENT)}        EOF
"""


@pytest.fixture(scope="module")
def node(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    why = missing()
    if why is not None:
        pytest.skip(why)
    started = RealNode(plane, tmp_path_factory.mktemp("real-node"))
    try:
        started.start()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def shoal(
    plane: ControlPlane, node: RealNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeShoal]:
    home = tmp_path_factory.mktemp("shoal-real") / "home"
    extra = ("--image-pull-policy", "Never", "--default-image", BUSYBOX)
    with running_shoal(plane, home, *extra) as running:
        wait_for(lambda: running.node(NODE_NAME)["state"] == "READY", 30, "the real node in shoal")
        yield running


def cli_env(shoal: KubeShoal) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_HOME=str(shoal.home), SHOAL_CONFIG=str(shoal.home / "no-config.yaml"))
    return env


def cli_argv() -> list[str]:
    return [sys.executable, "-m", "shoal", "--context", "local"]


def cli(shoal: KubeShoal, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cli_argv(), *args],
        capture_output=True,
        text=True,
        env=cli_env(shoal),
        timeout=timeout,
        check=False,
    )


def test_the_node_is_a_shoal_node(shoal: KubeShoal, node: RealNode) -> None:
    seen = shoal.node(NODE_NAME)
    assert seen["address"] == node.address  # its InternalIP: host-network tasks listen there
    assert seen["cpus"] >= 1 and seen["memoryMiB"] > 1024 and seen["fencing"] == "confirmed"


def test_an_openpai_job_of_two_roles_reaches_across_over_tcp(
    shoal: KubeShoal, node: RealNode
) -> None:
    job_id = shoal.client.submit(PING_PONG)[0]["id"]
    done = shoal.wait_job(job_id, ("SUCCEEDED", "FAILED", "STOPPED"), timeout=120)
    logs = {
        f"{role}/{index}": shoal.client.logs(job_id, role, index)["data"]
        for role, index in (("server", 0), ("client", 0))
    }
    assert done["state"] == "SUCCEEDED", (done, logs)
    assert logs == {"server/0": "served\n", "client/0": "pong from 0\n"}
    env_host = shoal.client.job(job_id)["tasks"][0]
    assert env_host["node"] == NODE_NAME
    wait_for(lambda: not shoal.pods_of(job_id), 30, "the finished job's Pods deleted")
    # the logs outlive the Pods
    assert shoal.client.logs(job_id, "server", 0)["data"] == "served\n"


def test_an_exit_code_fails_the_role_and_the_job_with_it(shoal: KubeShoal) -> None:
    text = "version: 1\nname: three\nroles:\n  w:\n    command: echo failing; exit 3\n"
    job_id = shoal.client.submit(text)[0]["id"]
    done = shoal.wait_job(job_id, ("SUCCEEDED", "FAILED", "STOPPED"), timeout=60)
    assert (done["state"], done["exitCode"], done["exitClass"]) == ("FAILED", 3, "USER_FAILURE"), (
        done
    )
    assert shoal.client.logs(job_id, "w", 0)["data"] == "failing\n"


def test_a_task_over_its_memory_limit_is_an_oom(shoal: KubeShoal) -> None:
    grow = "python3 -c 'b = bytearray(300 * 1024 * 1024); print(len(b))'"
    text = (
        f"version: 1\nname: greedy\nroles:\n  w:\n    image: {PYTHON}\n"
        f"    resources: {{cpu: 1, memory: 64Mi}}\n    command: {grow}\n"
    )
    job_id = shoal.client.submit(text)[0]["id"]
    done = shoal.wait_job(job_id, ("SUCCEEDED", "FAILED", "STOPPED"), timeout=60)
    assert (done["state"], done["exitClass"]) == ("FAILED", "OOM"), done


def test_logs_follow_exec_works_and_logs_outlive_the_pod(shoal: KubeShoal) -> None:
    text = (
        "version: 1\nname: chatty\nroles:\n  w:\n"
        "    command: for i in 1 2 3; do echo line $i; sleep 0.2; done; sleep 300\n"
    )
    job_id = shoal.client.submit(text)[0]["id"]
    shoal.wait_running(job_id)
    follower = subprocess.Popen(
        [*cli_argv(), "job", "logs", job_id, "-f", "--task", "w/0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(shoal),
    )
    try:  # -f follows the running task: its lines come as they are written
        assert follower.stdout is not None
        lines = [follower.stdout.readline() for _ in range(3)]
        assert lines == ["line 1\n", "line 2\n", "line 3\n"]
    finally:
        follower.terminate()
        follower.wait(10)
    done = cli(shoal, "job", "exec", job_id, "--", "sh", "-c", "echo $SHOAL_TASK_ROLE; exit 4")
    assert done.returncode == 4, done.stderr
    assert done.stdout == "w\n"
    shoal.client.stop(job_id)
    shoal.wait_job(job_id, ("STOPPED",), timeout=60)
    wait_for(lambda: not shoal.pods_of(job_id), 30, "the stopped job's Pod deleted")
    assert shoal.client.logs(job_id, "w", 0)["data"].startswith("line 1\nline 2\nline 3\n")


def test_a_pods_port_is_reached_through_the_server(shoal: KubeShoal) -> None:
    """`shoal job port-forward --stdio` and the task proxy reach a Pod's labelled port through
    ``pods/portforward`` (docs/proxy.md); a port that is not the task's is refused."""
    serve = (  # the page at / (port-forward) and at the proxy's path for the task (the proxy)
        'mkdir -p /tmp/w"$SHOAL_PROXY_PREFIX" && echo "pod page" > /tmp/w/index.html && '
        'cp /tmp/w/index.html /tmp/w"$SHOAL_PROXY_PREFIX" && '
        'exec httpd -f -p "$SHOAL_PORT" -h /tmp/w'
    )
    text = f"version: 1\nname: webpod\nroles:\n  w:\n    command: {serve}\n"
    job_id = shoal.client.submit(text)[0]["id"]
    shoal.wait_running(job_id)
    request = "GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n"

    def fetch() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli_argv(), "job", "port-forward", job_id, "--stdio", "http"],
            input=request, capture_output=True, text=True, env=cli_env(shoal), timeout=60,
            check=False,
        )  # fmt: skip

    tries: list[subprocess.CompletedProcess[str]] = []

    def served() -> bool:
        tries.append(fetch())
        return "pod page" in tries[-1].stdout

    try:  # the kubelet's port-forward and httpd's start, on a busy 2-core machine
        wait_for(served, 60, "the Pod's page through the tunnel")
    except TimeoutError as exc:
        last = tries[-1] if tries else None
        said = f"{last.returncode}: {last.stdout!r} {last.stderr!r}" if last else "no try ended"
        raise AssertionError(f"{exc}; {len(tries)} tries, the last exited {said}") from None
    token = (shoal.home / "admin.token").read_text().strip()
    proxy = shoal.client.cluster()["proxyPort"]
    page = httpx.get(
        f"http://127.0.0.1:{proxy}/proxy/{job_id}/w/0/http/index.html",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert page.status_code == 200 and page.text == "pod page\n", page.text
    refused = subprocess.run(
        [*cli_argv(), "job", "port-forward", job_id, "--stdio", "1"],
        input="", capture_output=True, text=True, env=cli_env(shoal), timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 1 and "not one of task w/0's ports" in refused.stderr
    shoal.client.stop(job_id)
    shoal.wait_job(job_id, ("STOPPED",), timeout=60)


def test_pod_network_host_lists_carry_dns_names_that_reach_the_peers(
    plane: ControlPlane, node: RealNode, shoal: KubeShoal, tmp_path: Path
) -> None:
    """A second shoal (its own instance label) in the pod-network mode: each job gets a headless
    Service, each task a DNS name in it, and the host lists carry those names (CoreDNS)."""
    extra = ("--image-pull-policy", "Never", "--default-image", BUSYBOX, "--network", "pod")
    with running_shoal(plane, tmp_path / "home", *extra, instance="shoal-pod") as pod_shoal:
        wait_for(lambda: pod_shoal.node(NODE_NAME)["state"] == "READY", 30, "the node")
        job_id = pod_shoal.client.submit(PING_PONG)[0]["id"]

        def service() -> object:
            return pod_shoal.core.read_namespaced_service(f"shoal-shoal-pod-job-{job_id}", "shoal")

        headless = wait_for(service, 60, "the job's headless Service")  # made at its launch
        assert headless.spec.cluster_ip == "None" and headless.spec.publish_not_ready_addresses
        done = pod_shoal.wait_job(job_id, ("SUCCEEDED", "FAILED", "STOPPED"), timeout=120)
        logs = {
            role: pod_shoal.client.logs(job_id, role, 0)["data"] for role in ("server", "client")
        }
        assert done["state"] == "SUCCEEDED", (done, logs)
        assert logs == {"server": "served\n", "client": "pong from 0\n"}
        server = next(t for t in done["tasks"] if t["role"] == "server")
        assert server["address"] == f"server-0.shoal-shoal-pod-job-{job_id}.shoal.svc.cluster.local"
        # the Service goes with the job's owner once its last Pod is deleted
        wait_for(lambda: not pod_shoal.own_pods(), 30, "the job's Pods deleted")


READER = """import hashlib, os
data = os.environ["SHOAL_DATA_DIR"]
print(open(os.path.join(data, "corpus", "a.txt")).read().strip())
print(hashlib.sha256(open(os.path.join(data, "weights"), "rb").read()).hexdigest())
print(open("helper.txt").read().strip(), flush=True)
"""
CODE_JOB = f"""version: 1
name: code-and-data
code_dir: project
data: [corpus, weights]
roles:
  w:
    image: {PYTHON}
    resources: {{cpu: 0.5, memory: 64Mi}}
    command: python3 read.py && sleep 6
"""


def test_code_and_data_reach_the_pod_through_its_init_container(
    shoal: KubeShoal, tmp_path: Path
) -> None:
    """A job with a code directory and two data sets (a directory, a file): an init container
    fetches them from the server with the attempt's credential, from the attempt's Secret; the
    credential opens only its own attempt's files, and only while it runs."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "read.py").write_text(READER)
    (project / "helper.txt").write_text("code unpacked")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("corpus text\n")
    weights = tmp_path / "weights.bin"
    weights.write_bytes(os.urandom(300_000))
    for local, name in ((tree, "corpus"), (weights, "weights")):
        pushed = cli(shoal, "data", "push", str(local), name)
        assert pushed.returncode == 0, pushed.stderr
    (tmp_path / "job.yaml").write_text(CODE_JOB)
    submitted = cli(shoal, "job", "submit", str(tmp_path / "job.yaml"), "-o", "json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = str(yaml.safe_load(submitted.stdout)["id"])

    def running_pod() -> object | None:
        found = [p for p in shoal.pods_of(job_id) if p.status.phase == "Running"]
        return found[0] if found else None

    pod = wait_for(running_pod, 90, "the job's Pod running", 0.2)
    attempt = pod.metadata.labels["shoal.dev/attempt-id"]  # type: ignore[attr-defined]
    name = pod.metadata.name  # type: ignore[attr-defined]
    stored = shoal.core.read_namespaced_secret(name, "shoal")
    token = base64.b64decode(stored.data["fetch-token"]).decode()
    assert token not in str(pod.to_dict())  # type: ignore[attr-defined]
    url = f"{shoal.client.url}/api/v1/attempts/{attempt}/code"
    assert httpx.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 200
    forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    assert httpx.get(url, headers={"Authorization": f"Bearer {forged}"}).status_code == 401
    other = url.replace(f"/{attempt}/", "/999999.1/")
    assert httpx.get(other, headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert httpx.get(url).status_code == 401
    done = shoal.wait_job(job_id, ("SUCCEEDED", "FAILED", "STOPPED"), timeout=90)
    logs = shoal.client.logs(job_id, "w", 0)["data"]
    assert done["state"] == "SUCCEEDED", (done, logs)
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert logs == f"corpus text\n{digest}\ncode unpacked\n"
    gone = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
    assert gone.status_code == 404, gone.text  # the attempt has ended: so has its credential


PEER_CHECK = (
    "import os, socket, time\n"
    "hosts = [line.split()[0] for line in open(os.environ['SHOAL_HOSTFILE']) if line.strip()]\n"
    "for host in hosts:  # once each, no retry: the barrier let this start, so all answer\n"
    "    socket.create_connection((host, 19999), timeout=5).close()\n"
    "print(f'reached {len(hosts)} peers', flush=True)\n"
    "time.sleep(4)\n"
)
BARRIER_JOB = f"""version: 1
name: barrier
roles:
  peer:
    instances: 2
    image: {PYTHON}
    resources: {{cpu: 0.5, memory: 64Mi}}
    command: |
      python3 - <<'EOF'
{indented(PEER_CHECK, 6)}      EOF
"""
NO_PYTHON_JOB = """version: 1
name: no-python
{env}roles:
  w:
    instances: 2
    resources: {{cpu: 0.25, memory: 32Mi}}
    command: echo ran
"""


def _started(pod: object, name: str, init: bool = False) -> float:
    status = pod.status  # type: ignore[attr-defined]
    found = status.init_container_statuses if init else status.container_statuses
    state = next(c.state for c in found if c.name == name)
    return float(state.running.started_at.timestamp())


def test_the_start_barrier_holds_each_task_until_every_peer_answers(
    plane: ControlPlane, node: RealNode, shoal: KubeShoal, tmp_path: Path
) -> None:
    """--start-barrier (pod network): each Pod gets a sidecar on port 19999 whose startup probe
    holds the task back until every peer's sidecar answers; a job turns it off with
    SHOAL_START_BARRIER=0; an image without python3 fails the task with the reason."""
    extra = ("--image-pull-policy", "Never", "--default-image", BUSYBOX, "--network", "pod")
    extra += ("--start-barrier",)
    with running_shoal(plane, tmp_path / "home", *extra, instance="shoal-bar") as bar:
        wait_for(lambda: bar.node(NODE_NAME)["state"] == "READY", 30, "the node")
        job_id = bar.client.submit(BARRIER_JOB)[0]["id"]

        def both_running() -> list[object] | None:
            pods = bar.pods_of(job_id)
            running = [p for p in pods if p.status.phase == "Running"]
            return running if len(running) == 2 else None

        pods = wait_for(both_running, 90, "both Pods of the barrier job running", 0.2)
        sidecars = [_started(p, "shoal-barrier", init=True) for p in pods]
        tasks = [_started(p, "task") for p in pods]
        assert min(tasks) >= max(sidecars) - 1.0, (sidecars, tasks)  # kubelet's 1 s stamps
        done = bar.wait_job(job_id, ("SUCCEEDED", "FAILED", "STOPPED"), timeout=90)
        logs = [bar.client.logs(job_id, "peer", i)["data"] for i in (0, 1)]
        assert done["state"] == "SUCCEEDED", (done, logs)
        assert logs == ["reached 2 peers\n"] * 2  # the sidecar's own lines are not the task's

        off = bar.client.submit(NO_PYTHON_JOB.format(env="env: {SHOAL_START_BARRIER: '0'}\n"))
        done = bar.wait_job(off[0]["id"], ("SUCCEEDED", "FAILED", "STOPPED"), timeout=90)
        assert done["state"] == "SUCCEEDED", done

        failing = bar.client.submit(NO_PYTHON_JOB.format(env=""))[0]["id"]
        done = bar.wait_job(failing, ("SUCCEEDED", "FAILED", "STOPPED"), timeout=120)
        assert done["state"] == "FAILED", done
        said = str(done)
        assert "start barrier" in said and "python3" in said, said
        wait_for(lambda: not bar.own_pods(), 30, "the jobs' Pods deleted")


@pytest.mark.long  # `make test-long` (the default run has this feature's other tests)
def test_the_deployment_manifest_runs_the_server_in_a_pod_on_the_node(
    plane: ControlPlane, node: RealNode, tmp_path: Path
) -> None:
    """deploy/kubernetes/server applied as it is, with a test overlay: the image built here (no
    registry), host network and the API server's address (the test cluster has no kube-proxy
    for the `kubernetes` Service), a free port, a hostPath volume for the store."""
    node.import_image(shoal_image.build(tmp_path / "image"))
    plane.start_scheduler()  # the Deployment's Pod is placed by kube-scheduler, not by shoal
    tree = tmp_path / "deploy"
    shutil.copytree(REPO / "deploy", tree)
    port = free_port()
    volume = tmp_path / "volume"
    volume.mkdir()
    plane.core().create_persistent_volume(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "shoal-test-home"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": str(volume)},
                "persistentVolumeReclaimPolicy": "Retain",
            },
        }
    )
    overlay = tree / "overlay"
    overlay.mkdir()
    patch = [
        {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
        {"op": "add", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "Never"},
        {"op": "replace", "path": "/spec/template/spec/containers/0/resources", "value": {}},
        *(
            {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": v}
            for v in (
                {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(plane.api_port)},
            )
        ),
        {
            "op": "replace",
            "path": "/spec/template/spec/containers/0/env/2/value",
            "value": str(port),
        },
        {
            "op": "replace",
            "path": "/spec/template/spec/containers/0/ports/0/containerPort",
            "value": port,
        },
    ]
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["../kubernetes/server"],
                "images": [
                    {
                        "name": "shoal",
                        "newName": shoal_image.IMAGE.rsplit(":", 1)[0],
                        "newTag": "test",
                    }
                ],
                "patches": [
                    {
                        "target": {"kind": "Deployment", "name": "shoal"},
                        "patch": yaml.safe_dump(patch),
                    }
                ],
            }
        )
    )
    try:
        plane.kubectl("apply", "-k", str(overlay))
        plane.kubectl("-n", "shoal", "rollout", "status", "deployment/shoal", "--timeout=120s")
        jsonpath = "jsonpath={.items[0].metadata.name} {.items[0].spec.nodeName}"
        selector = "app.kubernetes.io/name=shoal"
        pod = plane.kubectl("-n", "shoal", "get", "pods", "-l", selector, "-o", jsonpath)
        name, where = pod.split()
        assert where == NODE_NAME
        ca = tmp_path / "ca.crt"
        ca.write_text(
            plane.kubectl(
                "-n", "shoal", "exec", name, "--", "cat", "/var/lib/shoal/home/pki/ca.crt"
            )
        )
        answer = httpx.get(
            f"https://127.0.0.1:{port}/api/v1/health",
            verify=ssl.create_default_context(cafile=str(ca)),
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        # its Kubernetes agent, in-cluster under the ServiceAccount, reports the node
        token = plane.kubectl(
            "-n", "shoal", "exec", name, "--", "cat", "/var/lib/shoal/home/admin.token"
        )
        inside = ShoalClient(f"https://127.0.0.1:{port}", token.strip(), ca=str(ca))
        wait_for(
            lambda: [n["name"] for n in inside.nodes()] == [NODE_NAME], 60, "the node, in-cluster"
        )
    finally:
        # the server's objects only: the RBAC (its ServiceAccount) stays for the module's shoal
        gone = ("deployment/shoal", "service/shoal", "persistentvolumeclaim/shoal-home")
        plane.kubectl("-n", "shoal", "delete", *gone, "--wait=true", "--timeout=60s")
        plane.core().delete_persistent_volume("shoal-test-home")
        plane.processes.pop("kube-scheduler").stop()


OUT_OF_SERVICE = {
    "key": "node.kubernetes.io/out-of-service",
    "value": "nodeshutdown",
    "effect": "NoExecute",
}


@pytest.mark.long  # `make test-long` (the default run has this feature's other tests)
def test_a_stopped_kubelet_starts_no_second_attempt_until_the_pod_is_confirmed_gone(
    shoal: KubeShoal, node: RealNode
) -> None:
    """Last in this module: it stops the node's kubelet. A Pod on a node that stopped answering
    may still run (kubernetes#54368): shoal keeps its task until the Pod is gone, here through
    the out-of-service taint an administrator sets once the machine is known to be off."""
    text = "version: 1\nname: steady\nretries: 1\nroles:\n  w:\n    command: sleep 600\n"
    job_id = shoal.client.submit(text)[0]["id"]
    shoal.wait_running(job_id)
    (first,) = shoal.pods_of(job_id)
    node.stop_kubelet()
    try:
        wait_for(lambda: shoal.node(NODE_NAME)["state"] == "NOT_READY", 90, "NOT_READY", 0.5)
        time.sleep(10)  # a while longer: nothing may start a second attempt meanwhile
        job = shoal.client.job(job_id)
        assert (job["attempt"], job["tasks"][0]["attempt"], job["tasks"][0]["state"]) == (
            1,
            1,
            "RUNNING",
        ), job
        assert [p.metadata.name for p in shoal.pods_of(job_id)] == [first.metadata.name]
        shoal.core.patch_node(NODE_NAME, {"spec": {"taints": [OUT_OF_SERVICE]}})

        # Kubernetes force-deletes the Pod (pod GC, every 20 s); then the task is lost ...
        def requeued() -> bool:
            return shoal.client.job(job_id)["state"] == "WAITING"

        wait_for(requeued, 90, "the job requeued after its lost task", 0.5)
        assert not shoal.pods_of(job_id), "no new Pod while the node is out of service"
    finally:
        shoal.core.patch_node(NODE_NAME, {"spec": {"taints": None}})
        node.start_kubelet()
    # ... and runs again once the node is back
    shoal.wait_running(job_id, timeout=90)
    (second,) = shoal.pods_of(job_id)
    assert second.metadata.name != first.metadata.name
    exited = [e["message"] for e in shoal.client.events(job_id) if e["kind"] == "exited"]
    assert "PLATFORM_FAILURE" in exited[0] and "lost: " in exited[0], exited
    shoal.client.stop(job_id)
    shoal.wait_job(job_id, ("STOPPED",), timeout=60)
