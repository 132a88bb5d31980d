"""A shoal server in-process for the fuzzers, the callers they fuzz as, and the bounds they run in.

``SHOAL_FUZZ_EXAMPLES`` (default 4) sets the examples per operation and mode of the API fuzzer
and scales the job-file fuzzers; ``make fuzz`` runs them with many more (docs/fuzzing.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shoal.server.app import create_app, prepare
from shoal.server.context import ServerContext
from shoal.server.services.users import add_token
from shoal.server.settings import ServerSettings
from shoal.store.models import User

EXAMPLES = int(os.environ.get("SHOAL_FUZZ_EXAMPLES", "4"))
# The default run tries the same cases every time; a run that sets the examples (`make fuzz`)
# draws new ones.
DERANDOMIZE = "SHOAL_FUZZ_EXAMPLES" not in os.environ
ADMIN = "admin"
PLAIN_USER = "fuzzer"


@dataclass
class Caller:
    """Who the fuzzer calls as. A case may revoke the caller's own token (logout, DELETE of a
    token or a session): ``renew`` mints another in the store, so later cases are not all 401."""

    ctx: ServerContext
    name: str
    token: str
    renewed: int = field(default=0)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def renew(self) -> None:
        with self.ctx.db.write() as session:
            user = session.scalar(select(User).where(User.name == self.name))
            if user is None:  # deleted by a case: the fuzzer goes on as a user of that name
                user = User(name=self.name, is_admin=self.name == ADMIN, created_at=0.0)
                session.add(user)
                session.flush()
            _, self.token = add_token(session, user, "user", "fuzz", self.ctx.clock(), None)
        self.renewed += 1


@dataclass
class FuzzServer:
    ctx: ServerContext
    app: object
    home: Path
    admin: Caller

    def plain_user(self) -> Caller:
        """A user who is no admin, made as an admin makes one: POST /api/v1/users."""
        client = TestClient(self.app)  # type: ignore[arg-type]  # no `with`: no second lifespan
        response = client.post(
            "/api/v1/users", json={"name": PLAIN_USER}, headers=self.admin.headers()
        )
        assert response.status_code == 201, response.text
        return Caller(self.ctx, PLAIN_USER, str(response.json()["token"]))


@pytest.fixture
def fuzz_server(tmp_path: Path) -> Iterator[FuzzServer]:
    """A fresh server per test (a fuzzer may delete users, VCs and tokens); its lifespan runs the
    scheduler in a thread and is ended by the test that used it."""
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home, scheduler="thread"))
    app = create_app(ctx)
    token = (home / "admin.token").read_text().strip()
    yield FuzzServer(ctx, app, home, Caller(ctx, ADMIN, token))
