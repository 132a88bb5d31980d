"""A real Kubernetes node for the tests: a kubelet with its own containerd (Debian's, run by hand
with its own root, state and socket; crun as its runtime), on an address of this host in
198.18.0.0/15, with local images only (built by scripts/containers-setup.sh, imported into
containerd; ``imagePullPolicy: Never``). Everything it made (the address, its processes, their
directories and the containers they ran) is gone when ``stop`` returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from tests.kubernetes.harness import BIN, ControlPlane, Process, free_port, wait_for

NODE_NAME = "shoal-real-node"  # the kubelet's token in tokens.csv is for this name
BUSYBOX = "localhost/shoal-test/busybox:local"
PYTHON = "localhost/shoal-test/python:bookworm"
PAUSE = "localhost/shoal-test/pause:local"


def worker_number() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 8


def missing() -> str | None:
    """Why a real node cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "a kubelet and containerd need root"
    for tool in ("containerd", "ctr", "crun", "podman"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: run `make k8s containers`"
    for binary in ("kubelet", "coredns"):
        if not (BIN / binary).is_file():
            return f"{binary} not built in {BIN}: run `make k8s`"
    if not Path("/usr/lib/cni/bridge").is_file():
        return "the CNI plugins are not installed: run `make k8s`"
    if Path("/proc/sys/kernel/panic_on_oops").read_text().strip() != "1":
        return "the kernel settings a kubelet wants are not set: run `make k8s`"
    for image in (BUSYBOX, PYTHON):
        if subprocess.run(["podman", "image", "exists", image], check=False).returncode:
            return f"{image} is not built: run `make containers`"
    return None


class RealNode:
    def __init__(self, plane: ControlPlane, root: Path) -> None:
        self.plane = plane
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        n = worker_number()
        self.address = f"198.18.199.{1 + n}"
        self.pod_subnet = f"198.19.{240 + n}.0/24"
        self.socket = root / "containerd.sock"
        self.processes: dict[str, Process] = {}
        self._address_added = False

    def start(self) -> RealNode:
        self._add_address()
        self._start_dns()
        self._start_containerd()
        self._import_images()
        self._start_kubelet()
        core = self.plane.core()
        wait_for(lambda: _ready(core.read_node(NODE_NAME)), 90, "the real node Ready", 0.5)
        return self

    # ---- pieces ----

    def _add_address(self) -> None:
        shown = subprocess.run(
            ["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=True
        )
        if f"{self.address}/32" not in shown.stdout:
            subprocess.run(["ip", "addr", "add", f"{self.address}/32", "dev", "lo"], check=True)
            self._address_added = True

    def _start_dns(self) -> None:
        """CoreDNS on the node's address: Services and Pods by name (the pod-network mode)."""
        corefile = self.root / "Corefile"
        corefile.write_text(
            f"cluster.local:53 {{\n  bind {self.address}\n  errors\n"
            f"  kubernetes cluster.local {{\n    kubeconfig {self.plane.admin_kubeconfig} test\n"
            "    pods insecure\n  }\n}\n"
        )
        self.processes["coredns"] = Process(
            "coredns", [str(BIN / "coredns"), "-conf", str(corefile)], self.root / "coredns.log"
        )

    def _start_containerd(self) -> None:
        cni = self.root / "cni"
        cni.mkdir(exist_ok=True)
        (cni / "10-shoal-test.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "shoal-test",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": f"shoalk8s{worker_number()}",
                            "isGateway": True,
                            "ipMasq": False,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": self.pod_subnet}]],
                                # Pods reach the node's address (its DNS) and other test
                                # addresses through the bridge; nothing else (no default route)
                                "routes": [{"dst": "198.18.0.0/15"}],
                                "dataDir": str(self.root / "cni-ipam"),
                            },
                        },
                    ],
                }
            )
        )
        config = f"""version = 2
root = "{self.root / "containerd-root"}"
state = "{self.root / "containerd-state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE}"
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "crun"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
        BinaryName = "/usr/bin/crun"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"""
        path = self.root / "containerd.toml"
        path.write_text(config)
        self.processes["containerd"] = Process(
            "containerd", ["containerd", "--config", str(path)], self.root / "containerd.log"
        )
        wait_for(lambda: self._ctr("version").returncode == 0, 30, "containerd")

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    def _import_images(self) -> None:
        scratch = self.root / "images"
        scratch.mkdir(exist_ok=True)
        pause = scratch / "Containerfile"
        pause.write_text(f'FROM {BUSYBOX}\nENTRYPOINT ["/bin/sleep", "2147483647"]\n')
        subprocess.run(
            ["podman", "build", "--pull=never", "-q", "-t", PAUSE, "-f", str(pause), str(scratch)],
            check=True,
            capture_output=True,
            cwd=scratch,
        )
        for image in (PAUSE, BUSYBOX, PYTHON):
            self.import_image(image)

    def import_image(self, image: str) -> None:
        """A podman image into the node's containerd (``imagePullPolicy: Never`` finds it)."""
        scratch = self.root / "images"
        scratch.mkdir(exist_ok=True)
        archive = scratch / (image.rsplit("/", 1)[1].replace(":", "-") + ".tar")
        subprocess.run(
            ["podman", "save", "-q", "--format", "docker-archive", "-o", str(archive), image],
            check=True,
            capture_output=True,
            cwd=scratch,
        )
        done = self._ctr("images", "import", str(archive))
        archive.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"ctr images import {image}: {done.stderr}")

    def _start_kubelet(self) -> None:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "failCgroupV1": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.address,
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            # a throwaway lab on a local-only address: the API server calls it for logs and exec
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "protectKernelDefaults": True,  # scripts/k8s-node-setup.sh set them
            "serializeImagePulls": False,
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "resolvConf": "",
            "clusterDNS": [self.address],
            "clusterDomain": "cluster.local",
            "localStorageCapacityIsolation": False,
            "nodeStatusUpdateFrequency": "2s",
            "makeIPTablesUtilChains": False,
        }
        path = self.root / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        self.processes["kubelet"] = Process(
            "kubelet",
            [
                str(BIN / "kubelet"),
                f"--config={path}",
                f"--kubeconfig={self.plane.kubelet_kubeconfig}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--cert-dir={self.root / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.address}",
                "--v=1",
            ],
            self.root / "kubelet.log",
        )

    # ---- faults and the end ----

    def stop_kubelet(self) -> None:
        self.processes["kubelet"].stop()

    def start_kubelet(self) -> None:
        self._start_kubelet()

    def stop(self) -> None:
        """The kubelet, the containers it left (their shims), containerd, the address."""
        if "kubelet" in self.processes:
            self.processes["kubelet"].stop()
        if "containerd" in self.processes:
            self._remove_containers()
            self.processes["containerd"].stop()
        if "coredns" in self.processes:
            self.processes["coredns"].stop()
        _end_shims(self.root)
        if self._address_added:
            subprocess.run(["ip", "addr", "del", f"{self.address}/32", "dev", "lo"], check=False)
        bridge = f"shoalk8s{worker_number()}"
        subprocess.run(["ip", "link", "delete", bridge], check=False, capture_output=True)
        for mount in _mounts_under(self.root):
            subprocess.run(["umount", "-l", mount], check=False)

    def _remove_containers(self) -> None:
        listed = self._ctr("tasks", "list", "-q")
        for task in listed.stdout.split():
            self._ctr("tasks", "kill", "-s", "SIGKILL", task)
        time.sleep(0.5)
        for task in listed.stdout.split():
            self._ctr("tasks", "delete", "-f", task)
        for container in self._ctr("containers", "list", "-q").stdout.split():
            self._ctr("containers", "delete", container)


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or ()))


def _end_shims(root: Path) -> None:
    """containerd-shim processes of this node's containerd (found by its state directory in
    their command line, so only the ones this test started), and their process groups."""
    marker = str(root)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "containerd-shim" in cmdline and marker in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), 9)


def _mounts_under(root: Path) -> list[str]:
    found = []
    for line in Path("/proc/mounts").read_text().splitlines():
        mount = line.split()[1]
        if mount.startswith(str(root)):
            found.append(mount)
    return sorted(found, key=len, reverse=True)
