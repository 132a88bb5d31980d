"""The Azure provider: one virtual machine per launch request, through Azure Resource Manager.

Shape: **single VMs, not a scale set.** Each request id names one VM (``vm_name``) and its NIC;
the VM carries the tags ``shoal-cluster``, ``shoal-pool``, ``shoal-request`` (and the node name
and offer key), so listing the resource group by tag is the truth after a server restart, and a
second launch with the same request id finds the VM the first made. A scale set would add a
second notion of identity (instance ids it picks) to map back to request ids, and its own
scale-in choices; single VMs keep terminate exact.

* launch: a NIC in ``subnet_id``, then the VM (cloud-init script as ``customData``, OS disk and
  NIC deleted with it, Spot with an eviction policy that follows ``removal`` and ``maxPrice: -1``
  when the offer is spot). The VM's creation is a long-running operation: ``launch`` returns as
  soon as ARM accepted it; a creation that fails later (an allocation failure, say) is reported
  by ``poll_errors`` and the half-made VM is deleted.
* terminate: delete the VM (its NIC and disk go with it) or deallocate it, per ``removal``;
  never a power-off, which bills on.
* offers: the resource SKUs of the location (zones with a restriction left out), priced from the
  ``prices``/``spot_prices`` tables given (no price, no offer: logged once).
* poll_errors: creations that failed after they were accepted, and spot VMs seen to go
  (deallocated or deleted) without shoal asking: ``preempted``.

The SDK (``pip install shoal[azure]``) is imported when a provider is made, not with this module.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from shoal.cloud.azure_arm import (
    TAG_NAME,
    TAG_OFFER,
    instance_state,
    machine_tags,
    nic_body,
    nic_name,
    provider_error,
    retry_policy,
    sku_offers,
    throwaway_ssh_key,
    vm_body,
    vm_name,
)
from shoal.cloud.bootstrap import AZURE_SCHEDULED_EVENTS_URL
from shoal.cloud.pools import AzureProviderSection
from shoal.cloud.provider import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    Capability,
    ErrorKind,
    Instance,
    InstanceState,
    LaunchRequest,
    Offer,
    ProviderError,
    ProviderEvent,
)

log = logging.getLogger(__name__)

INSTALL_HINT = "the Azure provider needs the azure extra: pip install 'shoal[azure]'"
LIVE = (InstanceState.PENDING, InstanceState.RUNNING)
GONE = (InstanceState.STOPPING, InstanceState.STOPPED)


class AzureSdkMissing(ProviderError):
    def __init__(self, missing: str) -> None:
        super().__init__(ErrorKind.AUTH, f"{INSTALL_HINT} (cannot import {missing})")


@dataclass(slots=True)
class _Operation:
    """A long-running operation shoal started and has not seen end yet."""

    poller: Any  # azure.core.polling.LROPoller
    vm: str
    offer_key: str | None = None
    deletes: bool = False  # a VM deletion (its NIC is deleted after it)


@dataclass(frozen=True, slots=True)
class _Seen:
    state: InstanceState
    spot: bool
    offer_key: str


class AzureProvider:
    name: str
    capabilities = frozenset(
        {Capability.SPOT, Capability.STOP_START, Capability.PREEMPTION_NOTICES}
    )
    # where a VM reads its Scheduled Events (the instance metadata service), passed to its agent
    scheduled_events_url = AZURE_SCHEDULED_EVENTS_URL

    def __init__(
        self,
        section: AzureProviderSection,
        *,
        name: str = "azure",
        credential: Any = None,
        prices: Mapping[str, float] | None = None,
        spot_prices: Mapping[str, float] | None = None,
        connection_verify: bool | str = True,
        polling_interval_s: float = 15.0,
        retry_total: int = 5,
        max_retry_after_s: float = 10.0,
        sku_cache_s: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        try:
            from azure.mgmt.compute import ComputeManagementClient
            from azure.mgmt.network import NetworkManagementClient
        except ImportError as exc:
            raise AzureSdkMissing(exc.name or "azure.mgmt") from None
        if credential is None:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError as exc:
                raise AzureSdkMissing(exc.name or "azure.identity") from None
            credential = DefaultAzureCredential()
        self.name = name
        self._section = section
        self._prices = dict(section.prices if prices is None else prices)
        self._spot_prices = dict(section.spot_prices if spot_prices is None else spot_prices)
        self._sku_cache_s = sku_cache_s
        self._clock = clock
        options: dict[str, Any] = {
            "base_url": section.endpoint,
            "credential_scopes": [section.endpoint.rstrip("/") + "/.default"],
            "connection_verify": connection_verify,
            "polling_interval": polling_interval_s,
            "retry_policy": retry_policy(retry_total, max_retry_after_s),
            "connection_timeout": 20,
            "read_timeout": 120,
        }
        self._compute = ComputeManagementClient(credential, section.subscription_id, **options)
        self._network = NetworkManagementClient(credential, section.subscription_id, **options)
        self._lock = threading.RLock()
        self._launches: dict[str, _Operation] = {}
        self._removals: dict[str, _Operation] = {}
        self._background: list[_Operation] = []  # NIC deletions, abandoned creations
        self._removing: set[str] = set()  # request ids shoal asked to remove
        self._seen: dict[str, _Seen] = {}
        self._clusters: set[str] = set()
        self._events: list[ProviderEvent] = []
        self._skus: tuple[float, list[Any]] | None = None
        self._unpriced_told: set[str] = set()
        self._ssh_key: str | None = section.ssh_public_key

    # ------------------------------------------------------------------ offers

    def offers(self, instance_type: str | None, zones: tuple[str, ...], spot: bool) -> list[Offer]:
        found, unpriced = sku_offers(
            self._resource_skus(),
            provider=self.name,
            location=self._section.location,
            instance_type=instance_type,
            zones=zones,
            spot=spot,
            prices=self._prices,
            spot_prices=self._spot_prices,
        )
        for sku in sorted(set(unpriced) - self._unpriced_told):
            log.warning("azure: no price for %s in the provider's price table: not offered", sku)
            self._unpriced_told.add(sku)
        return found

    def _resource_skus(self) -> list[Any]:
        now = self._clock()
        if self._skus is not None and now - self._skus[0] < self._sku_cache_s:
            return self._skus[1]
        location = self._section.location
        try:
            skus = list(self._compute.resource_skus.list(filter=f"location eq '{location}'"))
        except Exception as exc:
            raise self._error(exc, None, f"listing the VM sizes of {location}") from exc
        self._skus = (now, skus)
        return skus

    # ------------------------------------------------------------------ launch

    def launch(self, request: LaunchRequest) -> Instance:
        rid = request.request_id
        name = vm_name(rid)
        key = request.offer.key
        with self._lock:
            self._clusters.add(request.cluster)
            if rid in self._launches:
                return self._pending(request, name)
        existing = self._get_vm(name, key)
        if existing is not None:
            return self._instance(existing, {})
        section = self._section
        rg = section.resource_group
        try:
            nic = self._network.network_interfaces.begin_create_or_update(
                rg,
                nic_name(name),
                nic_body(section.location, section.subnet_id, machine_tags(request)),
            ).result()
        except Exception as exc:
            raise self._error(exc, key, f"creating the network interface of {name}") from exc
        body = vm_body(
            request,
            location=section.location,
            image=section.image,
            admin_user=section.admin_user,
            ssh_public_key=self._public_key(),
            nic_id=nic.id,
            eviction_policy="Deallocate" if section.removal == "deallocate" else "Delete",
        )
        try:
            poller = self._compute.virtual_machines.begin_create_or_update(rg, name, body)
        except Exception as exc:
            self._delete_nic(name)  # the VM was refused: leave nothing behind
            raise self._error(
                exc, key, f"creating VM {name} ({request.offer.instance_type})"
            ) from exc
        with self._lock:
            self._removing.discard(rid)
            self._launches[rid] = _Operation(poller, name, key)
            self._seen[rid] = _Seen(InstanceState.PENDING, request.offer.spot, key)
        return self._pending(request, name)

    def _pending(self, request: LaunchRequest, name: str) -> Instance:
        return Instance(
            instance_id=self._vm_id(name),
            request_id=request.request_id,
            cluster=request.cluster,
            pool=request.pool,
            name=request.name,
            state=InstanceState.PENDING,
            offer_key=request.offer.key,
            launched_at=self._clock(),
            spot=request.offer.spot,
        )

    def _get_vm(self, name: str, key: str | None) -> Any | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self._compute.virtual_machines.get(
                self._section.resource_group, name, expand="instanceView"
            )
        except ResourceNotFoundError:
            return None
        except Exception as exc:
            raise self._error(exc, key, f"reading VM {name}") from exc

    def _public_key(self) -> str:
        """The admin user's SSH key: the configured one, or one made up and thrown away."""
        if self._ssh_key is None:
            self._ssh_key = throwaway_ssh_key()
        return self._ssh_key

    # ------------------------------------------------------------------ terminate

    def terminate(self, request_id: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        name = vm_name(request_id)
        with self._lock:
            self._removing.add(request_id)
            creating = self._launches.pop(request_id, None)
            if creating is not None:  # its end no longer matters, but is waited for
                self._background.append(creating)
            running = self._removals.get(request_id)
            if running is not None and not running.poller.done():
                return
        vms = self._compute.virtual_machines
        rg = self._section.resource_group
        deletes = self._section.removal == "delete"
        try:
            poller = vms.begin_delete(rg, name) if deletes else vms.begin_deallocate(rg, name)
        except ResourceNotFoundError:
            self._delete_nic(name)  # a launch that made its NIC and no VM
            return
        except Exception as exc:
            raise self._error(exc, None, f"removing VM {name}") from exc
        with self._lock:
            self._removals[request_id] = _Operation(poller, name, deletes=deletes)

    def _delete_nic(self, vm: str) -> None:
        try:
            poller = self._network.network_interfaces.begin_delete(
                self._section.resource_group, nic_name(vm)
            )
        except Exception as exc:  # the next terminate or a later sweep tries again
            log.warning("azure: could not delete %s: %s", nic_name(vm), exc)
            return
        with self._lock:
            self._background.append(_Operation(poller, vm))

    # ------------------------------------------------------------------ list and poll

    def list_instances(self, cluster: str) -> list[Instance]:
        with self._lock:
            self._clusters.add(cluster)
        self._reap()
        vms = self._list_vms()
        addresses = self._addresses()
        instances = [self._instance(vm, addresses) for vm in vms]
        self._observe(instances)
        return [i for i in instances if i.cluster == cluster]

    def poll_errors(self) -> list[ProviderEvent]:
        self._reap()
        if self._clusters:
            try:
                self._observe([self._instance(vm, {}) for vm in self._list_vms()])
            except ProviderError as exc:
                log.warning("azure: could not list VMs to look for evictions: %s", exc.message)
        with self._lock:
            events, self._events = self._events, []
        return events

    def _list_vms(self) -> list[Any]:
        rg = self._section.resource_group
        try:
            vms = list(self._compute.virtual_machines.list(rg, expand="instanceView"))
        except Exception as exc:
            raise self._error(exc, None, f"listing the VMs of resource group {rg}") from exc
        mine = [vm for vm in vms if TAG_REQUEST in (vm.tags or {}) and TAG_CLUSTER in vm.tags]
        for vm in mine:
            if vm.instance_view is None:  # an ARM that does not expand lists: ask each VM
                vm.instance_view = self._compute.virtual_machines.instance_view(rg, vm.name)
        return mine

    def _addresses(self) -> dict[str, str]:
        """Private address of each VM (by its id, lower-cased), from the NICs of the group."""
        rg = self._section.resource_group
        try:
            nics = list(self._network.network_interfaces.list(rg))
        except Exception as exc:
            raise self._error(exc, None, f"listing the network interfaces of {rg}") from exc
        found: dict[str, str] = {}
        for nic in nics:
            configs = nic.ip_configurations or []
            if nic.virtual_machine is not None and configs and configs[0].private_ip_address:
                found[nic.virtual_machine.id.lower()] = configs[0].private_ip_address
        return found

    def _instance(self, vm: Any, addresses: Mapping[str, str]) -> Instance:
        tags = vm.tags or {}
        view = vm.instance_view
        codes = [s.code for s in (view.statuses or []) if s.code] if view is not None else []
        return Instance(
            instance_id=vm.id,
            request_id=tags.get(TAG_REQUEST, ""),
            cluster=tags.get(TAG_CLUSTER, ""),
            pool=tags.get(TAG_POOL, ""),
            name=tags.get(TAG_NAME, vm.name),
            state=instance_state(vm.provisioning_state, codes),
            offer_key=tags.get(TAG_OFFER, ""),
            address=addresses.get((vm.id or "").lower()),
            launched_at=vm.time_created.timestamp() if vm.time_created else None,
            spot=(vm.priority or "").lower() == "spot",
        )

    def _observe(self, instances: list[Instance]) -> None:
        """Spot VMs of our clusters that went (deallocated, deleted) without shoal asking."""
        now = self._clock()
        current = {i.request_id: i for i in instances if i.cluster in self._clusters}
        with self._lock:
            for rid, before in list(self._seen.items()):
                after = current.get(rid)
                if rid in self._removing:
                    if after is None:
                        self._removing.discard(rid)
                        del self._seen[rid]
                    continue
                if rid in self._launches and after is None:
                    continue  # ARM has not shown the VM it accepted yet
                taken = after is None or after.state in GONE
                if before.spot and before.state in LIVE and taken:
                    how = "deleted" if after is None else "deallocated"
                    self._events.append(
                        ProviderEvent(
                            rid,
                            ErrorKind.PREEMPTED,
                            f"spot VM {vm_name(rid)} was evicted by Azure ({how})",
                            now,
                            before.offer_key,
                        )
                    )
                if after is None:
                    del self._seen[rid]
            for rid, inst in current.items():
                self._seen[rid] = _Seen(inst.state, inst.spot, inst.offer_key)

    def _reap(self) -> None:
        """Collect the long-running operations that ended: failed creations become events (and
        their half-made VM is deleted); ended deletions have their NIC deleted too."""
        with self._lock:
            launches = [(r, op) for r, op in self._launches.items() if op.poller.done()]
            removals = [(r, op) for r, op in self._removals.items() if op.poller.done()]
            for rid, _ in launches:
                del self._launches[rid]
            for rid, _ in removals:
                del self._removals[rid]
            self._background = [op for op in self._background if not op.poller.done()]
        for rid, op in launches:
            failure = self._outcome(op, f"creating VM {op.vm}")
            if failure is not None:
                self._record(rid, failure)
                try:
                    self.terminate(rid)  # delete the half-made VM (and its NIC)
                except ProviderError as exc:
                    log.warning("azure: could not remove the failed VM %s: %s", op.vm, exc)
        for rid, op in removals:
            failure = self._outcome(op, f"removing VM {op.vm}")
            if failure is not None:
                self._record(rid, failure)
                with self._lock:
                    self._removing.add(rid)
            elif op.deletes:
                self._delete_nic(op.vm)

    def _outcome(self, op: _Operation, doing: str) -> ProviderError | None:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        try:
            op.poller.result()
        except ResourceNotFoundError:
            return None
        except HttpResponseError as exc:  # a poll of a VM deleted meanwhile: a 404, not a kind
            if exc.status_code == HTTPStatus.NOT_FOUND:
                return None
            return self._error(exc, op.offer_key, doing)
        except Exception as exc:
            return self._error(exc, op.offer_key, doing)
        return None

    def _record(self, request_id: str, error: ProviderError) -> None:
        with self._lock:
            self._events.append(
                ProviderEvent(request_id, error.kind, error.message, self._clock(), error.offer_key)
            )

    # ------------------------------------------------------------------ helpers

    def settle(self, timeout_s: float = 30.0) -> bool:
        """Wait until every operation shoal started has ended (and what follows it: the NIC
        after its VM); True if they all did in time. For tests and for ``close``."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                ops = [*self._launches.values(), *self._removals.values(), *self._background]
            if not ops:
                return True
            for op in ops:
                with contextlib.suppress(Exception):  # how it ended is _reap's to judge
                    op.poller.wait(max(0.0, deadline - time.monotonic()))
            self._reap()
            if time.monotonic() >= deadline:
                with self._lock:
                    return not (self._launches or self._removals or self._background)

    def _vm_id(self, name: str) -> str:
        s = self._section
        return (
            f"/subscriptions/{s.subscription_id}/resourceGroups/{s.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachines/{name}"
        )

    @staticmethod
    def _error(exc: BaseException, offer_key: str | None, doing: str) -> ProviderError:
        if isinstance(exc, ProviderError):
            return exc
        from azure.core.exceptions import AzureError

        if not isinstance(exc, AzureError):
            raise exc
        return provider_error(exc, offer_key=offer_key, doing=doing)

    def close(self) -> None:
        self.settle(timeout_s=5.0)
        self._compute.close()
        self._network.close()
