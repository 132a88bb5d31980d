"""The hostile jobs run on the multi-host tests' racks of namespace hosts, and always with tasks
running as their users (``pool``), whatever the rest of the run does (tests/conftest.py): their
tasks use only Debian's /usr/bin/python3 or the image's python, which every uid can run."""

from __future__ import annotations

import pytest

from shoal.agent.task_users import MODE_VARIABLE
from tests.multihost.conftest import make_rack

__all__ = ["make_rack"]


@pytest.fixture(autouse=True)
def _tasks_run_as_their_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MODE_VARIABLE, "pool")
