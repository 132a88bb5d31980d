"""Test hosts as Linux network namespaces: a bridge in a "switch" namespace of its own, one veth
pair per host, and one more veth from the root namespace (where pytest runs) to the bridge.

Addresses come from 198.18.0.0/15 only (192.0.2.0/24 is this machine's uplink; 10.x is forbidden):
each lab takes a free /24 of 198.18.0.0/15, hosts get .1, .2, ... and the root namespace .254.
Before the root namespace talks to a host, :meth:`NetnsLab.require_route` checks that the kernel
routes the address over the lab's veth (never out of the default route).

Processes are started in a host's namespace with ``nsenter --net`` (``ip netns exec`` remounts
/sys, hiding the cgroup mounts), each in a session of its own, and are ended by their process group
only. Tearing down the lab deletes its namespaces, and with them every veth.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

NET_PREFIX = "198.18."
# Third octets a lab may take (198.18.0.0/15 = 198.18.0.0-198.19.255.255); 198.18.1.x and
# 198.18.2.x are bench/peers', 198.18.88.x podman's default subnet here.
FIRST_OCTET, LAST_OCTET = 20, 250


class NetnsUnavailable(RuntimeError):
    """The kernel or this user cannot create network namespaces here."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def namespaces_usable() -> str | None:
    """None if namespaces can be made here, else the reason why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "iproute2 (ip) and util-linux (nsenter) are needed"
    probe = f"shp{os.getpid() % 100000}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"the kernel refused a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _taken_octets() -> set[int]:
    """Third octets of 198.18.x.0/24 that the root namespace already routes somewhere."""
    routes = _ip("-4", "route", "show").stdout.split()
    taken = set()
    for word in routes:
        if word.startswith(NET_PREFIX):
            with contextlib.suppress(ValueError, IndexError):
                taken.add(int(word.split(".")[2]))
    return taken


@dataclass
class Host:
    name: str  # the namespace
    address: str
    veth: str  # this host's end inside the switch namespace

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.name}"


@dataclass
class NetnsLab:
    """A bridge, ``count`` hosts and the root namespace on one /24 of 198.18.0.0/15."""

    tag: str
    octet: int
    hosts: list[Host] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    @property
    def root_veth(self) -> str:
        return f"{self.tag}-r"

    @property
    def root_address(self) -> str:
        return f"{NET_PREFIX}{self.octet}.254"

    @classmethod
    def create(cls, count: int, tag: str | None = None) -> NetnsLab:
        reason = namespaces_usable()
        if reason is not None:
            raise NetnsUnavailable(reason)
        tag = tag or f"sl{os.getpid() % 100000}"
        taken = _taken_octets()
        start = FIRST_OCTET + os.getpid() % (LAST_OCTET - FIRST_OCTET)
        span = range(FIRST_OCTET, LAST_OCTET)
        octet = next(
            o for o in (*range(start, LAST_OCTET), *span) if o not in taken and o not in (88,)
        )
        lab = cls(tag, octet)
        try:
            lab._build(count)
        except BaseException:
            lab.destroy()
            raise
        return lab

    def _build(self, count: int) -> None:
        sw = self.switch
        _ip("netns", "add", sw)
        _ip("-n", sw, "link", "set", "lo", "up")
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        for i in range(1, count + 1):
            host = Host(f"{self.tag}-h{i}", f"{NET_PREFIX}{self.octet}.{i}", f"v{i}")
            _ip("netns", "add", host.name)
            self.hosts.append(host)
            # created inside the host, its peer moved to the switch: no name in the root namespace
            _ip("-n", host.name, "link", "add", "eth0", "type", "veth", "peer", "name", host.veth)
            _ip("-n", host.name, "link", "set", host.veth, "netns", sw)
            _ip("-n", sw, "link", "set", host.veth, "master", "br0", "up")
            _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.name, "link", "set", "eth0", "up")
            _ip("-n", host.name, "link", "set", "lo", "up")
        _ip("link", "add", self.root_veth, "type", "veth", "peer", "name", "vroot", "netns", sw)
        _ip("-n", sw, "link", "set", "vroot", "master", "br0", "up")
        _ip("addr", "add", f"{self.root_address}/24", "dev", self.root_veth)
        _ip("link", "set", self.root_veth, "up")

    # ---- using it ----

    def host(self, index: int) -> Host:
        """Host ``index`` counted from 1."""
        return self.hosts[index - 1]

    def require_route(self, address: str) -> None:
        """Refuse to connect unless the root namespace routes ``address`` over this lab's veth."""
        route = _ip("-4", "route", "get", address).stdout
        if f"dev {self.root_veth}" not in route:
            raise AssertionError(f"no route to {address} over {self.root_veth}: {route.strip()}")

    def wait_reachable(self, address: str, port: int, timeout_s: float = 30.0) -> None:
        """Wait until a TCP connection from the root namespace to ``address:port`` succeeds."""
        self.require_route(address)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                sock.settimeout(1.0)
                if sock.connect_ex((address, port)) == 0:
                    return
            time.sleep(0.1)
        raise AssertionError(f"{address}:{port} did not answer within {timeout_s:.0f}s")

    def command(self, host: Host, args: Sequence[str]) -> list[str]:
        return ["nsenter", f"--net={host.netns_path}", *args]

    def run(
        self,
        host: Host,
        args: Sequence[str],
        timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command to completion inside ``host``'s namespace (its exit code not checked)."""
        return subprocess.run(
            self.command(host, args),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )

    def spawn(
        self, host: Host, args: Sequence[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start a long-lived process inside ``host``'s namespace, in a session of its own."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                self.command(host, args),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        self.procs.append(proc)
        return proc

    def cut(self, host: Host) -> None:
        """Cut ``host``'s link (its end of the wire goes down); its processes keep running."""
        _ip("-n", host.name, "link", "set", "eth0", "down")

    def heal(self, host: Host) -> None:
        _ip("-n", host.name, "link", "set", "eth0", "up")

    # ---- ending it ----

    def stop(
        self, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, wait_s: float = 15.0
    ) -> None:
        """Signal ``proc``'s process group, wait, then SIGKILL the group."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def pids(self, host: Host) -> list[int]:
        """Every process in ``host``'s namespace: all of them were started by this lab (tasks an
        agent started included), since the namespace is the lab's own."""
        listed = _ip("netns", "pids", host.name, check=False).stdout.split()
        return [int(p) for p in listed if p.isdigit()]

    def destroy(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc, wait_s=10.0)
        for host in self.hosts:  # what they left behind (e.g. tasks of a SIGKILLed agent)
            for pid in self.pids(host):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for host in self.hosts:
            _ip("netns", "del", host.name, check=False)
        _ip("netns", "del", self.switch, check=False)  # takes vroot and so the root veth along
        _ip("link", "del", self.root_veth, check=False)
