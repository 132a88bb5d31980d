"""A local machine is a Linux network namespace with one veth on the cloud's bridge, and the
user data run inside it with bash, in a session of its own (``nsenter --net``: the network
namespace changes, the file systems do not; ``ip netns exec`` would remount /sys and hide the
cgroup mounts the agent needs, see docs/cluster.md).

Processes are ended by their process group, after checking that the group's leader is still
the process that was started (its start time); then whatever ``ip netns pids`` still lists in
the namespace (it is the machine's own) is killed, and the namespace is deleted with its veth.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
# What cloud-init gives user data: root, a plain PATH, no terminal.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class MachineError(Exception):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=20)
    if check and done.returncode != 0:
        raise MachineError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def bridge_usable(bridge_netns: str, bridge: str) -> str | None:
    """None if ``bridge`` exists in ``bridge_netns``, else why not."""
    if not netns_exists(bridge_netns):
        return f"no network namespace {bridge_netns!r} (give the bridge's with --bridge-netns)"
    if _ip("-n", bridge_netns, "link", "show", bridge, check=False).returncode != 0:
        return f"no link {bridge!r} in namespace {bridge_netns} (give the bridge with --bridge)"
    return None


def create_machine(
    netns: str, veth: str, bridge_netns: str, bridge: str, address: str, prefix: int
) -> None:
    """The namespace, its ``eth0`` with ``address/prefix``, its peer ``veth`` on the bridge."""
    _ip("netns", "add", netns)
    try:
        _ip("-n", netns, "link", "set", "lo", "up")
        # made inside the machine, its peer moved to the bridge's namespace: nothing in ours
        _ip("-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", veth)
        _ip("-n", netns, "link", "set", veth, "netns", bridge_netns)
        _ip("-n", bridge_netns, "link", "set", veth, "master", bridge, "up")
        _ip("-n", netns, "addr", "add", f"{address}/{prefix}", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
    except MachineError:
        delete_machine(netns, veth, bridge_netns)
        raise


def delete_machine(netns: str, veth: str, bridge_netns: str) -> None:
    """Delete the namespace (its veth pair goes with it); idempotent."""
    if netns_exists(netns):
        _ip("netns", "del", netns, check=False)
    # the pair is gone with its namespace; a half-made one may be left on the bridge's side
    if netns_exists(bridge_netns):
        _ip("-n", bridge_netns, "link", "del", veth, check=False)


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def alive(pid: int, started: str | None) -> bool:
    """``pid`` still runs (not a zombie) and is the process that started at ``started``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and (started is None or fields[19] == started)


@dataclass
class Boot:
    process: subprocess.Popen[bytes]
    pid: int
    started: str | None


def run_user_data(netns: str, script: Path, console: Path, env: dict[str, str], cwd: Path) -> Boot:
    """Run ``script`` with bash inside ``netns``, output to ``console``, in its own session."""
    console.parent.mkdir(parents=True, exist_ok=True)
    with open(console, "ab") as out:
        process = subprocess.Popen(
            ["nsenter", f"--net={NETNS_DIR / netns}", "bash", str(script)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={"PATH": BASE_PATH, "LANG": "C.UTF-8", **env},
            cwd=cwd,
        )
    return Boot(process, process.pid, start_time(process.pid))


def netns_pids(netns: str) -> list[int]:
    if not netns_exists(netns):
        return []
    listed = _ip("netns", "pids", netns, check=False).stdout.split()
    return [int(p) for p in listed if p.isdigit()]


def stop_machine_processes(
    netns: str,
    pid: int | None,
    started: str | None,
    grace_s: float,
    process: subprocess.Popen[bytes] | None = None,
) -> None:
    """SIGTERM the user data's process group, wait up to ``grace_s``, SIGKILL it, then kill
    whatever still runs in the namespace."""
    if pid is not None:
        _signal_group(pid, started, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_running(pid, started, process):
            time.sleep(0.05)
        _signal_group(pid, started, signal.SIGKILL)
    for _ in range(50):  # the namespace's own processes: tasks that left the group included
        remaining = netns_pids(netns)
        if not remaining:
            break
        for other in remaining:
            with contextlib.suppress(ProcessLookupError):
                os.kill(other, signal.SIGKILL)
        time.sleep(0.1)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def _signal_group(pid: int, started: str | None, sig: int) -> None:
    """Signal the group ``pid`` leads, unless ``pid`` is now another process (a reused pid)."""
    if start_time(pid) not in (None, started):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _group_running(pid: int, started: str | None, process: subprocess.Popen[bytes] | None) -> bool:
    if process is not None and process.poll() is None:
        return True
    if alive(pid, started):
        return True
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
