"""Kueue v0.17.0 beside the benchmark's control plane (bench/kubernetes.py), run as a process on
loopback rather than as a Deployment.

``scripts/k8s-build.sh --kueue`` builds the ``kueue`` binary into the harness's folder and links
its module's ``config/`` there as ``kueue-config``. From it this module applies:

- the CRDs (``components/crd/bases``, server-side: they are too large for a client-side apply);
- the webhooks of ``components/webhook/manifests.yaml`` that the ``batch/job`` integration and
  Kueue's own kinds serve, each pointed at ``https://127.0.0.1:PORT/PATH`` (a ``url:``, as the
  API server cannot reach a Service here: no kube-proxy) and trusting a certificate made for
  127.0.0.1 with openssl. Kueue's internal certificate management is off: it would sign for the
  Service's DNS name, which the API server cannot verify against 127.0.0.1.

With internal certificate management off, Kueue 0.17 reads its metrics server's certificate
from a fixed path, ``/etc/kueue/metrics/certs``. Rather than write into the machine's /etc, Kueue
runs in a mount namespace of its own where an overlay adds that folder (from the temporary
directory) over /etc; nothing outside the process sees it. Kueue runs as its own user (a token in
``system:masters``, so the RBAC of ``components/rbac`` is not needed): its API requests are
counted apart in the audit log.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.kubernetes.harness import BIN, CACHE, K8S_VERSION, Process, free_port  # noqa: E402

KUEUE_VERSION = "v0.17.0"
KUEUE = BIN / "kueue"
CONFIG = BIN / "kueue-config"
GROUP = "kueue.x-k8s.io"
API = f"/apis/{GROUP}/v1beta2"
NAMESPACE = "kueue-system"
MUTATING = "kueue-mutating-webhook-configuration"
VALIDATING = "kueue-validating-webhook-configuration"


APISERVER_PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
STAMPED = CACHE / f"bench-bin-{K8S_VERSION}" / "kube-apiserver"


def stamped_apiserver() -> tuple[Path | None, str | None]:
    """kube-apiserver built as scripts/k8s-build.sh builds it, but saying its version.

    The harness's binaries are built without the version stamp (``-X
    k8s.io/component-base/version.gitVersion=...``), so their ``/version`` answers
    ``v0.0.0-master+$Format:%H$``, and Kueue 0.17 stops at start: "Unable to setup server
    version fetcher ... could not parse pre-release/metadata". The same source relinked with
    the stamp (the Go build cache has every package: about 20 s, offline) is kept beside the
    harness's folder. Returns (its path, None) or (None, why not).
    """
    if STAMPED.is_file():
        return STAMPED, None
    source = CACHE / "src" / f"kubernetes-{K8S_VERSION}"
    if shutil.which("go") is None or not (source / "go.mod").is_file():
        return None, f"no Go, or no {source}/go.mod (run `make k8s`) to relink kube-apiserver"
    major, minor = K8S_VERSION.lstrip("v").split(".")[:2]
    stamp = "k8s.io/component-base/version"
    flags = (
        f"-s -w -X {stamp}.gitVersion={K8S_VERSION} -X {stamp}.gitMajor={major} "
        f"-X {stamp}.gitMinor={minor} -X {stamp}.gitTreeState=clean"
    )
    env = {
        **os.environ,
        "GOMODCACHE": str(CACHE / "gomod"),
        "GOCACHE": str(CACHE / "gocache"),
        "GOFLAGS": "-modcacherw",
        "CGO_ENABLED": "0",
        "GOTOOLCHAIN": "local",
        "GOPROXY": "off",  # everything is in the module cache already
    }
    STAMPED.parent.mkdir(parents=True, exist_ok=True)
    partial = STAMPED.with_suffix(".tmp")
    done = subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", flags, "-o", str(partial), APISERVER_PACKAGE],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        return None, f"relinking kube-apiserver with its version failed: {done.stderr[-1500:]}"
    partial.rename(STAMPED)
    return STAMPED, None


def missing() -> str | None:
    """Why Kueue cannot run here (None: it can)."""
    if not KUEUE.is_file():
        return f"kueue is not built in {BIN}: run `scripts/k8s-build.sh --kueue`"
    if not (CONFIG / "components" / "crd" / "bases").is_dir():
        return f"{CONFIG}/components/crd/bases is missing: run `scripts/k8s-build.sh --kueue`"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not on the PATH"
    return None


def serving_certificate(folder: Path) -> bytes:
    """A self-signed certificate for 127.0.0.1 as ``tls.crt``/``tls.key`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(folder / "tls.key"),
            "-out",
            str(folder / "tls.crt"),
        ],
        check=True,
        capture_output=True,
    )
    return (folder / "tls.crt").read_bytes()


def _served(webhook: dict[str, Any]) -> bool:
    """A webhook of Kueue's own kinds or of batch Jobs (the only integration turned on)."""
    for rule in webhook.get("rules", ()):
        groups, resources = rule.get("apiGroups", ()), rule.get("resources", ())
        if GROUP in groups or ("batch" in groups and "jobs" in resources):
            return True
    return False


def webhook_configurations(port: int, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, reduced to what it serves here, called by URL."""
    manifests = CONFIG / "components" / "webhook" / "manifests.yaml"
    bundle = base64.b64encode(ca).decode()
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc:
            continue
        name = MUTATING if doc["kind"] == "MutatingWebhookConfiguration" else VALIDATING
        hooks = []
        for hook in doc["webhooks"]:
            if not _served(hook):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            hook["namespaceSelector"] = {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system", NAMESPACE],
                    }
                ]
            }
            hooks.append(hook)
        doc["metadata"] = {"name": name}
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def configuration(
    health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path, qps: int
) -> dict[str, Any]:
    """Kueue's Configuration: the shipped one (controller_manager_config.yaml) with the ports on
    127.0.0.1, no leader election, no internal certificates, only ``batch/job``."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "Cohort.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": qps, "burst": qps * 2},
        "integrations": {"frameworks": ["batch/job"]},
    }


class Kueue:
    """Kueue's CRDs, webhooks and manager process; ``kubectl(*args)`` is the plane's."""

    def __init__(self, root: Path, kubeconfig: Path, kubectl: Any, qps: int) -> None:
        self.root = root
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl
        self.qps = qps
        self.health_port = free_port()
        self.webhook_port = free_port()
        self.metrics_port = free_port()
        self.process: Process | None = None
        self.installed = False

    def install(self) -> None:
        """CRDs (waited for until established), the namespace, the webhook configurations."""
        bases = CONFIG / "components" / "crd" / "bases"
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(bases))
        self.installed = True
        self.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "-f", str(bases), "-o", "name"
        )
        self.kubectl("create", "namespace", NAMESPACE)
        ca = serving_certificate(self.root / "certs")
        hooks = webhook_configurations(self.webhook_port, ca)
        self.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(hooks))

    def start(self, timeout_s: float = 90.0) -> None:
        certs = self.root / "certs"
        upper = self.root / "etc-upper"
        (upper / "kueue" / "metrics").mkdir(parents=True, exist_ok=True)
        shutil.copytree(certs, upper / "kueue" / "metrics" / "certs", dirs_exist_ok=True)
        (self.root / "etc-work").mkdir(exist_ok=True)
        config = configuration(
            self.health_port, self.metrics_port, self.webhook_port, certs, self.qps
        )
        config_file = self.root / "kueue-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        overlay = f"lowerdir=/etc,upperdir={upper},workdir={self.root / 'etc-work'}"
        script = 'mount -t overlay overlay -o "$1" /etc && shift && exec "$@"'
        self.process = Process(
            "kueue",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "/bin/sh",
                "-c",
                script,
                "sh",
                overlay,
                str(KUEUE),
                f"--config={config_file}",
                f"--kubeconfig={self.kubeconfig}",
                "--feature-gates=VisibilityOnDemand=false",
                "--zap-log-level=info",
            ],
            self.root / "kueue.log",
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise RuntimeError(f"kueue exited: {self.process.tail(2500)}")
            with contextlib.suppress(httpx.HTTPError):
                answer = httpx.get(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2)
                if answer.status_code == 200:
                    return
            time.sleep(0.25)
        raise RuntimeError(f"kueue not ready within {timeout_s:.0f}s: {self.process.tail(2500)}")

    def pid(self) -> int | None:
        """The kueue process's PID (unshare and sh exec into it, so it is the child's)."""
        return self.process.proc.pid if self.process is not None else None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def uninstall(self) -> None:
        """The webhook configurations: without Kueue they would refuse every Job."""
        if not self.installed:
            return
        for kind, name in (
            ("mutatingwebhookconfiguration", MUTATING),
            ("validatingwebhookconfiguration", VALIDATING),
        ):
            with contextlib.suppress(Exception):
                self.kubectl("delete", kind, name, "--ignore-not-found")


def queue_objects(namespace: str, nodes: int, gpus: int, cpu: int, memory_gi: int) -> list[dict]:
    """A ResourceFlavor, a ClusterQueue whose quota is the whole cluster (held: nothing is
    admitted until ``release`` patches its stopPolicy), and the LocalQueue the Jobs name."""
    return [
        {
            "apiVersion": f"{GROUP}/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "default"},
        },
        {
            "apiVersion": f"{GROUP}/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "bench"},
            "spec": {
                "namespaceSelector": {},
                "stopPolicy": "Hold",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": str(nodes * cpu)},
                                    {"name": "memory", "nominalQuota": f"{nodes * memory_gi}Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(nodes * gpus)},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": f"{GROUP}/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "bench", "namespace": namespace},
            "spec": {"clusterQueue": "bench"},
        },
    ]
