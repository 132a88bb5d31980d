"""`cluster create`'s host steps against a real sshd in a namespace host that has no route out:
the wheels are copied, shoal is installed into a venv offline, and a failing step is named with
its stderr while the other hosts go on. The server here is a stand-in that refuses join tokens,
so the run stops at the join step (the end-to-end test joins a real server)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.bootstrap.clusterfile import Cluster, HostPlan, load_cluster
from shoal.bootstrap.hosts import HostOutcome, create_host
from shoal.bootstrap.server import LocalServer, ServerProblem
from shoal.bootstrap.wheels import Payload, build_payload, default_wheelhouse
from tests.bootstrap.sshd import SshdHost, sshd_missing, start_sshd
from tests.multihost.netns import NetnsLab, namespaces_usable

pytestmark = [
    pytest.mark.skipif(
        namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
    ),
    pytest.mark.skipif(sshd_missing() is not None, reason=str(sshd_missing())),
    pytest.mark.skipif(
        not default_wheelhouse().is_dir(),
        reason=f"no wheelhouse at {default_wheelhouse()}: run `make wheelhouse`",
    ),
    pytest.mark.slow,
]


class RefusingServer(LocalServer):
    def join_token(self) -> str:
        raise ServerProblem("`shoal node token create` exited 1:\nno join tokens here (stand-in)")

    def node_state(self, name: str) -> str:
        return "ABSENT"


@pytest.fixture(scope="module")
def lab_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NetnsLab, SshdHost]]:
    lab = NetnsLab.create(1, tag=f"ssc{os.getpid() % 10000}")
    try:
        yield lab, start_sshd(lab, lab.host(1), tmp_path_factory.mktemp("sshd"))
    finally:
        lab.destroy()


def cluster_file(tmp_path: Path, lab: NetnsLab, sshd: SshdHost) -> Cluster:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"server: {{address: {lab.root_address}, port: 58443, home: {tmp_path / 'server'}}}\n"
        f"install_dir: {tmp_path / 'install'}\n"
        f"python: python3\n"
        f"ssh: {{user: {sshd.user}, key_file: {sshd.key_file}, port: {sshd.port},"
        f" known_hosts: {sshd.known_hosts}}}\n"
        "hosts:\n"
        f"  - {{address: {sshd.host.address}, name: ns-1}}\n"
        f"  - {{address: {sshd.host.address}, name: no-sshd, port: {sshd.port + 1}}}\n"
    )
    return load_cluster(path)


def run_create(cluster: Cluster, payload: Payload) -> tuple[list[HostOutcome], list[str]]:
    said: list[str] = []
    server = RefusingServer(cluster.server_home, cluster.server_address, cluster.server_port)

    def say(host: HostPlan, text: str) -> None:
        said.append(f"{host.name}: {text}")

    async def both() -> list[HostOutcome]:
        return list(
            await asyncio.gather(
                *(create_host(cluster, h, payload, server, say) for h in cluster.hosts)
            )
        )

    return asyncio.run(both()), said


def test_wheels_copied_shoal_installed_offline_and_the_failing_step_named(
    lab_sshd: tuple[NetnsLab, SshdHost], tmp_path: Path
) -> None:
    lab, sshd = lab_sshd
    cluster = cluster_file(tmp_path, lab, sshd)
    payload = build_payload(default_wheelhouse(), tmp_path / "built")
    outcomes, said = run_create(cluster, payload)
    installed, unreachable = outcomes
    assert not installed.ok and installed.failed_step == "join", installed
    assert "no join tokens here (stand-in)" in installed.summary
    assert not unreachable.ok and unreachable.failed_step == "connect"
    assert f"cannot connect to {sshd.user}@{sshd.host.address}:{sshd.port + 1}" in (
        unreachable.summary
    )
    install = tmp_path / "install"
    assert (install / "installed").read_text().strip() == payload.sha256
    copied = {p.name for p in (install / "wheels").glob("*.whl")}
    assert copied == {p.name for p in payload.files}
    # the venv's shoal runs inside the host's namespace, which has no route out
    assert "default" not in lab.run(sshd.host, ["ip", "route"]).stdout
    version = lab.run(sshd.host, [str(install / "venv/bin/shoal"), "--version"])
    assert version.stdout.strip() == "shoal 0.1.0", version.stderr
    assert any(line.startswith("ns-1: install: shoal installed in") for line in said)

    # again: the same wheels are not sent and the same shoal is not reinstalled
    outcomes, said = run_create(cluster, payload)
    assert outcomes[0].failed_step == "join"
    assert "ns-1: copy: 1 wheel(s) sent" in " ".join(said)
    assert "ns-1: install: this shoal wheel is installed already" in said
    assert not (install / "joined").exists()
    assert not (install / "agent.pid").exists()  # nothing started before a join
    assert os.access(install / "venv/bin/python", os.X_OK)
