"""A real OpenSSH server for tests: its own host key, authorized_keys, known_hosts and config in
a temporary directory, run as ``/usr/sbin/sshd -D -e -f CONFIG`` inside a namespace host of the
lab (tests/multihost/netns.py), listening on that host's address only."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.multihost.netns import Host, NetnsLab

SSHD = Path("/usr/sbin/sshd")
SSH_PORT = 2222


def sshd_missing() -> str | None:
    if not SSHD.exists():
        return "openssh-server is not installed (/usr/sbin/sshd): run `make system-deps`"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is not installed (openssh-client)"
    return None


@dataclass(frozen=True)
class SshdHost:
    host: Host
    port: int
    user: str
    key_file: Path  # the client's private key
    known_hosts: Path
    log: Path


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30
    )


def start_sshd(lab: NetnsLab, host: Host, root: Path, port: int = SSH_PORT) -> SshdHost:
    """Keys and config under ``root``; sshd started in ``host``'s namespace by the lab (so the
    lab's destroy ends it by its process group)."""
    root.mkdir(parents=True, exist_ok=True)
    host_key, client_key = root / "host_ed25519", root / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client_ed25519.pub").read_text())
    authorized.chmod(0o600)
    public = (root / "host_ed25519.pub").read_text().split()
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[{host.address}]:{port} {public[0]} {public[1]}\n")
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                f"ListenAddress {host.address}",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized}",
                f"PidFile {root / 'sshd.pid'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "Subsystem sftp internal-sftp",
                "LogLevel VERBOSE",
                "",
            ]
        )
    )
    # sshd's privilege-separation directory (the Debian service creates it at start).
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    log = root / "sshd.log"
    lab.spawn(host, [str(SSHD), "-D", "-e", "-f", str(config)], log)
    lab.wait_reachable(host.address, port)
    return SshdHost(host, port, getpass.getuser(), client_key, known_hosts, log)
