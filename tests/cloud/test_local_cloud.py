"""The local cloud, for real: a daemon (`shoal cloud local serve`) whose machines are network
namespaces on a NetnsLab bridge, running their user data with bash.

- a launch boots after the delay, gets an address, runs its user data (an HTTP server reached
  over the bridge), shows in the list with its tags; the same request id starts no second
  machine; terminating it leaves no namespace and no process;
- a zone at capacity refuses with `capacity` and another zone's offer works; a family over its
  quota refuses with `quota`;
- a scheduled preemption shows a Preempt event on the metadata endpoint inside the machine, then
  the machine is gone with a `preempted` event;
- a restarted daemon finds its machines (and ends them); a never-booting launch runs nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from shoal.cloud.local.catalog import parse_catalog
from shoal.cloud.local.client import LocalProvider
from shoal.cloud.provider import ErrorKind, InstanceState, LaunchRequest, Offer, ProviderError
from shoal.spec.errors import SpecError
from tests.cloud.localcloud import CloudDaemon, start_cloud
from tests.multihost.netns import NetnsLab, namespaces_usable

needs_namespaces = pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)

CATALOG = """\
region: lab
instance_types:
  small: {cpus: 1, memory: 1Gi, price: 0.10, spot_price: 0.03}
  big: {cpus: 2, memory: 4Gi, gpus: 2, gpu_type: sim, price: 1.5, family: big}
zones:
  z1: {small: 1}
  z2: {small: 3, big: 3}
quotas: {cores: 16, families: {big: 2}}
boot_delay: 1
"""
HTTP_USER_DATA = """\
#!/bin/bash
echo "hello from $(hostname -I 2>/dev/null || echo machine)" > "$SHOAL_ROOT/hello"
cd "$SHOAL_ROOT"
exec python3 -m http.server 8080
"""
SLEEP_USER_DATA = "#!/bin/bash\nexec sleep 600\n"
# polls the Scheduled Events endpoint as an agent on Azure would, keeping the first Preempt
POLL_USER_DATA = """\
#!/bin/bash
touch "$SHOAL_ROOT/booted"
exec python3 - <<'PY'
import json, os, time, urllib.request
url = "{url}"
while True:
    request = urllib.request.Request(url, headers={{"Metadata": "true"}})
    with urllib.request.urlopen(request, timeout=5) as answer:
        document = json.load(answer)
    if document["Events"]:
        with open(os.environ["SHOAL_ROOT"] + "/events.json", "w") as out:
            json.dump(document, out)
    time.sleep(0.3)
PY
"""

MakeCloud = Callable[[str], CloudDaemon]


@pytest.fixture
def make_cloud(tmp_path: Path) -> Iterator[MakeCloud]:
    lab = NetnsLab.create(0, tag=f"shct{os.getpid() % 100000}")
    daemons: list[CloudDaemon] = []

    def make(catalog: str) -> CloudDaemon:
        daemon = start_cloud(lab, tmp_path, catalog, name=f"cloud{len(daemons)}")
        daemons.append(daemon)
        return daemon

    try:
        yield make
    finally:
        try:
            for daemon in daemons:
                daemon.close()
        finally:
            lab.destroy()


def _offer(provider: LocalProvider, zone: str, kind: str = "small", spot: bool = False) -> Offer:
    return next(o for o in provider.offers(kind, (zone,), spot) if o.zone == zone)


def _request(request_id: str, offer: Offer, user_data: str = SLEEP_USER_DATA) -> LaunchRequest:
    tags = {"shoal-cluster": "lab", "shoal-pool": "cpu", "shoal-request": request_id}
    return LaunchRequest(request_id, "lab", "cpu", f"cpu-{request_id}", offer, user_data, tags)


def _wait(what: Callable[[], object], timeout_s: float, why: str) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{why}: not within {timeout_s:.0f}s")


def _state(provider: LocalProvider, request_id: str) -> str:
    return str(provider.describe(request_id)["state"])


def _assert_gone(record: dict[str, object]) -> None:
    assert not Path(f"/run/netns/{record['netns']}").exists()
    pid = record["pid"]
    if isinstance(pid, int):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_catalog_problems_name_the_field() -> None:
    with pytest.raises(SpecError) as caught:
        parse_catalog(
            "instance_types:\n  small: {cpus: 1, memory: 1Gi}\nzones:\n  z1: {tiny: 1}\n"
            "preemptions:\n  - {spot_launch: 1, after: 2, notice: 5}\n"
        )
    text = str(caught.value)
    assert "instance_types.small.price" in text
    assert "preemptions[0]" in text and "notice" in text
    catalog = parse_catalog(CATALOG)
    spot_offers = catalog.offers("small", (), True)
    assert [o.key for o in spot_offers] == ["lab/z1/small/spot", "lab/z2/small/spot"]


@needs_namespaces
def test_launch_boots_serves_lists_and_terminates_leaving_nothing(make_cloud: MakeCloud) -> None:
    cloud = make_cloud(CATALOG)
    provider = cloud.provider()
    offer = _offer(provider, "z2")
    assert (offer.price_per_hour, offer.cpu_millis, offer.available) == (0.10, 1000, True)
    first = provider.launch(_request("r1", offer, HTTP_USER_DATA))
    assert first.state is InstanceState.PENDING and first.address is not None
    again = provider.launch(_request("r1", offer, HTTP_USER_DATA))  # the same request id
    assert again.instance_id == first.instance_id
    _wait(lambda: _state(provider, "r1") == "running", 10, "r1 running")
    cloud.lab.wait_reachable(first.address, 8080, timeout_s=20)
    with urllib.request.urlopen(f"http://{first.address}:8080/hello", timeout=5) as answer:
        assert answer.read().decode().startswith("hello from")
    listed = provider.list_instances("lab")
    assert [(i.instance_id, i.address, i.offer_key) for i in listed] == [
        (first.instance_id, first.address, "lab/z2/small")
    ]
    assert provider.list_instances("other") == []
    record = provider.describe("r1")
    assert record["tags"] == {"shoal-cluster": "lab", "shoal-pool": "cpu", "shoal-request": "r1"}
    assert cloud.state()["launches"] == 1  # the second launch started nothing
    provider.terminate("r1")
    provider.terminate("r1")  # idempotent, as is an unknown request
    provider.terminate("never-launched")
    _wait(lambda: _state(provider, "r1") == "terminated", 15, "r1 terminated")
    _assert_gone(record)
    assert provider.list_instances("lab") == []
    assert provider.launch(_request("r1", offer)).state is InstanceState.TERMINATED


@needs_namespaces
def test_capacity_falls_to_another_zone_and_quota_refuses(make_cloud: MakeCloud) -> None:
    cloud = make_cloud(CATALOG)
    provider = cloud.provider()
    provider.launch(_request("a", _offer(provider, "z1")))
    assert not _offer(provider, "z1").available
    with pytest.raises(ProviderError) as full:
        provider.launch(_request("b", _offer(provider, "z1")))
    assert full.value.kind is ErrorKind.CAPACITY and full.value.offer_key == "lab/z1/small"
    assert "z1 has no small machine free" in full.value.message
    assert provider.launch(_request("b", _offer(provider, "z2"))).offer_key == "lab/z2/small"
    big = _offer(provider, "z2", "big")
    assert (big.gpus, big.gpu_type) == (2, "sim")
    provider.launch(_request("c", big))
    with pytest.raises(ProviderError) as quota:
        provider.launch(_request("d", big))
    assert quota.value.kind is ErrorKind.QUOTA and "quotas.families.big" in quota.value.message
    assert {i.request_id for i in provider.list_instances("lab")} == {"a", "b", "c"}
    for request_id in ("a", "b", "c"):
        provider.terminate(request_id)
    _wait(lambda: not provider.list_instances("lab"), 20, "all terminated")


@needs_namespaces
def test_scheduled_preemption_is_announced_inside_then_happens(make_cloud: MakeCloud) -> None:
    cloud = make_cloud(CATALOG + "preemptions:\n  - {spot_launch: 1, after: 5, notice: 4}\n")
    provider = cloud.provider()
    url = provider.scheduled_events_url
    user_data = POLL_USER_DATA.format(url=url)
    spot = provider.launch(_request("s1", _offer(provider, "z2", spot=True), user_data))
    assert spot.spot and spot.offer_key == "lab/z2/small/spot"
    root = cloud.directory / "instances" / spot.instance_id / "root"
    events_file = root / "events.json"
    _wait(events_file.exists, 15, f"a Preempt notice inside the machine; console: {_console(root)}")
    document = json.loads(events_file.read_text())
    assert document["DocumentIncarnation"] == 2
    (event,) = document["Events"]
    assert (event["EventType"], event["ResourceType"], event["EventStatus"]) == (
        "Preempt", "VirtualMachine", "Scheduled",
    )  # fmt: skip
    assert event["Resources"] == ["cpu-s1"] and event["NotBefore"].endswith(" GMT")
    refused = httpx.get(url)  # from the root namespace: not a machine, and no Metadata header
    assert refused.status_code == 400
    assert httpx.get(url, headers={"Metadata": "true"}).status_code == 404
    record = provider.describe("s1")
    _wait(lambda: _state(provider, "s1") == "terminated", 15, "s1 preempted")
    assert provider.describe("s1")["end_reason"] == "preempted"
    _assert_gone(record)
    (preempted,) = provider.poll_errors()
    assert (preempted.request_id, preempted.kind) == ("s1", ErrorKind.PREEMPTED)
    assert provider.poll_errors() == []  # the cursor moved on


@needs_namespaces
def test_restarted_daemon_recovers_its_machines(make_cloud: MakeCloud) -> None:
    cloud = make_cloud(CATALOG)
    provider = cloud.provider()
    made = provider.launch(_request("r1", _offer(provider, "z2")))
    _wait(lambda: provider.describe("r1")["pid"], 10, "r1 booted")
    record = provider.describe("r1")
    subprocess.run(["kill", "-TERM", str(cloud.process.pid)], check=True)  # type: ignore[union-attr]
    cloud.process.wait(timeout=20)  # type: ignore[union-attr]
    assert Path(f"/run/netns/{record['netns']}").exists()  # a cloud outlives its API
    assert Path(f"/proc/{record['pid']}").exists()
    cloud.start()
    provider = cloud.provider()
    (found,) = provider.list_instances("lab")
    assert (found.instance_id, found.address, found.state) == (
        made.instance_id, made.address, InstanceState.RUNNING,
    )  # fmt: skip
    assert provider.launch(_request("r1", _offer(provider, "z2"))).instance_id == made.instance_id
    provider.terminate("r1")
    _wait(lambda: _state(provider, "r1") == "terminated", 15, "r1 terminated after the restart")
    _assert_gone(record)


@needs_namespaces
def test_a_launch_that_never_boots_runs_nothing(make_cloud: MakeCloud) -> None:
    cloud = make_cloud(CATALOG.replace("boot_delay: 1", "boot_delay: 0") + "never_boot: [2]\n")
    provider = cloud.provider()
    provider.launch(_request("ok", _offer(provider, "z2")))
    provider.launch(_request("dud", _offer(provider, "z2")))
    _wait(lambda: provider.describe("ok")["pid"], 10, "ok booted")
    _wait(lambda: _state(provider, "dud") == "running", 10, "dud running")
    time.sleep(1.5)
    dud = provider.describe("dud")
    assert dud["pid"] is None
    assert (
        subprocess.run(
            ["ip", "netns", "pids", str(dud["netns"])], check=False, capture_output=True, text=True
        ).stdout.split()
        == []
    )
    assert not (cloud.directory / "instances" / str(dud["instance_id"]) / "console.log").exists()
    for request_id in ("ok", "dud"):
        provider.terminate(request_id)
    _wait(lambda: not provider.list_instances("lab"), 15, "both terminated")


def _console(root: Path) -> str:
    log = root.parent / "console.log"
    return log.read_text(errors="replace")[-1500:] if log.exists() else "(none)"
