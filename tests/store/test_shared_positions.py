"""Queue positions on a server whose scheduler does not lead (server/shared_positions.py,
docs/postgresql.md "Several servers"): two servers on one PostgreSQL database; the leader's
positions reach the other's API, a paused old leader cannot overwrite a newer one's, and the
leader's own API keeps its own."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from shoal.server.app import create_app
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.positions import QueuePositions
from shoal.server.services.scheduler_lease import LeaseKeeper
from shoal.server.shared_positions import READ_EVERY_S, PositionPublisher
from shoal.store.models import PublishedPositionsRow
from tests.server.test_fencing import report, submit


def _api(ctx: ServerContext) -> TestClient:
    client = TestClient(create_app(ctx, run_scheduler=False))
    token = (ctx.settings.home / "admin.token").read_text().strip()
    client.headers["Authorization"] = f"Bearer {token}"
    return client


def _positions(api: TestClient, ids: list[str]) -> list[int | None]:
    return [api.get(f"/api/v1/jobs/{job_id}/pending-reason").json()["position"] for job_id in ids]


def test_a_follower_shows_the_leaders_queue_positions(
    servers: tuple[ServerContext, ServerContext],
) -> None:
    leader, follower = servers
    with _api(leader) as api_a, _api(follower) as api_b:
        report(api_a, leader.settings.home, ["n0"])  # 2 GPUs: one 2-GPU job at a time
        ids = [submit(api_a, f"big-{i}", gpu=2) for i in range(4)]
        leader.scheduler_lease = LeaseKeeper(leader)
        leader.position_publisher = PositionPublisher(leader.db)
        assert leader.scheduler_lease.hold() is not None
        assert run_cycle(leader, check_nodes=False) == 1  # the first placed, three wait
        assert _positions(api_a, ids[1:]) == [1, 2, 3]  # the leader's own
        deadline = time.monotonic() + 10 * READ_EVERY_S
        while _positions(api_b, ids[1:]) != [1, 2, 3]:
            assert time.monotonic() < deadline, _positions(api_b, ids)
            time.sleep(0.2)
        listed = {
            j["id"]: (j["pending"] or {}).get("position") for j in api_b.get("/api/v1/jobs").json()
        }
        assert [listed[i] for i in ids[1:]] == [1, 2, 3]


def test_a_stale_leader_cannot_overwrite_a_newer_leaders_positions(
    servers: tuple[ServerContext, ServerContext],
) -> None:
    leader, _ = servers
    newer, stale = PositionPublisher(leader.db), PositionPublisher(leader.db)
    newer.offer(QueuePositions(), token=5, now=100.0)
    stale.offer(QueuePositions(), token=4, now=200.0)  # a paused old leader, woken
    with leader.db.read() as session:
        row = session.get(PublishedPositionsRow, "queue")
        assert row is not None and (row.token, row.published_at) == (5, 100.0)
