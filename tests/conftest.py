"""Shared test fixtures: where the verbatim compatibility samples live."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "compat").is_dir():
        pytest.skip(f"the shared compatibility samples are not beside the repository ({SHARED})")
    return SHARED
