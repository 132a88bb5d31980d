"""``shoal user ...`` and ``shoal token ...`` as a user reads them, against a stand-in client."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.cli import user_commands
from tests.cli.test_job_cli import shoal


class FakeAccounts:
    def users(self) -> list[dict[str, Any]]:
        return [
            {"name": "admin", "admin": True, "groups": []},
            {"name": "alice", "admin": False, "groups": ["vision", "rl"]},
        ]


def test_user_list_has_a_header_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(user_commands, "client", FakeAccounts)
    result = shoal("user", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ROLE", "GROUPS"]
    assert lines[1].split() == ["admin", "admin", "-"]
    assert lines[2].split() == ["alice", "user", "vision,rl"]
