"""A real Kubernetes for the tests, on loopback (docs/kubernetes.md, "The test cluster").

``ControlPlane``: etcd, kube-apiserver and kube-controller-manager (its garbage collector is what
owner references need), built by scripts/k8s-build.sh, every port chosen free, state in a
temporary directory. ``Kwok``: fake nodes and Pods on it. ``RealNode`` (real_node.py): a kubelet
with its own containerd, on 198.18.x. Each process runs in a process group of its own and is
ended by its PID; nothing outlives the fixture that started it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from kubernetes import client, config

K8S_VERSION = os.environ.get("SHOAL_K8S_VERSION", "v1.35.4")
CACHE = Path(os.environ.get("SHOAL_K8S_CACHE", Path.home() / ".cache/shoal/k8s"))
BIN = CACHE / f"bin-{K8S_VERSION}"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok", "kubectl")
SERVICE_RANGE = "198.18.128.0/20"  # never 10.x / 172.16-31.x / 192.168.x


def missing() -> str | None:
    """Why the cluster cannot start here (None: it can)."""
    absent = [name for name in BINARIES if not (BIN / name).is_file()]
    if absent:
        return f"{', '.join(absent)} not built in {BIN}: run `make k8s` (needs Go)"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Process:
    """A child in its own process group, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.name, self.log = name, log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def tail(self, size: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""


def wait_for(check: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # not yet
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"{what} within {timeout:.0f}s" + (f" (last: {last})" if last else ""))


def kubeconfig(server: str, token: str, ca: Path, namespace: str = "default") -> dict[str, Any]:
    """``ca``: the API server's self-signed certificate (it writes it at its first start)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [
            {"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}
        ],
        "current-context": "test",
    }


class ControlPlane:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.admin_token = secrets.token_hex(16)
        self.node_token = secrets.token_hex(16)
        self.etcd_port, self.peer_port = free_port(), free_port()
        self.api_port = free_port()
        self.url = f"https://127.0.0.1:{self.api_port}"
        self.processes: dict[str, Process] = {}
        self.admin_kubeconfig = root / "admin.kubeconfig"
        self.kubelet_kubeconfig = root / "kubelet.kubeconfig"
        self.ca = root / "apiserver-certs" / "apiserver.crt"

    # ---- start ----

    def start(self) -> ControlPlane:
        self._keys()
        self._write_kubeconfigs()
        self.start_etcd()
        self.start_apiserver()
        self._start_controller_manager()
        wait_for(self._default_account, 60, "the default ServiceAccount")
        return self

    def _keys(self) -> None:
        key = self.root / "sa.key"
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(self.root / "sa.pub")],
            check=True,
            capture_output=True,
        )
        (self.root / "tokens.csv").write_text(
            f'{self.admin_token},admin,admin,"system:masters"\n'
            f'{self.node_token},system:node:shoal-real-node,kubelet,"system:nodes"\n'
        )

    def _write_kubeconfigs(self) -> None:
        for path, token in (
            (self.admin_kubeconfig, self.admin_token),
            (self.kubelet_kubeconfig, self.node_token),
        ):
            path.write_text(yaml.safe_dump(kubeconfig(self.url, token, self.ca)))

    def start_etcd(self) -> None:
        data = self.root / "etcd"
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.processes["etcd"] = Process(
            "etcd",
            [
                str(BIN / "etcd"),
                "--data-dir",
                str(data),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"default={peer}",
                "--log-level",
                "warn",
            ],
            self.root / "etcd.log",
        )

    def start_apiserver(self) -> None:
        self.processes["kube-apiserver"] = Process(
            "kube-apiserver",
            [
                str(BIN / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.root / 'apiserver-certs'}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.root / 'sa.pub'}",
                f"--service-account-signing-key-file={self.root / 'sa.key'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--endpoint-reconciler-type=none",
                # every watch gets a bookmark at least this often, and a quick 410 on a compacted
                # version; the defaults are the tests' too
                "--v=1",
            ],
            self.root / "kube-apiserver.log",
        )
        wait_for(self.ready, 60, "kube-apiserver /readyz")

    def ready(self) -> bool:
        answer = httpx.get(
            f"{self.url}/readyz",
            verify=ssl.create_default_context(cafile=str(self.ca)),
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=2,
        )
        return answer.status_code == 200

    def _start_controller_manager(self) -> None:
        self.processes["kube-controller-manager"] = Process(
            "kube-controller-manager",
            [
                str(BIN / "kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={self.root / 'sa.key'}",
                f"--root-ca-file={self.ca}",  # what Pods get as their ServiceAccount's ca.crt
                "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                # Node loss is seen after 40 s by default; the tests wait for it, so sooner.
                "--node-monitor-grace-period=16s",
            ],
            self.root / "kube-controller-manager.log",
        )

    def start_scheduler(self) -> None:
        """kube-scheduler, for what shoal does not place itself (the server's own Deployment)."""
        self.processes["kube-scheduler"] = Process(
            "kube-scheduler",
            [
                str(BIN / "kube-scheduler"),
                f"--kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
            self.root / "kube-scheduler.log",
        )

    def _default_account(self) -> bool:
        core = self.core()
        return bool(core.read_namespaced_service_account("default", "default"))

    # ---- use ----

    def api_client(self, kubeconfig_path: Path | None = None) -> Any:
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(kubeconfig_path or self.admin_kubeconfig),
            client_configuration=configuration,
        )
        return client.ApiClient(configuration)

    def core(self, kubeconfig_path: Path | None = None) -> Any:
        return client.CoreV1Api(self.api_client(kubeconfig_path))

    def kubectl(self, *args: str, input_text: str | None = None) -> str:
        done = subprocess.run(
            [str(BIN / "kubectl"), f"--kubeconfig={self.admin_kubeconfig}", *args],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def service_account_kubeconfig(self, namespace: str, account: str) -> Path:
        """A kubeconfig with a token of ``account`` (what shoal runs as in the tests)."""
        core = self.core()
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=24 * 3600)
        )
        answer = core.create_namespaced_service_account_token(account, namespace, request)
        path = self.root / f"{namespace}-{account}.kubeconfig"
        config = kubeconfig(self.url, answer.status.token, self.ca, namespace)
        path.write_text(yaml.safe_dump(config))
        return path

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes[name].stop()

    def restart_apiserver(self) -> None:
        self.processes["kube-apiserver"].stop()
        self.start_apiserver()


class Kwok:
    """kwok managing the Nodes annotated ``kwok.x-k8s.io/node=fake`` and their Pods."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.process: Process | None = None

    def start(self) -> Kwok:
        self.process = Process(
            "kwok",
            [
                str(BIN / "kwok"),
                f"--kubeconfig={self.plane.admin_kubeconfig}",
                f"--config={BIN / 'kwok-stages.yaml'}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
            self.plane.root / "kwok.log",
        )
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def fake_node(
    name: str,
    cpu: str = "32",
    memory: str = "256Gi",
    gpus: int = 8,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def decode(secret: Any, key: str) -> str:
    return base64.b64decode(secret.data[key]).decode()
