"""Where shoal keeps things on this machine; dependency-free so the CLI starts fast."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT = 8476  # what `shoal up` tries first; taken → any free port


def default_home() -> Path:
    """``$SHOAL_HOME``, else ``$XDG_DATA_HOME/shoal``, else ``~/.local/share/shoal``."""
    if os.environ.get("SHOAL_HOME"):
        return Path(os.environ["SHOAL_HOME"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "shoal"


def default_config_path() -> Path:
    """``$SHOAL_CONFIG``, else ``$XDG_CONFIG_HOME/shoal/config.yaml``, else
    ``~/.config/shoal/config.yaml``: the CLI's contexts (server URL and token per context)."""
    if os.environ.get("SHOAL_CONFIG"):
        return Path(os.environ["SHOAL_CONFIG"]).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "shoal" / "config.yaml"


def write_secret_file(path: Path, value: str) -> None:
    """Write ``value`` to a file only its owner can read (mode 0600 from the start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value if value.endswith("\n") else value + "\n")
    os.chmod(path, 0o600)
