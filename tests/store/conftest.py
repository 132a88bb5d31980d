"""The store's tests use the throwaway PostgreSQL cluster's fixtures (tests/postgresql.py), and
none of the user's shoal settings (its CLI tests run the CLI in this process)."""

import os
from pathlib import Path

import pytest

from tests.envs import is_user_setting
from tests.postgresql import pg_cluster, pg_store  # noqa: F401 - fixtures


@pytest.fixture(autouse=True)
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if is_user_setting(k)]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SHOAL_CONFIG", str(tmp_path / "config.yaml"))
