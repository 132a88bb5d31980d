"""shoal on Kubernetes against kube-scheduler and Kueue: one cluster, the same gang jobs.

Not a test: it prints a table, writes bench/results/kubernetes.json and rewrites the part of
docs/benchmarks.md between ``<!-- kubernetes:begin -->`` and ``<!-- kubernetes:end -->``.

    .venv/bin/python bench/kubernetes.py [--small] [--only shoal,kube-scheduler,kueue]

Needs the test cluster's binaries (``make k8s``) and Kueue's (``scripts/k8s-build.sh --kueue``).

**The cluster** (one for the whole run): etcd, kube-apiserver and kube-controller-manager from
tests/kubernetes/harness.py, and kwok with 1,000 fake nodes of 8 GPUs (``nvidia.com/gpu: 8``, 32
cores, 256 GiB). Changed from the harness, equally for every system:

- every component has its own token (all in ``system:masters``), and the API server writes an
  audit log (metadata only, node leases left out), so each component's requests are counted;
- kube-controller-manager, kube-scheduler and Kueue run without client-side rate limits (QPS
  5,000, as kwokctl's ``--disable-qps-limits``; their defaults are 20, 50 and 50/s). shoal's
  Kubernetes agent has none, and a limit would measure the setting, not the system;
- kwok renews node leases every 60 s (lease 240 s, node monitor grace 300 s) instead of every
  10 s, so 1,000 nodes' heartbeats do not take a core of the two, plays Pod stages with 16
  workers rather than 4 and logs only warnings;
- every Pod kwok runs succeeds ``--pod-seconds`` (30) after it started (kwok's ``pod-complete``
  stage, with a delay and for every Pod, not only Jobs'): a job's tasks run 30 s and end, so
  the queue drains in waves.

**The load**: 2,000 gang jobs (seed 7): 2, 4 or 8 Pods (30/40/30 %) of 1, 2, 4 or 8 GPUs each
(10/15/25/50 %), 2 cores and 16 GiB per GPU: 9,112 Pods asking for 49,378 GPUs, 6.2x the
cluster's, so jobs queue. One role (shoal) / one Indexed Job with parallelism = completions
(Kubernetes).

**Each system in turn** (its own namespace; the order of the table), the queue filled first and
then opened at once:

- **shoal**: server and ``shoal kubernetes agent`` (``--no-logs``) on the cluster. With every node
  cordoned in shoal, the jobs go to a virtual cluster guaranteed every GPU; the guarantee is
  then set to 0 (the waiting jobs are out of its reach, marked infeasible but kept) and the
  nodes uncordoned; the opening sets the guarantee to every GPU again, one request. shoal places
  each gang whole and creates its Pods bound to nodes. (Submitting to a virtual cluster with no
  guarantee, the hold of earlier runs, is refused now: such jobs could never run there.)
- **kube-scheduler** alone: the Jobs are created unsuspended before kube-scheduler starts, and
  their Pods (created by the Job controller) wait; starting it opens the queue. Its
  ``NodeResourcesFit`` scores ``MostAllocated`` on ``nvidia.com/gpu`` (packing, as GPU clusters
  configure it; the default spreads). No gang semantics: a job may be placed in part.
- **Kueue** v0.17.0 + kube-scheduler: the Jobs are created suspended with a queue name; a
  ClusterQueue whose quota is the whole cluster starts with ``stopPolicy: Hold`` and is opened
  once all 2,000 Workloads exist. Kueue admits by quota (no topology), unsuspends the Job, the
  Job controller creates the Pods and kube-scheduler binds them.

Each system then runs for ``--window`` seconds (120) from the opening, and 20 s more in which
the jobs admitted in the window may finish binding (so their latencies are not cut off). Measured,
from a watch of the namespace's Pods (and Kueue's Workloads) in this process, at the moment each
event arrives:

- **admitted**: shoal's ``launchedAt`` (the scheduler's placement, server clock), Kueue's
  ``Admitted`` condition seen, and for kube-scheduler alone (no admission) the first of the
  job's Pods seen bound;
- **bound**: every Pod of the job seen with ``spec.nodeName``; **running**: seen Running;
- admission → bound (the headline: what the systems do) and → running (kwok's part added),
  p50/p99, over the jobs admitted in the window (a job not yet whole 20 s after the window
  counts with the time it had: a lower bound, flagged ≥);
- admitted jobs/s: the first wave (admissions before the first Pod ends, over the time from
  the opening to the last of them) and over the whole window;
- partial placement: jobs with some but not all Pods bound, at the peak and in total, and the
  GPUs their bound Pods hold (idle, in a real gang job);
- API requests per Pod bound: from the audit log, the requests of the system's own components
  (shoal's agent; kube-scheduler, the controller manager, Kueue) from the start of its
  submissions to the end of its window, divided by the Pods bound in the window;
- CPU seconds (over the window) and peak RSS (VmHWM) of shoal's server, its scheduler process
  and its agent, and of kube-scheduler and Kueue; the shared components' CPU over the window.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# This file is named kubernetes.py: with its folder first on the path, `import kubernetes` (the
# official client, which the harness uses) would find it instead. The folder goes last.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))  # tests.kubernetes.harness: the control plane the tests use
sys.path.append(str(HERE))  # launch.py and kubernetes_kueue.py, beside this script

from tests.kubernetes.harness import (  # noqa: E402
    BIN,
    ControlPlane,
    Process,
    fake_node,
    free_port,
    kubeconfig,
    missing,
    wait_for,
)

import kubernetes_kueue  # noqa: E402  bench/kubernetes_kueue.py, beside this script
from launch import machine, percentile, replace_region  # noqa: E402
from shoal.client import ShoalClient  # noqa: E402
from shoal.local.supervisor import UpOptions, start_local, stop_local  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results" / "kubernetes.json"
BEGIN, END = "<!-- kubernetes:begin -->", "<!-- kubernetes:end -->"
SYSTEMS = ("shoal", "kueue", "kube-scheduler")  # the order they run in
NAMESPACES = {"shoal": "bench-shoal", "kube-scheduler": "bench-k8s", "kueue": "bench-kueue"}
# Each component's user in the audit log (tokens in tokens.csv, all in system:masters).
USERS = ("driver", "watcher", "shoal-agent", "kube-scheduler", "kcm", "kwok", "kueue")
MANAGERS = {  # whose requests are the system's own
    "shoal": ("shoal-agent", "kcm"),
    "kube-scheduler": ("kube-scheduler", "kcm"),
    "kueue": ("kueue", "kube-scheduler", "kcm"),
}
UNLIMITED_QPS = 5000  # kwokctl's --disable-qps-limits value
GPUS, CPUS, MEMORY_GI = 8, 32, 256  # per node
PODS_MIX = ((2, 30), (4, 40), (8, 30))  # (Pods per gang, weight %)
GPUS_MIX = ((1, 10), (2, 15), (4, 25), (8, 50))  # (GPUs per Pod, weight %)
IMAGE = "registry.k8s.io/pause:3.10"  # kwok pulls nothing; a name a real cluster would have
SHOAL_JOB = """\
version: 1
name: {name}
roles:
  w:
    instances: {pods}
    resources: {{cpu: {cpu}, memory: {memory}Gi, gpu: {gpus}}}
    command: sleep 3600
"""


@dataclass(frozen=True)
class Gang:
    name: str
    pods: int
    gpus: int  # per Pod

    @property
    def cpu(self) -> int:
        return 2 * self.gpus

    @property
    def memory_gi(self) -> int:
        return 16 * self.gpus


def workload(count: int, seed: int = 7) -> list[Gang]:
    rng = random.Random(seed)
    pods = rng.choices([p for p, _ in PODS_MIX], [w for _, w in PODS_MIX], k=count)
    gpus = rng.choices([g for g, _ in GPUS_MIX], [w for _, w in GPUS_MIX], k=count)
    return [Gang(f"g{i:04d}", p, g) for i, (p, g) in enumerate(zip(pods, gpus, strict=True))]


# ---- the cluster ----


class BenchPlane(ControlPlane):
    """The harness's control plane with a token per component, an audit log, and the
    controller manager without client-side rate limit and with a long node monitor grace."""

    def __init__(self, root: Path, apiserver: Path) -> None:
        super().__init__(root)
        self.apiserver = apiserver
        self.tokens = {user: secrets.token_hex(16) for user in USERS}
        self.audit_log = root / "audit.log"

    def _keys(self) -> None:
        super()._keys()
        with open(self.root / "tokens.csv", "a") as out:
            for user, token in self.tokens.items():
                out.write(f'{token},{user},{user},"system:masters"\n')

    def kubeconfig_for(self, user: str, namespace: str = "default") -> Path:
        path = self.root / f"{user}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig(self.url, self.tokens[user], self.ca, namespace)))
        return path

    def start_apiserver(self) -> None:
        policy = self.root / "audit-policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [
                        {"level": "None", "users": ["driver", "watcher", "admin"]},
                        {
                            "level": "None",
                            "resources": [
                                {"group": "coordination.k8s.io", "resources": ["leases"]}
                            ],
                        },
                        {"level": "Metadata"},
                    ],
                }
            )
        )
        self.processes["kube-apiserver"] = Process(
            "kube-apiserver",
            [
                str(self.apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.root / 'apiserver-certs'}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=198.18.128.0/20",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.root / 'sa.pub'}",
                f"--service-account-signing-key-file={self.root / 'sa.key'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--endpoint-reconciler-type=none",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",
                "--v=1",
            ],
            self.root / "kube-apiserver.log",
        )
        wait_for(self.ready, 60, "kube-apiserver /readyz")

    def _start_controller_manager(self) -> None:
        self.processes["kube-controller-manager"] = Process(
            "kube-controller-manager",
            [
                str(BIN / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig_for('kcm')}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={self.root / 'sa.key'}",
                "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--node-monitor-grace-period=300s",
                f"--kube-api-qps={UNLIMITED_QPS}",
                f"--kube-api-burst={UNLIMITED_QPS * 2}",
            ],
            self.root / "kube-controller-manager.log",
        )


def kwok_stages(pod_seconds: float) -> str:
    """The harness's stages, with ``pod-complete`` for every Pod, ``pod_seconds`` after start,
    and 16 workers playing Pod stages rather than 4 (so kwok starts bound Pods as fast as the
    systems bind them)."""
    docs = [d for d in yaml.safe_load_all((BIN / "kwok-stages.yaml").read_text()) if d]
    for doc in docs:
        if doc.get("kind") == "Stage" and doc["metadata"]["name"] == "pod-complete":
            spec = doc["spec"]
            spec["selector"]["matchExpressions"] = [
                e
                for e in spec["selector"]["matchExpressions"]
                if e["key"] != ".metadata.ownerReferences.[].kind"
            ]
            spec["delay"] = {"durationMilliseconds": int(pod_seconds * 1000)}
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {  # with a configuration kwok takes no defaults: all of them, as they are
            "cidr": "198.19.0.0/16",
            "manageAllNodes": False,
            "enableDebuggingHandlers": True,
            "enableContentionProfiling": False,
            "enableProfilingHandler": True,
            "podPlayStageParallelism": 16,
            "nodePlayStageParallelism": 4,
            "nodeLeaseParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enablePodsOnNodeSyncListPager": True,
            "enablePodsOnNodeSyncStreamWatch": False,
        },
    }
    return yaml.safe_dump_all([options, *[d for d in docs if d.get("kind") == "Stage"]])


def start_kwok(plane: BenchPlane, pod_seconds: float) -> Process:
    stages = plane.root / "kwok-stages.yaml"
    stages.write_text(kwok_stages(pod_seconds))
    return Process(
        "kwok",
        [
            str(BIN / "kwok"),
            f"--kubeconfig={plane.kubeconfig_for('kwok')}",
            f"--config={stages}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address=127.0.0.1:{free_port()}",
            "--node-lease-duration-seconds=240",
            "--cidr=198.19.0.0/16",  # the fake Pod IPs (never used for traffic)
            "--v=WARN",  # not a line per Pod patched
        ],
        plane.root / "kwok.log",
    )


class Kube:
    """A thin JSON client of the API server (the official client's models are too slow to
    parse thousands of Pods a second in the same process that times them)."""

    def __init__(self, plane: BenchPlane, user: str) -> None:
        self.http = httpx.Client(
            base_url=plane.url,
            headers={"Authorization": f"Bearer {plane.tokens[user]}"},
            verify=ssl.create_default_context(cafile=str(plane.ca)),
            timeout=60,
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
        )

    def get(self, path: str, **params: Any) -> Any:
        answer = self.http.get(path, params={k: v for k, v in params.items() if v is not None})
        answer.raise_for_status()
        return answer.json()

    def post(self, path: str, body: Any) -> Any:
        answer = self.http.post(path, json=body)
        answer.raise_for_status()
        return answer.json()

    def patch(self, path: str, body: Any) -> Any:
        headers = {"Content-Type": "application/merge-patch+json"}
        answer = self.http.patch(path, content=json.dumps(body), headers=headers)
        answer.raise_for_status()
        return answer.json()

    def delete(self, path: str, **params: Any) -> None:
        answer = self.http.delete(path, params=params)
        if answer.status_code != 404:
            answer.raise_for_status()

    def count(self, path: str, **params: Any) -> int:
        page = self.get(path, limit=1, **params)
        return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)

    def close(self) -> None:
        self.http.close()


def create_nodes(kube: Kube, count: int) -> None:
    def one(i: int) -> None:
        body = fake_node(f"kw-{i:04d}", cpu=str(CPUS), memory=f"{MEMORY_GI}Gi", gpus=GPUS)
        body["metadata"]["labels"]["nvidia.com/gpu.product"] = "H100"
        kube.post("/api/v1/nodes", body)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(count)))

    def ready() -> bool:
        nodes = kube.get("/api/v1/nodes")["items"]
        up = sum(
            1
            for n in nodes
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", ())
            )
        )
        return up == count

    wait_for(ready, 180, f"{count} kwok nodes Ready", interval=1.0)


# ---- watching ----


class Gone(Exception):
    """410: list again."""


class Watch(threading.Thread):
    """List then watch ``path``, calling ``handle(kind, obj, seen_at)`` as each event arrives."""

    def __init__(self, kube: Kube, path: str, handle: Callable[[str, Any, float], None]) -> None:
        super().__init__(name=f"watch {path}", daemon=True)
        self.kube, self.path, self.handle = kube, path, handle
        self.stopping = threading.Event()
        self.synced = threading.Event()
        self.errors = 0

    def run(self) -> None:
        version: str | None = None
        while not self.stopping.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
            except Gone:
                version = None
            except Exception:
                self.errors += 1
                self.stopping.wait(0.5)

    def _list(self) -> str:
        token = None
        while True:
            page = self.kube.get(self.path, limit=500, **{"continue": token})
            now = time.time()
            for item in page["items"]:
                self.handle("ADDED", item, now)
            token = page["metadata"].get("continue")
            if not token:
                self.synced.set()
                return str(page["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> str:
        params = {
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "8",
        }
        timeout = httpx.Timeout(30, read=40)
        with self.kube.http.stream("GET", self.path, params=params, timeout=timeout) as answer:
            if answer.status_code == 410:
                raise Gone()
            answer.raise_for_status()
            for line in answer.iter_lines():
                if not line:
                    continue
                now = time.time()
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(obj.get("message"))
                version = obj["metadata"].get("resourceVersion") or version
                if kind != "BOOKMARK":
                    self.handle(kind, obj, now)
                if self.stopping.is_set():
                    break
        return version

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(15)


class PodTracker:
    """When each Pod was first seen bound, running and ended, by job."""

    def __init__(self, job_of: Callable[[Any], str | None]) -> None:
        self.job_of = job_of
        self.lock = threading.Lock()
        self.job: dict[str, str] = {}
        self.gpus: dict[str, int] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.first_end: float | None = None

    def handle(self, kind: str, pod: Any, now: float) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        job = self.job_of(pod)
        if job is None:
            return
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        phase = status.get("phase")
        with self.lock:
            if name not in self.job:
                self.job[name] = job
                limits = (spec.get("containers") or [{}])[0].get("resources", {}).get("limits", {})
                self.gpus[name] = int(limits.get("nvidia.com/gpu", 0))
            if spec.get("nodeName") and name not in self.bound:
                self.bound[name] = now
            if phase in ("Running", "Succeeded", "Failed") and name not in self.running:
                self.running[name] = now
            ended = phase in ("Succeeded", "Failed") or kind == "DELETED"
            if ended and name not in self.ended:
                self.ended[name] = now
                if phase == "Succeeded" and self.first_end is None:
                    self.first_end = now

    def by_job(self) -> dict[str, list[str]]:
        with self.lock:
            jobs: dict[str, list[str]] = defaultdict(list)
            for pod, job in self.job.items():
                jobs[job].append(pod)
            return dict(jobs)

    def partial(self, sizes: dict[str, int]) -> tuple[int, int, set[str]]:
        """Jobs with some but not all Pods bound now, the GPUs their live Pods hold, and who."""
        with self.lock:
            bound: Counter[str] = Counter()
            held: Counter[str] = Counter()
            for pod, job in self.job.items():
                if pod in self.bound:
                    bound[job] += 1
                    if pod not in self.ended:
                        held[job] += self.gpus.get(pod, 0)
        partial = {job for job, n in bound.items() if n < sizes.get(job, 0)}
        return len(partial), sum(held[j] for j in partial), partial


class WorkloadTracker:
    """When each Kueue Workload (by its Job's name) was created and first seen admitted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.created: dict[str, float] = {}
        self.admitted: dict[str, float] = {}

    def handle(self, kind: str, workload: Any, now: float) -> None:
        owners = workload["metadata"].get("ownerReferences") or []
        job = next((o["name"] for o in owners if o.get("kind") == "Job"), None)
        if job is None:
            return
        conditions = (workload.get("status") or {}).get("conditions") or []
        with self.lock:
            self.created.setdefault(job, now)
            admitted = any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)
            if admitted and job not in self.admitted:
                self.admitted[job] = now


# ---- processes ----


def cpu_seconds(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class CpuWindow:
    """CPU seconds of named processes between ``start()`` and ``stop()``."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def start(self) -> None:
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.used = {
            name: round(cpu_seconds(pid) - self.before.get(name, 0.0), 2)
            for name, pid in self.pids.items()
        }
        return self.used


# ---- the audit log ----


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def audit_counts(path: Path, offset: int, since: float, until: float) -> dict[str, int]:
    """Requests per user received in [since, until], from ``offset`` of the audit log."""
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    with open(path, "rb") as log:
        log.seek(offset)
        for line in log:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            audit_id = event.get("auditID")
            if audit_id in seen:
                continue  # a watch's ResponseStarted and ResponseComplete: one request
            when = _stamp(event["requestReceivedTimestamp"])
            if since <= when <= until:
                seen.add(audit_id)
                counts[event.get("user", {}).get("username", "?")] += 1
    return dict(counts)


# ---- summaries ----


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    return {
        "n": len(values),
        "p50": round(percentile(values, 0.5), 3),
        "p99": round(percentile(values, 0.99), 3),
        "max": round(max(values), 3),
    }


def summarize(
    gangs: list[Gang],
    keys: dict[str, str],  # gang name -> tracker job key
    admitted: dict[str, float],  # gang name -> admission time
    pods: PodTracker,
    opened: float,
    closed: float,
    seen: float,
) -> dict[str, Any]:
    """Jobs admitted by ``closed`` (the window's end); their Pods as seen until ``seen``."""
    by_job = pods.by_job()
    to_bound, to_running, from_open, gang_spread = [], [], [], []
    censored_bound = censored_running = 0
    per_job: dict[str, list[float | None]] = {}  # admitted, first and last bound, last running
    whole_bound = whole_running = 0
    tasks = 0
    for gang in gangs:
        at = admitted.get(gang.name)
        if at is None or at > closed:
            continue
        tasks += gang.pods
        names = by_job.get(keys.get(gang.name, ""), [])
        bound = [pods.bound[p] for p in names if pods.bound.get(p, seen + 1) <= seen]
        running = [pods.running[p] for p in names if pods.running.get(p, seen + 1) <= seen]
        per_job[gang.name] = [
            round(at - opened, 3),
            round(min(bound) - opened, 3) if bound else None,
            round(max(bound) - opened, 3) if len(bound) >= gang.pods else None,
            round(max(running) - opened, 3) if len(running) >= gang.pods else None,
        ]
        if len(bound) >= gang.pods:
            whole_bound += 1
            to_bound.append(max(max(bound) - at, 0.0))
            gang_spread.append(max(bound) - min(bound))
        else:
            censored_bound += 1
            to_bound.append(seen - at)
        if len(running) >= gang.pods:
            whole_running += 1
            to_running.append(max(max(running) - at, 0.0))
            from_open.append(max(running) - opened)
        else:
            censored_running += 1
            to_running.append(seen - at)
    times = sorted(t for t in admitted.values() if t <= closed)
    first_end = pods.first_end or closed
    wave = [t for t in times if t <= first_end]
    wave_s = (wave[-1] - opened) if wave else 0.0
    return {
        "admitted": len(times),
        "tasks_admitted": tasks,
        "pods_bound": sum(1 for t in pods.bound.values() if t <= closed),
        "whole_bound": whole_bound,
        "whole_running": whole_running,
        "admitted_per_s_window": round(len(times) / (closed - opened), 2),
        "first_wave": {
            "jobs": len(wave),
            "seconds": round(wave_s, 2),
            "per_s": round(len(wave) / wave_s, 1) if wave_s > 0 else None,
            "first_pod_end_after_s": round(first_end - opened, 2),
        },
        "admit_to_bound_s": {**spread(to_bound), "censored": censored_bound},
        "admit_to_running_s": {**spread(to_running), "censored": censored_running},
        "open_to_running_s": spread(from_open),
        "gang_spread_s": spread(gang_spread),
        "per_job": per_job,
    }


class Sampler(threading.Thread):
    """Every ``period`` s until stopped: partially placed jobs (peak count, peak idle GPUs, all
    jobs ever seen partial)."""

    def __init__(self, pods: PodTracker, sizes: dict[str, int], period: float = 1.0) -> None:
        super().__init__(name="sampler", daemon=True)
        self.pods, self.sizes, self.period = pods, sizes, period
        self.stopping = threading.Event()
        self.peak_jobs = self.peak_gpus = 0
        self.ever: set[str] = set()

    def run(self) -> None:
        while not self.stopping.wait(self.period):
            jobs, gpus, who = self.pods.partial(self.sizes)
            self.peak_jobs = max(self.peak_jobs, jobs)
            self.peak_gpus = max(self.peak_gpus, gpus)
            self.ever |= who

    def stop(self) -> dict[str, int]:
        self.stopping.set()
        if self.is_alive():
            self.join(10)
        return {
            "peak_jobs": self.peak_jobs,
            "peak_idle_gpus": self.peak_gpus,
            "jobs_ever_partial": len(self.ever),
        }


# ---- the systems ----


@dataclass
class Run:
    plane: BenchPlane
    driver: Kube
    gangs: list[Gang]
    window_s: float
    grace_s: float
    total_gpus: int
    log: Callable[[str], None]
    drain: bool = True  # clean the namespace after the system (not after the last one)


def wait_window(run: Run, opened: float, done: Callable[[], bool]) -> float:
    deadline = opened + run.window_s
    last = 0.0
    while time.time() < deadline:
        if done():
            break
        if time.time() - last > 15:
            run.log(f"  {time.time() - opened:5.0f} s into the window")
            last = time.time()
        time.sleep(0.5)
    return min(time.time(), deadline)


def linger(run: Run, closed: float, done: Callable[[], bool]) -> float:
    """Keep watching ``grace_s`` after the window (or until ``done``): the jobs admitted in it
    get the time to be bound, so their latencies are measured rather than cut off."""
    deadline = closed + run.grace_s
    while time.time() < deadline and not done():
        time.sleep(0.5)
    return min(time.time(), deadline)


def shared_pids(run: Run) -> dict[str, int]:
    return {name: p.proc.pid for name, p in run.plane.processes.items()}


def api_requests(
    run: Run, system: str, offset: int, began: float, closed: float, tasks: int
) -> dict[str, Any]:
    counts = audit_counts(run.plane.audit_log, offset, began, closed)
    own = sum(counts.get(u, 0) for u in MANAGERS[system])
    everyone = sum(counts.values())
    return {
        "by_user": counts,
        "own": own,
        "own_per_task": round(own / tasks, 2) if tasks else None,
        "all": everyone,
        "all_per_task": round(everyone / tasks, 2) if tasks else None,
    }


def drain_namespace(run: Run, namespace: str, timeout_s: float = 180) -> None:
    """Delete what the system left in ``namespace``; wait until no Pod of it holds a node.
    Not after the last system: the cluster is torn down then."""
    if not run.drain:
        return
    kube = run.driver
    base = f"/api/v1/namespaces/{namespace}"
    with contextlib.suppress(httpx.HTTPError):
        kube.delete(f"/apis/batch/v1/namespaces/{namespace}/jobs", propagationPolicy="Background")
    with contextlib.suppress(httpx.HTTPError):
        kube.delete(f"{base}/configmaps")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            kube.delete(f"{base}/pods", gracePeriodSeconds="0")
        left = kube.get(f"{base}/pods", limit=500)["items"]
        if not left:
            return
        stuck = [p for p in left if (p["metadata"].get("finalizers") or [])]
        for pod in stuck[:200]:  # the Job controller's tracking finalizer, its Job gone
            with contextlib.suppress(httpx.HTTPError):
                kube.http.patch(
                    f"{base}/pods/{pod['metadata']['name']}",
                    content=json.dumps({"metadata": {"finalizers": None}}),
                    headers={"Content-Type": "application/merge-patch+json"},
                )
        time.sleep(1)
    run.log(f"  {namespace} still has Pods after {timeout_s:.0f} s; going on")


def submit_all(items: Iterable[Any], submit: Callable[[Any], Any], workers: int = 4) -> float:
    began = time.time()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(submit, items))
    return time.time() - began


def node_actions(url: str, token: str, names: list[str], action: str) -> None:
    """``cordon`` or ``uncordon`` every node in shoal, 16 at a time."""
    local = threading.local()

    def one(name: str) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = ShoalClient(url, token, timeout=60)
        client.node_action(name, action)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, names))


def run_shoal(run: Run, root: Path) -> dict[str, Any]:
    namespace = NAMESPACES["shoal"]
    run.driver.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
    home = root / "shoal-home"
    config = run.plane.kubeconfig_for("shoal-agent", namespace)
    began = time.time()
    offset = run.plane.audit_log.stat().st_size
    argv = ("--kubeconfig", str(config), "--namespace", namespace, "--no-logs")
    info = start_local(UpOptions(home=home, port=0, kill_grace_s=2.0, kubernetes=argv), 120)
    pods = PodTracker(
        lambda p: (
            (p["metadata"].get("annotations") or {}).get("shoal.dev/job")
            or (p["metadata"].get("labels") or {}).get("shoal.dev/job")
        )
    )
    watch = Watch(Kube(run.plane, "watcher"), f"/api/v1/namespaces/{namespace}/pods", pods.handle)
    try:
        token = (home / "admin.token").read_text().strip()
        admin = ShoalClient(info.url, token, timeout=60)
        nodes = run.total_gpus // GPUS

        def nodes_ready() -> bool:
            return sum(1 for n in admin.nodes() if n["state"] == "READY") >= nodes

        wait_for(nodes_ready, 180, "every node READY in shoal", interval=1.0)
        names = [n["name"] for n in admin.nodes()]
        node_actions(info.url, token, names, "cordon")  # the queue fills, nothing is placed
        guarantee = {"guarantee_gpu": run.total_gpus, "borrow_gpu": 0, "members": []}
        admin.save_vc("bench", guarantee, create=True)  # open, so the jobs are taken
        local = threading.local()

        def submit(gang: Gang) -> tuple[str, str]:
            client = getattr(local, "client", None)
            if client is None:
                client = local.client = ShoalClient(info.url, token, timeout=60)
            text = SHOAL_JOB.format(
                name=gang.name, pods=gang.pods, cpu=gang.cpu, memory=gang.memory_gi, gpus=gang.gpus
            )
            return gang.name, str(client.submit(text, virtual_cluster="bench")[0]["id"])

        submitted = time.time()
        with ThreadPoolExecutor(4) as pool:
            ids = dict(pool.map(submit, run.gangs))
        submit_s = time.time() - submitted
        run.log(f"  {len(ids)} jobs submitted in {submit_s:.1f} s")
        watch.start()
        watch.synced.wait(60)
        # closed: the jobs stay queued, out of its reach, and the nodes are opened again
        admin.patch_vc("bench", {"guarantee_gpu": 0})
        node_actions(info.url, token, names, "uncordon")
        time.sleep(5)  # the scheduler has seen them all and the uncordons (the jobs wait)
        waiting = admin.jobs(states=["WAITING"], limit=10000, all_users=True)
        run.log(f"  {len(waiting)} waiting before the opening")
        pids = {"shoal server": info.server_pid, "shoal agent": info.agent_pid}
        for child in psutil.Process(info.server_pid).children(recursive=True):
            pids[f"shoal server child {child.pid}"] = child.pid
        cpu = CpuWindow({**pids, **shared_pids(run)})
        sampler = Sampler(pods, {ids[g.name]: g.pods for g in run.gangs})
        cpu.start()
        sampler.start()
        opened = time.time()
        admin.patch_vc("bench", {"guarantee_gpu": run.total_gpus})  # one request, as Kueue's
        total = sum(g.pods for g in run.gangs)
        closed = wait_window(run, opened, lambda: len(pods.running) >= total)
        used = cpu.stop()
        seen = linger(run, closed, lambda: len(pods.running) >= total)
        partial = sampler.stop()
        jobs = admin.jobs(limit=10000, all_users=True)
        launched = {j["id"]: j.get("launchedAt") for j in jobs}
        by_id = {v: k for k, v in ids.items()}
        admitted = {by_id[i]: float(t) for i, t in launched.items() if t and i in by_id}
        result = summarize(run.gangs, ids, admitted, pods, opened, closed, seen)
        result["submit_s"] = round(submit_s, 2)
        result["partial"] = partial
        result["api"] = api_requests(run, "shoal", offset, began, closed, result["pods_bound"])
        result["cpu_s"] = used
        result["peak_rss_mib"] = {name: round(peak_rss_mib(pid), 1) for name, pid in pids.items()}
        result["watch_errors"] = watch.errors
        return result
    finally:
        watch.stop()
        stop_local(home)
        drain_namespace(run, namespace)


def job_body(gang: Gang, namespace: str, suspend: bool, queue: str | None) -> dict[str, Any]:
    resources = {"cpu": str(gang.cpu), "memory": f"{gang.memory_gi}Gi", "nvidia.com/gpu": gang.gpus}
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": gang.name, "namespace": namespace, "labels": labels},
        "spec": {
            "parallelism": gang.pods,
            "completions": gang.pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "suspend": suspend,
            "template": {
                "metadata": {"labels": {"bench": "gang"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "task",
                            "image": IMAGE,
                            "command": ["sleep", "3600"],
                            "resources": {
                                "requests": {k: str(v) for k, v in resources.items()},
                                "limits": {k: str(v) for k, v in resources.items()},
                            },
                        }
                    ],
                },
            },
        },
    }


def start_scheduler(plane: BenchPlane) -> Process:
    config = plane.root / "kube-scheduler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {
                    "kubeconfig": str(plane.kubeconfig_for("kube-scheduler")),
                    "qps": UNLIMITED_QPS,
                    "burst": UNLIMITED_QPS * 2,
                },
                "leaderElection": {"leaderElect": False},
                "profiles": [
                    {
                        "schedulerName": "default-scheduler",
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {
                                    "scoringStrategy": {
                                        "type": "MostAllocated",
                                        "resources": [{"name": "nvidia.com/gpu", "weight": 1}],
                                    }
                                },
                            }
                        ],
                    }
                ],
            }
        )
    )
    return Process(
        "kube-scheduler",
        [
            str(BIN / "kube-scheduler"),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
        ],
        plane.root / "kube-scheduler.log",
    )


def job_pods(namespace: str) -> PodTracker:
    del namespace
    return PodTracker(
        lambda p: (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")
    )


def run_kube_scheduler(run: Run, root: Path) -> dict[str, Any]:
    del root
    namespace = NAMESPACES["kube-scheduler"]
    run.driver.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
    pods = job_pods(namespace)
    watch = Watch(Kube(run.plane, "watcher"), f"/api/v1/namespaces/{namespace}/pods", pods.handle)
    scheduler: Process | None = None
    try:
        watch.start()
        watch.synced.wait(60)
        began = time.time()
        offset = run.plane.audit_log.stat().st_size
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        submit_s = submit_all(
            run.gangs, lambda g: run.driver.post(path, job_body(g, namespace, False, None))
        )
        run.log(f"  {len(run.gangs)} Jobs created in {submit_s:.1f} s")
        total = sum(g.pods for g in run.gangs)
        wait_for(lambda: len(pods.job) >= total, 300, f"{total} Pods created", interval=1.0)
        run.log(f"  {total} Pods pending, {time.time() - began:.1f} s after the first Job")
        cpu = CpuWindow(shared_pids(run))
        sampler = Sampler(pods, {g.name: g.pods for g in run.gangs})
        cpu.start()
        sampler.start()
        opened = time.time()
        scheduler = start_scheduler(run.plane)
        cpu.pids["kube-scheduler"] = scheduler.proc.pid
        cpu.before["kube-scheduler"] = 0.0
        closed = wait_window(run, opened, lambda: len(pods.running) >= total)
        used = cpu.stop()
        seen = linger(run, closed, lambda: len(pods.running) >= total)
        partial = sampler.stop()
        peak = {"kube-scheduler": round(peak_rss_mib(scheduler.proc.pid), 1)}
        by_job = pods.by_job()
        admitted = {}
        for gang in run.gangs:  # no admission: the first Pod bound
            bound = [pods.bound[p] for p in by_job.get(gang.name, []) if p in pods.bound]
            if bound:
                admitted[gang.name] = min(bound)
        keys = {g.name: g.name for g in run.gangs}
        result = summarize(run.gangs, keys, admitted, pods, opened, closed, seen)
        result["submit_s"] = round(submit_s, 2)
        result["partial"] = partial
        result["api"] = api_requests(
            run, "kube-scheduler", offset, began, closed, result["pods_bound"]
        )
        result["cpu_s"] = used
        result["peak_rss_mib"] = peak
        result["watch_errors"] = watch.errors
        return result
    finally:
        if scheduler is not None:
            scheduler.stop()
        watch.stop()
        drain_namespace(run, namespace)


def run_kueue(run: Run, root: Path) -> dict[str, Any]:
    namespace = NAMESPACES["kueue"]
    kueue = kubernetes_kueue.Kueue(
        root / "kueue", run.plane.kubeconfig_for("kueue"), run.plane.kubectl, UNLIMITED_QPS
    )
    kueue.root.mkdir(parents=True, exist_ok=True)
    pods = job_pods(namespace)
    workloads = WorkloadTracker()
    pod_watch = Watch(
        Kube(run.plane, "watcher"), f"/api/v1/namespaces/{namespace}/pods", pods.handle
    )
    wl_watch = Watch(
        Kube(run.plane, "watcher"),
        f"{kubernetes_kueue.API}/namespaces/{namespace}/workloads",
        workloads.handle,
    )
    scheduler: Process | None = None
    try:
        run.driver.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
        started = time.time()
        kueue.install()
        kueue.start()
        run.log(f"  Kueue installed and ready in {time.time() - started:.1f} s")
        objects = kubernetes_kueue.queue_objects(
            namespace, run.total_gpus // GPUS, GPUS, CPUS, MEMORY_GI
        )
        run.plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(objects))
        scheduler = start_scheduler(run.plane)
        pod_watch.start()
        wl_watch.start()
        pod_watch.synced.wait(60)
        wl_watch.synced.wait(60)
        began = time.time()
        offset = run.plane.audit_log.stat().st_size
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        submit_s = submit_all(
            run.gangs, lambda g: run.driver.post(path, job_body(g, namespace, True, "bench"))
        )
        run.log(f"  {len(run.gangs)} Jobs created in {submit_s:.1f} s")
        count = len(run.gangs)
        wait_for(lambda: len(workloads.created) >= count, 300, f"{count} Workloads", 1.0)
        run.log(f"  {count} Workloads queued, {time.time() - began:.1f} s after the first Job")
        pids = {"kueue": kueue.pid() or 0, "kube-scheduler": scheduler.proc.pid}
        cpu = CpuWindow({**pids, **shared_pids(run)})
        sampler = Sampler(pods, {g.name: g.pods for g in run.gangs})
        cpu.start()
        sampler.start()
        opened = time.time()
        run.driver.patch(
            f"{kubernetes_kueue.API}/clusterqueues/bench", {"spec": {"stopPolicy": "None"}}
        )
        total = sum(g.pods for g in run.gangs)
        closed = wait_window(run, opened, lambda: len(pods.running) >= total)
        used = cpu.stop()
        seen = linger(run, closed, lambda: len(pods.running) >= total)
        partial = sampler.stop()
        with workloads.lock:
            admitted = dict(workloads.admitted)
        keys = {g.name: g.name for g in run.gangs}
        result = summarize(run.gangs, keys, admitted, pods, opened, closed, seen)
        result["submit_s"] = round(submit_s, 2)
        result["partial"] = partial
        result["api"] = api_requests(run, "kueue", offset, began, closed, result["pods_bound"])
        result["cpu_s"] = used
        result["peak_rss_mib"] = {name: round(peak_rss_mib(pid), 1) for name, pid in pids.items()}
        result["watch_errors"] = pod_watch.errors + wl_watch.errors
        return result
    finally:
        pod_watch.stop()
        wl_watch.stop()
        kueue.stop()
        if scheduler is not None:
            scheduler.stop()
        kueue.uninstall()  # its webhooks would refuse Jobs without it
        drain_namespace(run, namespace)


# ---- the report ----

LABELS = {
    "shoal": "shoal",
    "kube-scheduler": "kube-scheduler alone",
    "kueue": "Kueue + kube-scheduler",
}


def _p(stats: dict[str, Any]) -> str:
    if not stats or not stats.get("n"):
        return "-"
    flag = "≥ " if stats.get("censored", 0) > stats["n"] * 0.01 else ""
    return f"{stats['p50']:.2f} / {flag}{stats['p99']:.2f}"


def _cpu(result: dict[str, Any], names: Iterable[str]) -> str:
    used = result.get("cpu_s", {})
    parts = [f"{name} {used[name]:.1f}" for name in names if name in used]
    return ", ".join(parts) or "-"


def rows(data: dict[str, Any]) -> tuple[list[str], list[tuple[str, ...]]]:
    systems = [s for s in SYSTEMS if s in data["results"]]
    results = [data["results"][s] for s in systems]
    jobs = data["jobs"]

    def row(name: str, value: Callable[[str, dict[str, Any]], str]) -> tuple[str, ...]:
        return (name, *[value(s, r) for s, r in zip(systems, results, strict=True)])

    def own_cpu(system: str, r: dict[str, Any]) -> str:
        if system == "shoal":
            used = r.get("cpu_s", {})
            server = sum(v for k, v in used.items() if k.startswith("shoal server"))
            return (
                f"server {server:.1f} (with its scheduler), agent {used.get('shoal agent', 0):.1f}"
            )
        return _cpu(r, ("kueue", "kube-scheduler"))

    def own_rss(system: str, r: dict[str, Any]) -> str:
        peak = r.get("peak_rss_mib", {})
        if system == "shoal":
            server = max((v for k, v in peak.items() if k == "shoal server"), default=0)
            child = max(
                (v for k, v in peak.items() if k.startswith("shoal server child")), default=0
            )
            agent = peak.get("shoal agent", 0)
            return f"server {server:.0f}, scheduler {child:.0f}, agent {agent:.0f}"
        return ", ".join(f"{k} {v:.0f}" for k, v in peak.items())

    table = [
        row("jobs submitted → queued (s)", lambda s, r: f"{r['submit_s']:.1f}"),
        row(
            f"jobs admitted in the window (of {jobs:,})",
            lambda s, r: f"{r['admitted']:,} ({r['tasks_admitted']:,} Pods)",
        ),
        row("jobs with every Pod running in the window", lambda s, r: f"{r['whole_running']:,}"),
        row(
            "first wave: jobs admitted before the first Pod ends, in s → jobs/s",
            lambda s, r: (
                f"{r['first_wave']['jobs']:,} in {r['first_wave']['seconds']:.1f} s → "
                f"{r['first_wave']['per_s'] or 0:.1f}/s"
            ),
        ),
        row("admitted jobs/s over the window", lambda s, r: f"{r['admitted_per_s_window']:.2f}"),
        row("admission → every Pod bound, p50 / p99 (s)", lambda s, r: _p(r["admit_to_bound_s"])),
        row(
            "admission → every Pod running, p50 / p99 (s)", lambda s, r: _p(r["admit_to_running_s"])
        ),
        row("opening → every Pod running, p50 / p99 (s)", lambda s, r: _p(r["open_to_running_s"])),
        row("first → last Pod bound, p50 / p99 (s)", lambda s, r: _p(r["gang_spread_s"])),
        row(
            "jobs with some but not all Pods bound: peak at once / ever; peak GPUs held",
            lambda s, r: (
                f"{r['partial']['peak_jobs']:,} / {r['partial']['jobs_ever_partial']:,}; "
                f"{r['partial']['peak_idle_gpus']:,}"
            ),
        ),
        row(
            "API requests per Pod bound: the system's components / everyone",
            lambda s, r: (
                f"{r['api']['own_per_task'] or 0:.1f} / {r['api']['all_per_task'] or 0:.1f}"
            ),
        ),
        row(
            "API requests per Pod bound, by component",
            lambda s, r: ", ".join(
                f"{user} {r['api']['by_user'].get(user, 0) / max(r['pods_bound'], 1):.1f}"
                for user in MANAGERS[s]
            ),
        ),
        row("CPU seconds in the window: the system's own processes", own_cpu),
        row(
            "CPU seconds in the window: apiserver, etcd, controller-manager, kwok",
            lambda s, r: _cpu(r, ("kube-apiserver", "etcd", "kube-controller-manager", "kwok")),
        ),
        row("peak RSS (MiB)", own_rss),
    ]
    return ["measure", *[LABELS[s] for s in systems]], table


def region(data: dict[str, Any]) -> str:
    header, table = rows(data)
    lines = [
        f"Measured {data['when']} at commit `{data['commit']}` on {data['machine']}; load average "
        f"{data['load_before']} before, {data['load_after']} after (1, 5, 15 min). The whole run "
        f"took {data['run_s']:.0f} s.",
        "",
        f"Load: {data['nodes']:,} kwok nodes × {GPUS} GPUs ({data['nodes'] * GPUS:,} GPUs); "
        f"{data['jobs']:,} gang jobs, {data['pods']:,} Pods, {data['gpu_demand']:,} GPUs asked "
        f"({data['gpu_demand'] / (data['nodes'] * GPUS):.1f}× the cluster); every Pod runs "
        f"{data['pod_seconds']:g} s; each system gets a {data['window_s']:g} s window from the "
        "opening of its queue.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(r) + " |" for r in table],
    ]
    results = data["results"]
    for key, what in (("admit_to_bound_s", "bound"), ("admit_to_running_s", "running")):
        shoal, kueue = results.get("shoal", {}).get(key, {}), results.get("kueue", {}).get(key, {})
        if not (shoal.get("n") and kueue.get("n")) or not shoal["p99"]:
            continue
        ratio = kueue["p99"] / shoal["p99"]
        verdict = "met" if ratio >= 5 else "not met"
        how = f"{ratio:.1f}× better" if ratio >= 1 else f"{1 / ratio:.2f}× slower"
        lower = (
            " Both p99s are lower bounds (jobs not yet whole 20 s after the window)."
            if "≥" in _p(shoal) and "≥" in _p(kueue)
            else ""
        )
        lines += [
            "",
            f"**Admission → every Pod {what}, p99**: shoal {_p(shoal).split(' / ')[1]} s, "
            f"Kueue + kube-scheduler {_p(kueue).split(' / ')[1]} s. shoal is {how} "
            f"(Kueue's p99 / shoal's = {ratio:.2f}; the issue's goal is ≥ 5: {verdict}).{lower}",
        ]
    for system, why in data.get("failed", {}).items():
        lines += ["", f"**{LABELS[system]} did not run**: {why}"]
    return "\n".join(lines)


def commit() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=10", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} (src/ modified)" if dirty else head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="50 nodes, 100 jobs, a short window")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--window", type=float, default=None, help="seconds from the opening")
    parser.add_argument("--pod-seconds", type=float, default=None, help="how long a Pod runs")
    parser.add_argument("--only", default=",".join(SYSTEMS), help="systems, comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--output", type=Path, help="also write the results' JSON here")
    parser.add_argument(
        "--report",
        action="store_true",
        help=f"only rewrite the docs region from {RESULTS.relative_to(ROOT)} (no run)",
    )
    args = parser.parse_args()
    if args.report:
        replace_region(DOC, BEGIN, END, region(json.loads(RESULTS.read_text())))
        return
    nodes = args.nodes or (50 if args.small else 1000)
    count = args.jobs or (100 if args.small else 2000)
    window = args.window or (20.0 if args.small else 120.0)
    pod_seconds = args.pod_seconds or (8.0 if args.small else 30.0)
    grace = 6.0 if args.small else 20.0
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"--only: unknown {sorted(unknown)}; choose from {SYSTEMS}")
    why = missing()
    if why is not None:
        raise SystemExit(why)
    failed: dict[str, str] = {}
    apiserver, why = kubernetes_kueue.stamped_apiserver()
    if apiserver is None:
        apiserver = BIN / "kube-apiserver"
        if "kueue" in only:
            failed["kueue"] = f"{why} (Kueue needs an API server that says its version)"
            only.remove("kueue")
    if "kueue" in only:
        why = kubernetes_kueue.missing()
        if why is not None:
            failed["kueue"] = why
            only.remove("kueue")
    gangs = workload(count)
    console = Console()
    started = time.time()

    def log(text: str) -> None:
        console.print(f"[dim]{time.time() - started:6.1f}s[/dim] {text}")

    # SIGTERM ends the run through the `finally`s, which stop every process it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    measured = commit()  # at the start: the code the processes were started from
    root = Path(tempfile.mkdtemp(prefix="shoal-bench-k8s-"))
    plane = BenchPlane(root, apiserver)
    driver: Kube | None = None
    results: dict[str, Any] = {}
    try:
        log(f"control plane in {root}")
        plane.start()
        plane.processes["kwok"] = start_kwok(plane, pod_seconds)
        driver = Kube(plane, "driver")
        create_nodes(driver, nodes)
        log(f"{nodes} kwok nodes Ready")
        run = Run(plane, driver, gangs, window, grace, nodes * GPUS, log)
        runners = {"shoal": run_shoal, "kube-scheduler": run_kube_scheduler, "kueue": run_kueue}
        for system in only:
            log(f"{system}:")
            run.drain = system != only[-1]
            try:
                results[system] = runners[system](run, root)
            except Exception as exc:
                failed[system] = f"{type(exc).__name__}: {exc}"
                log(f"  failed: {failed[system][:2000]}")
            log(f"  done with {system}")
            partial = {"results": results, "failed": failed}  # for a run cut short (--keep)
            (root / "results-partial.json").write_text(json.dumps(partial, indent=1))
    finally:
        if driver is not None:
            driver.close()
        plane.stop()
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    data = {
        "when": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "commit": measured,
        "machine": machine(),
        "load_before": load_before,
        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "run_s": round(time.time() - started, 1),
        "nodes": nodes,
        "jobs": count,
        "pods": sum(g.pods for g in gangs),
        "gpu_demand": sum(g.pods * g.gpus for g in gangs),
        "pod_seconds": pod_seconds,
        "window_s": window,
        "grace_s": grace,
        "apiserver": str(apiserver),
        "mix": {"pods": PODS_MIX, "gpus_per_pod": GPUS_MIX, "seed": 7},
        "results": results,
        "failed": failed,
    }
    header, table = rows(data)
    shown = Table(title=f"Kubernetes: {nodes} kwok nodes x {GPUS} GPUs, {count} gang jobs")
    for name in header:
        shown.add_column(name)
    for line in table:
        shown.add_row(*line)
    console.print(shown)
    text = region(data)
    console.print(text.split("\n\n", 2)[0])
    for system, why in failed.items():
        console.print(f"[red]{system} did not run[/red]: {why}")
    if args.output is not None:
        args.output.write_text(json.dumps(data, indent=1) + "\n")
    if args.small or args.nodes or args.jobs:
        console.print("(a smoke run: bench/results and docs/benchmarks.md are left as they are)")
        return
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    replace_region(DOC, BEGIN, END, text)


if __name__ == "__main__":
    main()
