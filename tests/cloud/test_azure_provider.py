"""The Azure provider, with the real Azure SDK, against the fake ARM endpoint (tests/cloud/
fake_arm.py) on loopback over TLS: launch and relaunch, list after a restart, deallocate,
delete, spot eviction, throttling with Retry-After, capacity and quota refusals, and a creation
that fails midway. Every test also requires the fake found nothing wrong in what the SDK sent."""

from __future__ import annotations

import base64
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.cloud.pools import AzureProviderSection
from shoal.cloud.provider import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    ErrorKind,
    InstanceState,
    LaunchRequest,
    Offer,
    Provider,
    ProviderError,
)

SKIP_REASON = "the azure extra is not installed (pip install -e '.[azure]'; make setup does it)"
PRICES = {"Standard_D4s_v5": 0.192, "Standard_NC24ads_A100_v4": 3.67, "Standard_B2s": 0.0416}
SPOT_PRICES = {"Standard_D4s_v5": 0.038}
USER_DATA = "#cloud-config\nruncmd:\n  - [shoal, agent, join, --token, t0ken]\n"


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[Any]:
    pytest.importorskip("azure.mgmt.compute", reason=SKIP_REASON)
    pytest.importorskip("azure.mgmt.network", reason=SKIP_REASON)
    from tests.cloud.fake_arm import FakeArm  # noqa: PLC0415 - needs the SDK
    from tests.cloud.fake_arm_shapes import sku  # noqa: PLC0415

    with FakeArm(tmp_path) as fake:
        fake.skus = [
            sku("Standard_D4s_v5", 4, 16),
            sku("Standard_NC24ads_A100_v4", 24, 220, gpus=1, restricted_zones=["2"], spot=False),
            sku("Standard_B2s", 2, 4, location_restricted=True),
            sku("Standard_E2s_v5", 2, 16),  # no price in the table: not offered
        ]
        yield fake
        assert fake.problems == [], "the SDK sent what ARM would refuse"


@pytest.fixture
def make_provider(arm: Any) -> Iterator[Callable[..., Any]]:
    from shoal.cloud.azure import AzureProvider  # noqa: PLC0415
    from tests.cloud.fake_arm_tls import FakeCredential  # noqa: PLC0415 - needs the SDK

    made: list[Any] = []

    def make(removal: str = "delete", retry_total: int = 3, token: str | None = None) -> Any:
        section = AzureProviderSection(
            type="azure",
            subscription_id=arm.subscription,
            resource_group=arm.resource_group,
            location=arm.location,
            subnet_id=arm.subnet_id,
            image="Canonical:ubuntu-24_04-lts:server:latest",
            endpoint=arm.url,
            removal=removal,  # type: ignore[arg-type]
            prices=PRICES,
            spot_prices=SPOT_PRICES,
        )
        provider = AzureProvider(
            section,
            name="az",
            credential=FakeCredential(token) if token else FakeCredential(),
            connection_verify=str(arm.ca_file),
            polling_interval_s=0.05,
            retry_total=retry_total,
        )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


def request(offer: Offer, rid: str = "req-0001", name: str = "lab-cpu-1") -> LaunchRequest:
    return LaunchRequest(rid, "lab", "cpu", name, offer, USER_DATA, tags={"team": "rl"})


def d4(provider: Any, *, spot: bool = False, zone: str = "1") -> Offer:
    return next(o for o in provider.offers("Standard_D4s_v5", (zone,), spot) if o.zone == zone)


def wait_for(check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not true within {timeout_s} s: {check}")


def test_the_module_imports_without_the_sdk_and_the_provider_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m == "azure" or m.startswith("azure.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "azure", None)  # `import azure...` now fails
    monkeypatch.delitem(sys.modules, "shoal.cloud.azure", raising=False)
    import shoal.cloud.azure as azure_module  # noqa: PLC0415 - imported again without azure

    section = AzureProviderSection(
        type="azure",
        subscription_id="s",
        resource_group="rg",
        location="westeurope",
        subnet_id="/subnets/x",
        image="a:b:c:d",
    )
    with pytest.raises(ProviderError, match=r"pip install 'shoal\[azure\]'"):
        azure_module.AzureProvider(section)


def test_offers_come_from_the_resource_skus_of_the_location_with_their_prices(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    provider = make_provider()
    assert isinstance(provider, Provider)
    every = provider.offers(None, (), False)
    assert {(o.instance_type, o.zone) for o in every} == {
        ("Standard_D4s_v5", "1"),
        ("Standard_D4s_v5", "2"),
        ("Standard_D4s_v5", "3"),
        # zone 2 is restricted for this subscription; B2s is restricted in the whole region;
        # E2s has no price
        ("Standard_NC24ads_A100_v4", "1"),
        ("Standard_NC24ads_A100_v4", "3"),
    }
    a100 = next(o for o in every if o.instance_type.startswith("Standard_NC24"))
    assert (a100.cpu_millis, a100.memory_mib, a100.gpus, a100.price_per_hour) == (
        24000,
        220 * 1024,
        1,
        3.67,
    )
    assert a100.key == "westeurope/1/Standard_NC24ads_A100_v4"
    spot = provider.offers(None, ("3",), True)
    assert [(o.instance_type, o.zone, o.price_per_hour, o.spot) for o in spot] == [
        ("Standard_D4s_v5", "3", 0.038, True)  # the A100 SKU is not LowPriorityCapable
    ]
    provider.offers(None, (), False)
    assert len(arm.requests_to("GET", "/skus")) == 1, "the SKU list is cached"
    assert arm.requests_to("GET", "/skus")[0].query["$filter"] == "location eq 'westeurope'"


def test_launch_sends_a_tagged_vm_on_its_nic_and_a_second_launch_finds_it(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    provider = make_provider()
    offer = d4(provider)
    launched = provider.launch(request(offer))
    assert launched.state is InstanceState.PENDING
    assert (launched.request_id, launched.offer_key) == ("req-0001", offer.key)

    [put] = arm.requests_to("PUT", "/virtualMachines/")
    assert put.query["api-version"]
    body = put.body
    assert body["tags"][TAG_CLUSTER] == "lab" and body["tags"][TAG_POOL] == "cpu"
    assert body["tags"][TAG_REQUEST] == "req-0001" and body["tags"]["team"] == "rl"
    assert body["zones"] == ["1"]
    assert body["properties"]["hardwareProfile"]["vmSize"] == "Standard_D4s_v5"
    assert "priority" not in body["properties"]
    custom = body["properties"]["osProfile"]["customData"]
    assert base64.b64decode(custom).decode() == USER_DATA
    [nic_ref] = body["properties"]["networkProfile"]["networkInterfaces"]
    [nic_put] = arm.requests_to("PUT", "/networkInterfaces/")
    assert nic_ref["id"].endswith(nic_put.path.rsplit("/", 1)[1])

    assert provider.settle(10)
    [running] = provider.list_instances("lab")
    assert running.state is InstanceState.RUNNING
    assert (running.name, running.pool, running.address) == ("lab-cpu-1", "cpu", "10.0.0.4")

    again = provider.launch(request(offer))
    assert again.state is InstanceState.RUNNING
    assert len(arm.requests_to("PUT", "/virtualMachines/")) == 1, "one VM per request id"
    assert len(arm.state.vms) == 1 and len(arm.state.nics) == 1
    assert provider.list_instances("another-cluster") == []


def test_a_new_provider_after_a_restart_lists_the_same_machines_from_their_tags(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    first = make_provider()
    offer = d4(first)
    for n in range(3):
        first.launch(request(offer, rid=f"req-{n}", name=f"lab-cpu-{n}"))
    assert first.settle(10)
    before = sorted(first.list_instances("lab"), key=lambda i: i.request_id)
    first.close()

    restarted = make_provider()
    after = sorted(restarted.list_instances("lab"), key=lambda i: i.request_id)
    assert [(i.request_id, i.name, i.state, i.offer_key, i.address) for i in after] == [
        (i.request_id, i.name, i.state, i.offer_key, i.address) for i in before
    ]
    assert [i.request_id for i in after] == ["req-0", "req-1", "req-2"]
    assert {i.state for i in after} == {InstanceState.RUNNING}
    assert restarted.poll_errors() == []


def test_delete_removes_the_vm_its_nic_and_its_disk(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    provider = make_provider(removal="delete")
    provider.launch(request(d4(provider)))
    assert provider.settle(10)
    provider.terminate("req-0001")
    assert provider.settle(10)
    assert (arm.state.vms, arm.state.nics, arm.state.disks) == ({}, {}, set())
    assert provider.list_instances("lab") == []
    provider.terminate("req-0001")  # again: nothing to remove is no error
    provider.terminate("never-launched")
    assert provider.settle(10)
    assert provider.poll_errors() == []
    assert not arm.requests_to("POST", "/powerOff"), "never a power-off: it bills on"


def test_deallocate_keeps_the_vm_stopped_and_is_no_preemption(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    provider = make_provider(removal="deallocate")
    provider.launch(request(d4(provider, spot=True)))
    assert provider.settle(10)
    assert provider.list_instances("lab")[0].state is InstanceState.RUNNING
    provider.terminate("req-0001")
    assert provider.settle(10)
    [stopped] = provider.list_instances("lab")
    assert stopped.state is InstanceState.STOPPED
    assert arm.state.power[next(iter(arm.state.vms))] == "PowerState/deallocated"
    assert len(arm.requests_to("POST", "/deallocate")) == 1
    assert not arm.requests_to("POST", "/powerOff")
    assert provider.poll_errors() == [], "shoal deallocated it: not a preemption"


@pytest.mark.parametrize("removal", ["deallocate", "delete"])
def test_a_spot_vm_evicted_by_azure_is_polled_as_preempted(
    make_provider: Callable[..., Any], arm: Any, removal: str
) -> None:
    provider = make_provider(removal=removal)
    offer = d4(provider, spot=True, zone="2")
    provider.launch(request(offer))
    props = arm.requests_to("PUT", "/virtualMachines/")[0].body["properties"]
    assert props["priority"] == "Spot"
    assert props["evictionPolicy"] == removal.capitalize()
    assert props["billingProfile"] == {"maxPrice": -1}
    assert provider.settle(10)
    [running] = provider.list_instances("lab")
    assert running.spot and running.state is InstanceState.RUNNING
    assert provider.poll_errors() == []

    arm.evict(next(iter(arm.state.vms)))
    [event] = provider.poll_errors()
    assert (event.request_id, event.kind, event.offer_key) == (
        "req-0001",
        ErrorKind.PREEMPTED,
        offer.key,
    )
    assert "evicted" in event.message
    assert provider.poll_errors() == [], "told once"
    expected = [] if removal == "delete" else [InstanceState.STOPPED]
    assert [i.state for i in provider.list_instances("lab")] == expected


def test_throttling_is_retried_after_the_delay_arm_asked_for(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    provider = make_provider()
    offer = d4(provider)
    arm.inject("PUT", "/virtualMachines/", 429, "TooManyRequests", retry_after=1)
    started = time.monotonic()
    provider.launch(request(offer))
    puts = arm.requests_to("PUT", "/virtualMachines/")
    assert len(puts) == 2, "the SDK's retry policy sent it again"
    assert puts[1].at - puts[0].at >= 0.95, "Retry-After was honoured"
    assert time.monotonic() - started < 5
    assert provider.settle(10)
    assert provider.list_instances("lab")[0].state is InstanceState.RUNNING


def test_a_long_retry_after_or_spent_retries_are_transient_errors(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    provider = make_provider(retry_total=3)
    arm.inject("GET", "/virtualMachines", 429, "TooManyRequests", retry_after=30)
    started = time.monotonic()
    with pytest.raises(ProviderError) as raised:
        provider.list_instances("lab")
    assert time.monotonic() - started < 5, "a 30 s wait is the caller's, not a blocked thread's"
    assert raised.value.kind is ErrorKind.TRANSIENT
    assert raised.value.retry_after_s == 30
    assert "TooManyRequests" in raised.value.message

    no_retries = make_provider(retry_total=0)
    arm.inject("GET", "/virtualMachines", 503, "ServiceUnavailable")
    with pytest.raises(ProviderError) as unavailable:
        no_retries.list_instances("lab")
    assert unavailable.value.kind is ErrorKind.TRANSIENT
    assert "ServiceUnavailable" in unavailable.value.message


@pytest.mark.parametrize(
    ("code", "message", "kind"),
    [
        ("SkuNotAvailable", "The requested size is not available in zone 1.", ErrorKind.CAPACITY),
        ("ZonalAllocationFailed", "Allocation failed in zone 1.", ErrorKind.CAPACITY),
        (
            "OperationNotAllowed",
            "Operation could not be completed as it results in exceeding approved "
            "standardDSv5Family Cores quota. Current Limit: 8",
            ErrorKind.QUOTA,
        ),
        ("QuotaExceeded", "Quota exceeded for Total Regional Cores.", ErrorKind.QUOTA),
        ("AuthorizationFailed", "The client does not have authorization.", ErrorKind.AUTH),
    ],
)
def test_refusals_are_mapped_to_their_kind_with_the_offer_and_leave_nothing(
    make_provider: Callable[..., Any], arm: Any, code: str, message: str, kind: ErrorKind
) -> None:
    provider = make_provider()
    offer = d4(provider)
    status = 403 if kind is ErrorKind.AUTH else 409
    arm.inject("PUT", "/virtualMachines/", status, code, message)
    with pytest.raises(ProviderError) as raised:
        provider.launch(request(offer))
    assert (raised.value.kind, raised.value.offer_key) == (kind, offer.key)
    assert (
        code in raised.value.message and message.split(".", maxsplit=1)[0] in raised.value.message
    )
    assert provider.settle(10)
    assert arm.state.vms == {} and arm.state.nics == {}, "the NIC made for it is deleted"


def test_a_token_arm_refuses_is_an_auth_error(make_provider: Callable[..., Any]) -> None:
    provider = make_provider(token="expired-token")
    with pytest.raises(ProviderError) as raised:
        provider.list_instances("lab")
    assert raised.value.kind is ErrorKind.AUTH
    assert "InvalidAuthenticationToken" in raised.value.message


def test_a_creation_that_fails_midway_is_polled_and_its_half_made_vm_removed(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    provider = make_provider()
    offer = d4(provider, zone="3")
    arm.fail_next_creation("AllocationFailed", "Allocation failed. Please try another zone.")
    launched = provider.launch(request(offer))
    assert launched.state is InstanceState.PENDING, "ARM accepted it (201)"

    events = wait_for(provider.poll_errors)
    assert [(e.request_id, e.kind, e.offer_key) for e in events] == [
        ("req-0001", ErrorKind.CAPACITY, offer.key)
    ]
    assert "AllocationFailed" in events[0].message
    statuses = arm.requests_to("GET", "/operations/")
    assert len(statuses) >= arm.lro_polls + 1, "InProgress, then Failed"
    for inst in provider.list_instances("lab"):
        assert inst.state is not InstanceState.RUNNING
    assert provider.settle(10)
    assert (arm.state.vms, arm.state.nics, arm.state.disks) == ({}, {}, set())
    assert provider.list_instances("lab") == []
    assert provider.poll_errors() == [], "removing the failed VM is not an eviction"


def test_a_launch_still_creating_is_found_again_and_can_be_terminated(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    arm.lro_polls = 40  # the creation stays InProgress for about 2 s
    provider = make_provider()
    offer = d4(provider)
    provider.launch(request(offer))
    again = provider.launch(request(offer))
    assert again.state is InstanceState.PENDING
    assert len(arm.requests_to("PUT", "/virtualMachines/")) == 1
    [creating] = provider.list_instances("lab")
    assert creating.state is InstanceState.PENDING
    provider.terminate("req-0001")
    assert provider.settle(10), "the deletion, and the creation it cancelled, ended"
    assert (arm.state.vms, arm.state.nics, arm.state.disks) == ({}, {}, set())
    assert arm.state.power == {}
    assert provider.poll_errors() == [], "a cancelled creation shoal asked for is no error"


def test_a_creation_whose_vm_was_deleted_before_its_last_poll_ends_quietly(
    make_provider: Callable[..., Any], arm: Any
) -> None:
    """The creation's poller reads the VM once it is done; a VM shoal deleted meanwhile answers
    404 there. That is the end of a cancelled creation, not an error of settle or an event."""
    provider = make_provider()
    provider.launch(request(d4(provider)))
    arm.inject("GET", "/virtualMachines/shoal-req-0001", 404, "ResourceNotFound", times=1000)
    provider.terminate("req-0001")
    assert provider.settle(10), "the deletion, and the creation it cancelled, ended"
    assert len(arm.requests_to("GET", "/virtualMachines/shoal-req-0001")) >= 1
    assert provider.poll_errors() == []


def test_the_registry_makes_an_azure_provider_from_its_section(arm: Any) -> None:
    from shoal.cloud.azure import AzureProvider  # noqa: PLC0415 - needs the SDK
    from shoal.cloud.registry import make_provider  # noqa: PLC0415

    section = AzureProviderSection(
        type="azure",
        subscription_id=arm.subscription,
        resource_group=arm.resource_group,
        location=arm.location,
        subnet_id=arm.subnet_id,
        image="Canonical:ubuntu-24_04-lts:server:latest",
        prices={"Standard_D4s_v5": 0.192},
    )
    provider = make_provider("az", section)  # DefaultAzureCredential: no network until used
    try:
        assert isinstance(provider, AzureProvider) and isinstance(provider, Provider)
        assert provider.name == "az"
    finally:
        provider.close()
