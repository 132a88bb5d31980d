"""``shoal cluster create|status|delete`` as use cases: the CLI parses and prints, these do.

Hosts are handled concurrently (at most ``PARALLEL_HOSTS`` at once); a failing host does not stop
the others. Progress goes through ``say`` as one line per step and host.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from shoal.bootstrap.clusterfile import Cluster, HostPlan, missing_local_files
from shoal.bootstrap.hosts import HostOutcome, HostStatus, create_host, delete_host, status_host
from shoal.bootstrap.server import LocalServer, ServerProblem
from shoal.bootstrap.wheels import build_payload, default_wheelhouse
from shoal.spec.errors import SpecError

PARALLEL_HOSTS = 8
Said = Callable[[str], None]
T = TypeVar("T")


def server_of(cluster: Cluster) -> LocalServer:
    return LocalServer(cluster.server_home, cluster.server_address, cluster.server_port)


def _host_say(say: Said) -> Callable[[HostPlan, str], None]:
    return lambda host, text: say(f"[{host.name} {host.address}] {text}")


async def _each_host(cluster: Cluster, work: Callable[[HostPlan], Awaitable[T]]) -> list[T]:
    gate = asyncio.Semaphore(PARALLEL_HOSTS)

    async def one(host: HostPlan) -> T:
        async with gate:
            return await work(host)

    return list(await asyncio.gather(*(one(host) for host in cluster.hosts)))


def ensure_server(server: LocalServer, say: Said) -> None:
    if not server.initialised():
        say(f"server: initialising {server.home} for {server.address}")
        server.init()
    if server.answering():
        say(f"server: answering on {server.address}:{server.port}")
        return
    server.home.mkdir(parents=True, exist_ok=True)
    pid = server.start()
    say(f"server: started on https://{server.address}:{server.port} (pid {pid}, log {server.log})")


def create_cluster(
    cluster: Cluster, say: Said, wheelhouse: Path | None = None
) -> list[HostOutcome]:
    """Raises SpecError (local files missing), WheelError or ServerProblem before any host."""
    missing = missing_local_files(cluster)
    if missing:
        raise SpecError(missing)
    server = server_of(cluster)
    with tempfile.TemporaryDirectory(prefix="shoal-wheel-") as out:
        payload = build_payload(wheelhouse or default_wheelhouse(), Path(out))
        say(f"wheels: {payload.shoal_wheel.name} and {len(payload.dependencies)} dependencies")
        ensure_server(server, say)
        hosts_say = _host_say(say)
        return asyncio.run(
            _each_host(cluster, lambda host: create_host(cluster, host, payload, server, hosts_say))
        )


def cluster_status(cluster: Cluster) -> tuple[str, list[HostStatus]]:
    """The server's state in words, and each host's."""
    server = server_of(cluster)
    nodes: dict[str, str] | str
    if not server.answering():
        where = f"{server.address}:{server.port}"
        server_words = f"not answering on {where}"
        nodes = "unknown (server down)"
    else:
        pid = server.started_pid()
        started = f", started by cluster create (pid {pid})" if pid else ""
        server_words = f"answering on https://{server.address}:{server.port}{started}"
        try:
            nodes = {name: str(node["state"]) for name, node in server.nodes().items()}
        except ServerProblem as exc:
            nodes = f"unknown ({str(exc).splitlines()[-1]})"
    statuses = asyncio.run(_each_host(cluster, lambda host: status_host(cluster, host, nodes)))
    return server_words, statuses


def delete_cluster(cluster: Cluster, say: Said) -> list[HostOutcome]:
    if not cluster.known_hosts.is_file():
        raise SpecError([p for p in missing_local_files(cluster) if p.path == "ssh.known_hosts"])
    server = server_of(cluster)
    hosts_say = _host_say(say)
    outcomes = asyncio.run(
        _each_host(cluster, lambda host: delete_host(cluster, host, server, hosts_say))
    )
    if server.started_pid() is not None:
        say(f"server: {server.stop()} (the one cluster create started)")
    elif server.answering():
        say("server: left running (cluster create did not start it)")
    return outcomes
