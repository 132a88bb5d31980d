from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"


@pytest.fixture(scope="session")
def traces(shared_dir: Path) -> Path:
    return shared_dir / "traces"


@pytest.fixture
def write(tmp_path: Path):
    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return _write
