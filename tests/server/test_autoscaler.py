"""The server's autoscaler (server/autoscaling; docs/cloud.md) over a real store and API, with a
provider kept in memory that refuses as a cloud does: what it launches for a gang, offer
failover on capacity, offer blocks on quota, the join timeout, what a restart finds, idle
machines drained and terminated. Machines that really boot and join: tests/cloud."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shoal.cloud.pools import parse_cloud
from shoal.cloud.provider import (
    Capability,
    ErrorKind,
    Instance,
    InstanceState,
    LaunchRequest,
    Offer,
    ProviderError,
    ProviderEvent,
)
from shoal.server.app import create_app, prepare
from shoal.server.autoscaling.autoscaler import Autoscaler
from shoal.server.ca import PkiFiles, create_ca, issue_server_certificate, wanted_hosts
from shoal.server.context import ServerContext
from shoal.server.loop import run_cycle
from shoal.server.settings import ServerSettings
from shoal.store.models import CloudInstanceRow, CloudOfferBlockRow, JoinTokenRow, Node, Task

CLOUD = """
cluster: t
providers:
  mem: {type: local, endpoint: "http://127.0.0.1:9"}
pools:
  - name: cpu
    provider: mem
    instance_type: small
    max: 3
    idle_timeout: 60
    join_timeout: 120
    install: preinstalled
"""
GANG = """
version: 1
name: gang
roles:
  worker:
    instances: 2
    resources: {cpu: 1.5, memory: 1Gi}
    command: "true"
"""


@dataclass
class MemoryProvider:
    """A cloud in a dict: offers in two zones, launches refused as told."""

    name: str = "mem"
    capabilities: frozenset[Capability] = frozenset()
    refuse: dict[str, ErrorKind] = field(default_factory=dict)  # zone -> refusal
    machines: dict[str, Instance] = field(default_factory=dict)
    launches: list[LaunchRequest] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    events: list[ProviderEvent] = field(default_factory=list)

    def offers(self, instance_type: str | None, zones: tuple[str, ...], spot: bool) -> list[Offer]:
        return [
            Offer("mem", "r", "a", "small", 0.10, 2000, 2048),
            Offer("mem", "r", "b", "small", 0.12, 2000, 2048),
        ]

    def launch(self, request: LaunchRequest) -> Instance:
        self.launches.append(request)
        kind = self.refuse.get(request.offer.zone)
        if kind is not None:
            raise ProviderError(kind, f"{kind.value} in {request.offer.zone}")
        instance = Instance(
            f"vm-{request.request_id}",
            request.request_id,
            request.cluster,
            request.pool,
            request.name,
            InstanceState.PENDING,
            request.offer.key,
        )
        self.machines[request.request_id] = instance
        return instance

    def terminate(self, request_id: str) -> None:
        self.terminated.append(request_id)
        self.machines.pop(request_id, None)

    def list_instances(self, cluster: str) -> list[Instance]:
        return [m for m in self.machines.values() if m.cluster == cluster]

    def poll_errors(self) -> list[ProviderEvent]:
        events, self.events = self.events, []
        return events

    def close(self) -> None:
        pass


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ServerContext]:
    home = tmp_path / "server"
    files = PkiFiles.of(home)
    create_ca(files)
    issue_server_certificate(files, wanted_hosts(["127.0.0.1"]))
    context = prepare(ServerSettings(home=home, tls=True, scheduler="thread"))
    context.clock = Clock()
    yield context
    context.db.dispose()


@pytest.fixture
def api(ctx: ServerContext) -> Iterator[TestClient]:
    token = (ctx.settings.home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


@pytest.fixture
def provider() -> MemoryProvider:
    return MemoryProvider()


@pytest.fixture
def scaler(ctx: ServerContext, provider: MemoryProvider, tmp_path: Path) -> Autoscaler:
    config = parse_cloud(CLOUD, tmp_path / "cloud.yaml")
    found = Autoscaler(ctx, config, {"mem": provider})
    ctx.autoscaler = found
    return found


def submit_gang(api: TestClient, ctx: ServerContext) -> str:
    answer = api.post("/api/v1/jobs", json={"spec": GANG})
    assert answer.status_code == 201, answer.text
    run_cycle(ctx)  # the job now waits with a reason: no schedulable node
    return str(answer.json()[0]["id"])


def rows(ctx: ServerContext) -> list[CloudInstanceRow]:
    with ctx.db.read() as session:
        return list(session.scalars(select(CloudInstanceRow)))


def join(ctx: ServerContext, *names: str) -> None:
    """The machines' nodes register (what their agents' first reports do after joining)."""
    with ctx.db.write() as session:
        for name in names:
            session.add(
                Node(
                    name=name,
                    agent_id=name,
                    address="198.18.0.9",
                    cpu_millis=2000,
                    memory_mib=2048,
                    gpu_indices=[],
                    port_low=20000,
                    port_high=21000,
                    last_seen=ctx.clock(),
                    registered_at=ctx.clock(),
                )
            )


def test_a_gang_of_two_grows_the_pool_by_two_once(api, ctx, scaler, provider) -> None:
    job = submit_gang(api, ctx)
    scaler.run_pass()
    assert len(provider.launches) == 2
    assert {r.offer.zone for r in provider.launches} == {"a"}  # the cheaper zone
    launched = rows(ctx)
    assert [r.phase for r in launched] == ["launching", "launching"]
    assert all(r.offer_key == "r/a/small" and r.price_per_hour == 0.10 for r in launched)
    with ctx.db.read() as session:  # one token each, one use, expiring with the join timeout
        tokens = list(session.scalars(select(JoinTokenRow)))
    assert [t.max_uses for t in tokens] == [1, 1]
    assert all(t.expires_at == ctx.clock() + 120 for t in tokens)
    assert all(str(t.id) in r.user_data for t, r in zip(tokens, provider.launches, strict=True))
    ctx.clock.now += 30
    scaler.run_pass()  # the launching machines count: nothing more
    assert len(provider.launches) == 2
    why = api.get(f"/api/v1/jobs/{job}/pending-reason").json()
    assert why["pools"] == ["waiting for 2 nodes of pool cpu (launching, 30 s)"]
    pools = api.get("/api/v1/pools").json()
    assert pools[0]["size"] == 2 and pools[0]["pricePerHour"] == 0.10


def test_capacity_falls_over_to_the_next_offer_and_quota_blocks_one(
    api, ctx, scaler, provider
) -> None:
    provider.refuse["a"] = ErrorKind.CAPACITY
    submit_gang(api, ctx)
    scaler.run_pass()
    started = [r for r in rows(ctx) if r.ended_at is None]
    assert [r.offer_key for r in started] == ["r/b/small", "r/b/small"]
    assert sorted(r.offer.zone for r in provider.launches) == ["a", "a", "b", "b"]
    with ctx.db.read() as session:
        assert session.scalar(select(CloudOfferBlockRow)) is None  # capacity blocks nothing

    provider.refuse = {"a": ErrorKind.QUOTA}
    provider.launches.clear()
    api.put("/api/v1/pools/cpu/target", json={"target": 3}).raise_for_status()
    scaler.run_pass()
    with ctx.db.read() as session:
        block = session.scalar(select(CloudOfferBlockRow))
    assert block is not None and block.offer == "mem:r/a/small" and "quota" in block.reason
    assert [r.offer.zone for r in provider.launches] == ["a", "b"]
    provider.launches.clear()
    api.put("/api/v1/pools/cpu/target", json={"target": 3}).raise_for_status()
    scaler.run_pass()  # nothing missing now; and a new launch would skip the blocked offer
    assert provider.launches == []
    events = api.get(f"/api/v1/nodes/{rows(ctx)[-1].node}/events").json()
    assert any(e["kind"] == "cloud.launched" for e in events)


def test_a_machine_that_never_joins_is_terminated_and_its_offer_blocked(
    api, ctx, scaler, provider
) -> None:
    submit_gang(api, ctx)
    scaler.run_pass()
    ctx.clock.now += 121
    scaler.run_pass()
    assert len(provider.terminated) == 2
    assert all(r.phase == "terminating" and r.removal_cause == "join-timeout" for r in rows(ctx))
    with ctx.db.read() as session:
        assert session.get(CloudOfferBlockRow, "mem:r/a/small") is not None
    scaler.reconciled_at = float("-inf")
    scaler.run_pass()  # gone from the list: ended; the next launch goes to zone b
    assert sum(1 for r in rows(ctx) if r.ended_at is not None) == 2
    assert {r.offer.zone for r in provider.launches[2:]} == {"b"}


def test_after_a_restart_no_machine_is_left_that_the_pool_does_not_know(
    api, ctx, scaler, provider
) -> None:
    stray = LaunchRequest("stray", "t", "cpu", "cpu-stray", provider.offers(None, (), False)[0], "")
    provider.launch(stray)  # the provider has it; no row names it
    with ctx.db.write() as session:  # written, then the server died before the provider answered
        session.add(
            CloudInstanceRow(
                request_id="unconfirmed",
                pool="cpu",
                provider="mem",
                node="cpu-unconfirmed",
                phase="launching",
                launched_at=ctx.clock(),
            )
        )
    scaler.run_pass()
    assert set(provider.terminated) == {"stray", "unconfirmed"}
    assert provider.machines == {}
    (ended,) = rows(ctx)
    assert ended.ended_at is not None


def test_idle_machines_are_drained_then_terminated(api, ctx, scaler, provider) -> None:
    job = submit_gang(api, ctx)
    scaler.run_pass()
    join(ctx, *(r.node for r in rows(ctx)))
    scaler.run_pass()
    assert {r.phase for r in rows(ctx)} == {"joined"}
    ctx.clock.now += 3600
    scaler.run_pass()  # the waiting gang counts on both: neither is idle
    assert provider.terminated == [] and all(r.idle_since is None for r in rows(ctx))
    api.post(f"/api/v1/jobs/{job}/stop").raise_for_status()
    scaler.run_pass()  # idle from now
    assert all(r.idle_since == ctx.clock() for r in rows(ctx))
    ctx.clock.now += 59
    scaler.run_pass()
    assert {r.phase for r in rows(ctx)} == {"joined"}
    ctx.clock.now += 2
    scaler.run_pass()  # idle past the timeout: drained
    assert {r.phase for r in rows(ctx)} == {"draining"}
    nodes = {n["name"]: n for n in api.get("/api/v1/nodes").json()}
    assert all(nodes[r.node]["schedulable"] is False for r in rows(ctx))
    scaler.run_pass()  # empty: terminated, nodes removed
    assert sorted(provider.terminated) == sorted(r.request_id for r in rows(ctx))
    assert not {n["name"] for n in api.get("/api/v1/nodes").json()} & {r.node for r in rows(ctx)}
    scaler.reconciled_at = float("-inf")
    scaler.run_pass()
    assert all(r.ended_at is not None for r in rows(ctx))
    pool = api.get("/api/v1/pools").json()[0]
    assert pool["size"] == 0 and pool["nodeHours"] > 1.9 and pool["cost"] > 0.19
    (node,) = [r.node for r in rows(ctx)][:1]
    kinds = [e["kind"] for e in api.get(f"/api/v1/nodes/{node}/events").json()]
    for kind in ("cloud.requested", "cloud.launched", "cloud.joined", "cloud.draining"):
        assert kind in kinds
    assert kinds[-1] == "cloud.ended"


def test_scale_refuses_clearly(api, ctx, scaler) -> None:
    answer = api.put("/api/v1/pools/gpu/target", json={"target": 1})
    assert answer.status_code == 404 and "pools: cpu" in answer.json()["message"]
    answer = api.put("/api/v1/pools/cpu/target", json={"target": 9})
    assert answer.status_code == 400 and "max of 3" in answer.json()["message"]


def test_a_server_without_pools_says_how_to_get_some(api, ctx) -> None:
    answer = api.get("/api/v1/pools")
    assert answer.status_code == 409 and "--cloud FILE" in answer.json()["message"]


def test_usage_charges_each_task_its_share_of_its_pool_machine(api, ctx, scaler, provider) -> None:
    job = submit_gang(api, ctx)
    scaler.run_pass()
    join(ctx, *(r.node for r in rows(ctx)))
    assert run_cycle(ctx) == 1  # the gang is placed on the two new machines
    start = ctx.clock()
    with ctx.db.write() as session:  # as the agent reports them: each ran an hour
        for task in session.scalars(select(Task).where(Task.job_id == job)):
            task.started_at, task.finished_at = start, start + 3600
    usage = api.get("/api/v1/usage", params={"by": "vc"}).json()["rows"]
    # each task holds 1.5 of 2 cpus and 1 of 2 GiB: three quarters of its machine for an hour
    assert usage[0]["poolNodeHours"] == pytest.approx(1.5)
    assert usage[0]["poolCost"] == pytest.approx(0.15)


def test_machines_of_a_pool_that_cannot_grow_or_left_the_file_still_go(
    api, ctx, scaler, provider, tmp_path
) -> None:
    submit_gang(api, ctx)
    scaler.run_pass()
    join(ctx, *(r.node for r in rows(ctx)))
    api.post("/api/v1/jobs/1/stop").raise_for_status()
    with ctx.db.write() as session:  # every offer of the pool blocked: it cannot grow now
        for zone in ("a", "b"):
            session.add(CloudOfferBlockRow(offer=f"mem:r/{zone}/small", until=2e9, reason="quota"))
    scaler.run_pass()
    ctx.clock.now += 61
    scaler.run_pass()
    assert {r.phase for r in rows(ctx)} == {"draining"}  # idle: drained all the same
    assert api.get("/api/v1/pools").json()[0]["pricePerHour"] is None

    gone = CLOUD.replace("name: cpu", "name: gpu")  # the pool leaves the cloud file
    scaler.config = parse_cloud(gone, tmp_path / "cloud.yaml")
    scaler.run_pass()
    assert len(provider.terminated) == 2 and {r.phase for r in rows(ctx)} == {"terminating"}


def test_a_machine_whose_node_an_admin_removed_is_terminated(api, ctx, scaler, provider) -> None:
    submit_gang(api, ctx)
    scaler.run_pass()
    join(ctx, *(r.node for r in rows(ctx)))
    scaler.run_pass()
    gone = rows(ctx)[0]
    assert api.delete(f"/api/v1/nodes/{gone.node}").status_code == 200
    scaler.run_pass()
    assert provider.terminated == [gone.request_id]
    events = [e["message"] for e in api.get(f"/api/v1/nodes/{gone.node}/events").json()]
    assert "its node was removed from the cluster" in events
