"""Network namespaces and processes that this benchmark starts, and only those.

Every daemon is started in its own session (process group) and stopped through that group. A
namespace's leftovers (Ray workers, slurmstepd) are found by their network namespace, which only
this benchmark's processes are in, and stopped by PID. Nothing is ever looked up by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BENCH_NET = ipaddress.ip_network("198.18.0.0/15")
PR_SET_CHILD_SUBREAPER = 36


def run(
    args: list[str], timeout: float = 60.0, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A bounded subprocess call that captures its output."""
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def log(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", flush=True)


def check_address(address: str) -> None:
    """Only 198.18.0.0/15 is used for namespace addresses (192.0.2.0/24 is the real uplink)."""
    iface = ipaddress.ip_interface(address)
    if iface.version != 4 or not iface.network.subnet_of(BENCH_NET):
        raise ValueError(f"{address} is outside {BENCH_NET}")


def stamp_command(path: Path) -> str:
    """The job's first action: write the wall-clock time (atomically) to ``path``."""
    return f"date +%s.%N > {path}.tmp && mv {path}.tmp {path}"


@dataclass(frozen=True)
class Netns:
    """A private network namespace: lo plus a veth pair whose two ends both stay inside it.

    The veth with a /32 address only makes glibc's getaddrinfo(AI_ADDRCONFIG) work (Slurm needs
    it); there is no default route, so nothing inside can reach anything outside.
    """

    name: str
    address: str

    @property
    def path(self) -> Path:
        return Path("/run/netns") / self.name

    def prefix(self) -> list[str]:
        """Run a command inside: nsenter, not `ip netns exec`, which hides the cgroup mounts."""
        return ["nsenter", f"--net={self.path}"]

    def create(self) -> None:
        check_address(self.address)
        if self.path.exists():  # left over by an earlier, interrupted run of this benchmark
            self.delete()
        ip = ["ip", "-n", self.name]
        run(["ip", "netns", "add", self.name])
        run([*ip, "link", "set", "lo", "up"])
        run([*ip, "link", "add", "v0", "type", "veth", "peer", "name", "v1"])
        run([*ip, "addr", "add", self.address, "dev", "v0"])
        run([*ip, "link", "set", "v0", "up"])
        run([*ip, "link", "set", "v1", "up"])
        routes = run([*ip, "route", "show", "default"]).stdout.strip()
        if routes:
            raise RuntimeError(f"netns {self.name} has a default route: {routes}")

    def pids(self) -> list[int]:
        """Every live process whose network namespace is this one."""
        try:
            ours = os.stat(self.path)
        except FileNotFoundError:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                st = os.stat(f"/proc/{entry}/ns/net")
            except OSError:  # gone, or a zombie
                continue
            if (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino):
                found.append(int(entry))
        return found

    def kill_all(self, grace_s: float = 10.0) -> int:
        """SIGTERM every process inside, then SIGKILL what is left; returns how many there were."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while self.pids() and time.monotonic() < deadline:
            reap_orphans()
            time.sleep(0.1)
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while self.pids() and time.monotonic() < deadline:
            reap_orphans()
            time.sleep(0.1)
        return len(pids)

    def delete(self) -> None:
        if not self.path.exists():
            return
        self.kill_all()
        run(["ip", "netns", "del", self.name], check=False)


def spawn(args: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a daemon in its own session, its output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the process group this benchmark started, wait, then SIGKILL it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)


def become_subreaper() -> None:
    """Orphans of our daemons become our children (PID 1 here does not reap them)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans() -> None:
    """Collect exited orphans that were reparented to us; never blocks."""
    for _ in range(10_000):
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def wait_quiet(threshold: float = 0.25, max_wait_s: float = 60.0) -> float:
    """Wait (bounded) until the machine's CPUs are mostly idle; returns the last busy fraction.

    The machine is shared: other work would otherwise land in one system's numbers only.
    """
    deadline = time.monotonic() + max_wait_s
    busy = 1.0
    while True:
        before = cpu_times()
        time.sleep(2.0)
        busy = busy_fraction(before, cpu_times())
        if busy < threshold or time.monotonic() > deadline:
            return round(busy, 3)


def wait_for_file(path: Path, timeout_s: float, poll_s: float = 0.002) -> str:
    """Poll until ``path`` exists and is not empty; returns its text."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        if text.strip():
            return text
        time.sleep(poll_s)
    raise TimeoutError(f"{path} did not appear within {timeout_s:.0f}s")
