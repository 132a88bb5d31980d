"""Cloud pools for real (docs/cloud.md): a shoal server on a namespace host with `--cloud FILE`,
the local cloud's machines (namespaces on the same bridge) booting the bootstrap, joining with
their one-time tokens and running real agents.

- a queued 2-machine gang grows an empty pool by exactly 2, one zone's capacity falling over to
  the next offer; both join, the job runs and succeeds, and after the idle timeout both are
  drained and terminated: no machine left in the provider's list;
- a spot machine's scheduled preemption is announced, the node is drained and its job requeued,
  and the job later succeeds on another machine;
- a quota refusal blocks the offer and says so; a machine that never boots is terminated after
  the join timeout; a server killed (-9) during a scale-up leaves, after its restart, no machine
  the pool does not know.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shoal.cloud.provider import InstanceState
from tests.cloud.localcloud import CloudDaemon, start_cloud
from tests.cloud.test_bootstrap import _start_server
from tests.multihost.netns import NetnsLab, namespaces_usable
from tests.multihost.rack import Rack

pytestmark = pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)
VENV_SHOAL = str(Path(sys.executable).with_name("shoal"))
CATALOG = """\
region: lab
instance_types:
  small: {cpus: 1, memory: 1Gi, price: 0.10, spot_price: 0.03}
zones:
  z1: {small: 1}
  z2: {small: 3}
boot_delay: 1
preemptions:
  - {spot_launch: 1, after: 30s, notice: 12s}
"""
# tiny is the cheapest offer but over its quota; the first machine launched never boots
FAULTY_CATALOG = """\
region: lab
instance_types:
  small: {cpus: 1, memory: 1Gi, price: 0.10}
  tiny: {cpus: 1, memory: 512Mi, price: 0.05, family: tiny}
zones:
  z1: {small: 2, tiny: 2}
  z2: {small: 2}
quotas: {families: {tiny: 0}}
boot_delay: 1
never_boot: [1]
"""
GANG = """\
version: 1
name: {name}
roles:
  worker:
    instances: {instances}
    resources: {{cpu: 1, memory: 256Mi}}
    command: "echo worker $SHOAL_TASK_INDEX on $SHOAL_NODE_NAME; sleep {sleep}"
"""


def cloud_file(endpoint: str, pools: str) -> str:
    return (
        f"cluster: e2e\nproviders:\n  lab: {{type: local, endpoint: {endpoint!r}}}\npools:\n{pools}"
    )


def pool(name: str, **fields: Any) -> str:
    base = {
        "provider": "lab",
        "instance_type": "small",
        "max": 3,
        "idle_timeout": 6,
        "join_timeout": 40,
        "install": "preinstalled",
        "shoal_path": VENV_SHOAL,
        **fields,
    }
    body = "".join(f"    {k}: {v}\n" for k, v in base.items())
    return f"  - name: {name}\n{body}"


@dataclass
class PoolCluster:
    lab: NetnsLab
    root: Path
    cloud: CloudDaemon
    rack: Rack

    def start_server(self, pools: str) -> None:
        cloud = self.root / "cloud.yaml"
        cloud.write_text(cloud_file(self.cloud.endpoint, pools))
        self.rack.env["SHOAL_AUTOSCALE_S"] = "1"
        self.rack.server = self.lab.spawn(
            self.rack.server_host,
            [sys.executable, "-m", "shoal", "server", "start", "--home", str(self.rack.home),
             "--host", self.rack.server_host.address, "--port", "8476", "--node-timeout", "8",
             "--kill-grace", "2", "--cloud", str(cloud)],
            self.root / "server.log",
            env=self.rack.env,
        )  # fmt: skip
        self.lab.wait_reachable(self.rack.server_host.address, 8476)

    def kill_server(self) -> None:
        assert self.rack.server is not None
        os.killpg(self.rack.server.pid, signal.SIGKILL)
        self.rack.server.wait(timeout=10)
        self.rack.server = None

    def pools(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.rack.admin.pools()}

    def machines(self) -> list[Any]:
        provider = self.cloud.provider()
        return [
            m for m in provider.list_instances("e2e") if m.state is not InstanceState.TERMINATED
        ]

    def submit(self, name: str, instances: int, sleep: float) -> str:
        spec = GANG.format(name=name, instances=instances, sleep=sleep)
        (job,) = self.rack.admin.submit(spec)
        return str(job["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.rack.admin.job(job_id))

    def wait(self, what: Callable[[], object], timeout_s: float, why: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            found = what()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{why}\n--- server log:\n{self.server_log()}")
            time.sleep(0.3)

    def server_log(self) -> str:
        log = self.root / "server.log"
        return log.read_text(errors="replace")[-4000:] if log.exists() else ""


@pytest.fixture
def catalog() -> str:
    return CATALOG


@pytest.fixture
def cluster(tmp_path: Path, catalog: str) -> Iterator[PoolCluster]:
    lab = NetnsLab.create(1, tag=f"shce{os.getpid() % 100000}")
    cloud: CloudDaemon | None = None
    rack: Rack | None = None
    try:
        cloud = start_cloud(lab, tmp_path, catalog)
        rack = _start_server(lab, tmp_path)
        assert rack.server is not None
        rack.lab.stop(rack.server)  # started again with the cloud file
        rack.server = None
        yield PoolCluster(lab, tmp_path, cloud, rack)
    finally:
        if rack is not None:
            rack.close()
        if cloud is not None:
            cloud.close()
        lab.destroy()


def test_a_gang_grows_an_empty_pool_by_two_runs_and_the_pool_shrinks_back(
    cluster: PoolCluster,
) -> None:
    cluster.start_server(pool("cpu"))
    assert cluster.pools()["cpu"]["size"] == 0
    job = cluster.submit("gang", instances=2, sleep=1)

    def two() -> list[Any]:
        found = cluster.machines()
        return found if len(found) >= 2 else []

    launched = cluster.wait(two, 30, "no machines launched")
    assert len(launched) == 2
    zones = sorted(m.offer_key.split("/")[1] for m in launched)
    assert zones == ["z1", "z2"]  # z1 holds one small machine: the second fell over to z2
    why = cluster.rack.admin.why(job)
    assert any("of pool cpu" in line for line in why["pools"]), why
    cluster.wait(lambda: cluster.job(job)["state"] == "SUCCEEDED", 90, "the gang did not succeed")
    nodes = {t["node"] for t in cluster.job(job)["tasks"]}
    assert nodes == {m.name for m in launched}  # it ran on the two new machines
    assert len(cluster.machines()) == 2  # and nothing more was launched
    cluster.wait(lambda: not cluster.machines(), 60, "the idle machines were not terminated")
    cpu = cluster.pools()["cpu"]
    assert cpu["size"] == 0 and cpu["nodeHours"] > 0 and cpu["cost"] > 0
    events = [e["kind"] for e in cluster.rack.admin.node_events(launched[0].name)]
    for kind in ("cloud.launched", "cloud.joined", "cloud.draining", "cloud.terminating"):
        assert kind in events, events


def test_a_spot_preemption_requeues_the_job_and_it_succeeds_elsewhere(
    cluster: PoolCluster,
) -> None:
    cluster.start_server(pool("spot", spot="true", idle_timeout=30))
    job = cluster.submit("long", instances=1, sleep=20)
    first = cluster.wait(cluster.machines, 30, "no machine launched")[0]
    cluster.wait(lambda: cluster.job(job)["state"] == "RUNNING", 60, "the job did not start")
    # the first spot launch is preempted 30 s after boot, announced 12 s before
    cluster.wait(
        lambda: any(
            e["kind"] == "cloud.preempt-notice" for e in cluster.rack.admin.node_events(first.name)
        ),
        30,
        "no preemption notice",
    )
    events = cluster.wait(
        lambda: [
            e for e in cluster.rack.admin.events(job) if "preempted by its cloud" in e["message"]
        ],
        30,
        "the job was not requeued",
    )
    assert events
    done = cluster.wait(
        lambda: cluster.job(job)["state"] in {"SUCCEEDED", "FAILED"}, 120, "the job did not end"
    )
    assert done
    detail = cluster.job(job)
    assert detail["state"] == "SUCCEEDED", detail
    assert {t["node"] for t in detail["tasks"] if t["state"] == "SUCCEEDED"} != {first.name}


@pytest.mark.parametrize("catalog", [FAULTY_CATALOG])
def test_quota_blocks_an_offer_a_silent_machine_goes_and_a_kill_9_leaves_no_stranger(
    cluster: PoolCluster,
) -> None:
    cluster.start_server(pool("tiny", instance_type="tiny") + pool("cpu", join_timeout=8))
    job = cluster.submit("one", instances=1, sleep=1)
    tiny = cluster.wait(
        lambda: cluster.pools()["tiny"]["blockedOffers"], 30, "the quota refusal blocked nothing"
    )
    assert tiny == [tiny[0]] and tiny[0].startswith("lab/z1/tiny: quota")
    listed = cluster.rack.shoal("cluster", "pools")  # what an admin reads
    assert listed.returncode == 0 and "pool tiny: not trying lab/z1/tiny: quota" in listed.stdout
    refused = cluster.rack.shoal("cluster", "scale", "cpu", "9")
    assert refused.returncode == 1 and "above pool cpu's max of 3" in refused.stderr, refused
    silent = cluster.wait(cluster.machines, 30, "the cpu pool launched nothing")[0]
    assert silent.offer_key == "lab/z1/small"  # it never boots: terminated after 8 s
    cpu = cluster.wait(
        lambda: cluster.pools()["cpu"]["blockedOffers"], 40, "the silent machine stayed"
    )
    assert cpu[0].startswith("lab/z1/small: a machine of it never joined"), cpu
    assert silent.request_id not in {m.request_id for m in cluster.machines()}
    events = [e["kind"] for e in cluster.rack.admin.node_events(silent.name)]
    assert "cloud.terminating" in events and "cloud.joined" not in events
    cluster.wait(lambda: cluster.job(job)["state"] == "SUCCEEDED", 90, "the job did not run")

    # a scale-up under way when the server is killed: after its restart every machine the
    # provider holds is one a pool knows, and the extra ones go once idle
    cluster.rack.admin.scale_pool("cpu", 2)
    cluster.wait(lambda: len(cluster.machines()) >= 2, 30, "the scale-up did not start")
    cluster.kill_server()
    cluster.start_server(pool("tiny", instance_type="tiny") + pool("cpu", join_timeout=8))

    def known() -> bool:
        machines = {m.request_id for m in cluster.machines()}
        listed = {m["requestId"] for m in cluster.pools()["cpu"]["machines"]}
        return bool(machines) and machines <= listed

    cluster.wait(known, 60, "a machine the pool does not know survived the restart")
    cluster.rack.admin.scale_pool("cpu", None)
    cluster.wait(lambda: not cluster.machines(), 60, "the idle machines were not terminated")
