"""What a host installs: shoal's wheel, built from this checkout, and the wheelhouse of its
runtime dependencies, built by ``make setup`` while the package registry was reachable.

Nothing here reaches the network: the wheel is built with ``--no-index`` and its build backend
(setuptools) comes from the wheelhouse too.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import shoal

WHEELHOUSE_HINT = "run `make wheelhouse` in the shoal checkout (needs the package registry once)"
# Wheels the hosts do not need: shoal's own (sent separately) and its build backend.
NOT_FOR_HOSTS = ("shoal-", "setuptools-")
REPRODUCIBLE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip entry can carry


class WheelError(Exception):
    pass


@dataclass(frozen=True)
class Payload:
    shoal_wheel: Path
    dependencies: tuple[Path, ...]
    sha256: str  # of the shoal wheel: a host with this one installed is up to date

    @property
    def files(self) -> list[Path]:
        return [*self.dependencies, self.shoal_wheel]


def default_wheelhouse() -> Path:
    """``$SHOAL_WHEELHOUSE``, else ``wheelhouse/`` in the environment shoal runs from."""
    configured = os.environ.get("SHOAL_WHEELHOUSE")
    return Path(configured) if configured else Path(sys.prefix) / "wheelhouse"


def checkout_root() -> Path | None:
    """The source checkout this shoal runs from (an editable install), or None."""
    root = Path(shoal.__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "shoal"' in project.read_text(encoding="utf-8"):
        return root
    return None


def build_payload(wheelhouse: Path, out_dir: Path) -> Payload:
    if not wheelhouse.is_dir():
        raise WheelError(f"no wheelhouse at {wheelhouse}: {WHEELHOUSE_HINT}")
    dependencies = tuple(
        sorted(p for p in wheelhouse.glob("*.whl") if not p.name.startswith(NOT_FOR_HOSTS))
    )
    if not dependencies:
        raise WheelError(f"the wheelhouse {wheelhouse} holds no wheels: {WHEELHOUSE_HINT}")
    root = checkout_root()
    if root is not None:
        wheel = _build_from_checkout(root, wheelhouse, out_dir)
    else:
        built = sorted(wheelhouse.glob("shoal-*.whl"))
        if not built:
            raise WheelError(
                f"shoal is not run from a checkout and {wheelhouse} has no shoal wheel"
            )
        wheel = built[-1]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return Payload(wheel, dependencies, digest)


def _build_from_checkout(root: Path, wheelhouse: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("shoal-*.whl"):
        old.unlink()
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-index",
        "--find-links",
        str(wheelhouse),
        "--wheel-dir",
        str(out_dir),
        str(root),
    ]
    # Fixed zip timestamps: the same sources give the same wheel, so its hash says whether a
    # host has this shoal installed already.
    env = os.environ | {"SOURCE_DATE_EPOCH": REPRODUCIBLE_EPOCH}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=env
    )
    wheels = sorted(out_dir.glob("shoal-*.whl"))
    if done.returncode != 0 or not wheels:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise WheelError(f"building shoal's wheel from {root} failed:\n{tail}")
    return wheels[-1]
