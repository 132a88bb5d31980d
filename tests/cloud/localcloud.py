"""A local cloud daemon for tests: ``shoal cloud local serve`` in the root namespace, listening on
a NetnsLab's bridge (the lab's root address, any free port), its machines plugged into the lab's
bridge from host number 100 on. Stopped with SIGTERM and ``--cleanup-on-exit``; whatever
namespace its state still names is deleted after that, pass or fail."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from shoal.cloud.local.client import LocalProvider
from tests.envs import without_shoal
from tests.multihost.netns import NetnsLab

FIRST_HOST = 100  # the lab's own hosts are .1, .2, ...; machines from .100


@dataclass
class CloudDaemon:
    lab: NetnsLab
    directory: Path
    catalog: Path
    process: subprocess.Popen[bytes] | None = None
    endpoint: str = ""
    providers: list[LocalProvider] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.directory.parent / f"{self.directory.name}.log"

    def start(self, timeout_s: float = 20.0) -> None:
        (self.directory / "endpoint").unlink(missing_ok=True)
        command = [
            sys.executable, "-m", "shoal", "cloud", "local", "serve",
            "--state", str(self.directory), "--catalog", str(self.catalog),
            "--listen", f"{self.lab.root_address}:0", "--bridge-netns", self.lab.switch,
            "--bridge", "br0", "--subnet", f"198.18.{self.lab.octet}.0/24",
            "--first-host", str(FIRST_HOST), "--grace", "2", "--cleanup-on-exit",
        ]  # fmt: skip
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=without_shoal(os.environ),
            )
        deadline = time.monotonic() + timeout_s
        endpoint_file = self.directory / "endpoint"
        while not endpoint_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the local cloud did not start: {self.tail()}")
            time.sleep(0.05)
        self.endpoint = endpoint_file.read_text().strip()

    def provider(self) -> LocalProvider:
        made = LocalProvider("lab", self.endpoint, timeout_s=10.0)
        self.providers.append(made)
        return made

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (the machines stay unless the daemon was started with cleanup)."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def state(self) -> dict[str, object]:
        return dict(json.loads((self.directory / "state.json").read_text()))

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def close(self) -> None:
        for provider in self.providers:
            provider.close()
        self.stop()
        leftover = self.directory / "state.json"
        if not leftover.exists():
            return
        for machine in json.loads(leftover.read_text()).get("machines", []):
            if Path(f"/run/netns/{machine['netns']}").exists():  # a safety net, never expected
                listed = subprocess.run(
                    ["ip", "netns", "pids", machine["netns"]],
                    check=False,
                    capture_output=True,
                    text=True,
                ).stdout.split()
                for pid in listed:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                subprocess.run(["ip", "netns", "del", machine["netns"]], check=False)


def start_cloud(lab: NetnsLab, root: Path, catalog_text: str, name: str = "cloud") -> CloudDaemon:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    catalog = root / f"{name}-catalog.yaml"
    catalog.write_text(catalog_text)
    daemon = CloudDaemon(lab, directory, catalog)
    try:
        daemon.start()
    except BaseException:
        daemon.close()
        raise
    return daemon
