"""The ``pai`` fixture: a server (scheduler in a thread) whose every ``/api/v2`` answer must conform
to OpenPAI's description; checked when the test ends, every violation listed with its path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from tests.server.openpai.contract import violations


@pytest.fixture
def pai_home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def pai(pai_home: Path) -> Iterator[TestClient]:
    """A server whose every ``/api/v2`` answer must conform (checked when the test ends); the
    admin's token is sent unless a request sets its own ``Authorization``."""
    home = pai_home
    ctx = prepare(ServerSettings(home=home, scheduler="thread"))
    seen: list[httpx.Response] = []

    def keep(response: httpx.Response) -> None:
        if response.request.url.path.startswith("/api/v2/"):
            response.read()
            seen.append(response)

    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        client.event_hooks["response"].append(keep)
        yield client
    assert seen, "the test made no /api/v2 call"
    found = [v for response in seen for v in violations(response)]
    assert not found, "\n\n".join(found)
