"""Server settings: where state lives and the timings of the control loops."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shoal.paths import default_home

__all__ = ["ServerSettings", "default_home"]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    home: Path
    host: str = "127.0.0.1"
    port: int = 8476
    database_url: str | None = None
    scheduler_interval_s: float = 2.0  # fallback wake-up; events wake the loop at once
    node_timeout_s: float = 30.0  # an agent silent this long loses its nodes
    kill_grace_s: float = 10.0  # SIGTERM, then SIGKILL after this long
    max_upload_bytes: int = 100 * 1024 * 1024
    # A server on the network (`shoal server start`): HTTPS only with HOME/pki, agents join with
    # tokens and call with their node certificates. False: local mode, plain HTTP on loopback.
    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def code_dir(self) -> Path:
        return self.home / "code"
