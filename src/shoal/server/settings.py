"""Server settings: where state lives and the timings of the control loops."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def default_home() -> Path:
    """``$SHOAL_HOME``, else ``$XDG_DATA_HOME/shoal``, else ``~/.local/share/shoal``."""
    if os.environ.get("SHOAL_HOME"):
        return Path(os.environ["SHOAL_HOME"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "shoal"


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

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def code_dir(self) -> Path:
        return self.home / "code"
