"""A pool machine that installs shoal from the server's wheelhouse (docs/cloud.md, `install:
wheelhouse`): the bootstrap fetches the manifest and each wheel over HTTPS pinning the cluster's
CA, makes a venv, installs with `pip --no-index`, joins and runs the agent; the node is READY
with the pool's label, and its shoal is the venv's, not the host's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cloud.localcloud import start_cloud
from tests.cloud.test_autoscale_e2e import PoolCluster, pool
from tests.cloud.test_bootstrap import _start_server
from tests.multihost.netns import NetnsLab, namespaces_usable

CATALOG = """\
region: lab
instance_types:
  small: {cpus: 1, memory: 1Gi, price: 0.10}
zones:
  z1: {small: 1}
"""


@pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)
@pytest.mark.skipif(
    os.environ.get("SHOAL_CLOUD_INSTALL") != "1",
    reason="a minute of pip install: run by `make test-cloud-install`",
)
def test_a_machine_installs_shoal_from_the_servers_wheelhouse(tmp_path: Path) -> None:
    lab = NetnsLab.create(1, tag=f"shcw{os.getpid() % 100000}")
    cloud = rack = None
    try:
        cloud = start_cloud(lab, tmp_path, CATALOG)
        rack = _start_server(lab, tmp_path)
        assert rack.server is not None
        rack.lab.stop(rack.server)
        rack.server = None
        cluster = PoolCluster(lab, tmp_path, cloud, rack)
        spec = pool("cpu", install="wheelhouse", min=1, join_timeout=300).replace(
            "    shoal_path:", "    # shoal_path:"
        )
        cluster.start_server(spec)
        (machine,) = cluster.wait(cluster.machines, 30, "no machine launched")
        node = cluster.wait(
            lambda: (
                rack.nodes().get(machine.name, {}).get("state") == "READY"
                and rack.nodes()[machine.name]
            ),
            280,
            "the machine did not join",
        )
        assert node["labels"].get("shoal.pool") == "cpu"
        root = cloud.directory / "instances" / machine.instance_id / "root"
        assert (root / "venv" / "bin" / "shoal").exists()  # installed there, from the wheels
        console = (cloud.directory / "instances" / machine.instance_id / "console.log").read_text()
        assert "installing shoal from the server's wheelhouse" in console
    finally:
        if rack is not None:
            rack.close()
        if cloud is not None:
            cloud.close()
        lab.destroy()
