"""The local cloud's behaviour: launches checked against quotas and zone capacity, machines that
boot after a delay, scheduled preemptions with a notice, terminations, and the state kept on disk.

A ticker thread runs the clock: it boots machines whose boot delay has passed, shows preemption
notices, preempts, and reaps the user data processes it started. Terminations run in threads of
their own (a process group's grace can take seconds); the API answers at once.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from shoal.cloud.local import machines
from shoal.cloud.local.catalog import Catalog
from shoal.cloud.local.state import CloudState, MachineRecord, load_state, save_state
from shoal.cloud.provider import ErrorKind, InstanceState

log = logging.getLogger("shoal.cloud.local")
NETNS_PREFIX = "shc-"
TICK_S = 0.2
PENDING, RUNNING = InstanceState.PENDING.value, InstanceState.RUNNING.value
STOPPING, TERMINATED = InstanceState.STOPPING.value, InstanceState.TERMINATED.value


class CloudRefusal(Exception):
    """A launch the cloud will not do, with the HTTP status and the provider's error kind."""

    def __init__(
        self, status: int, kind: ErrorKind, message: str, offer_key: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.offer_key = offer_key


@dataclass(frozen=True)
class Network:
    bridge_netns: str
    bridge: str
    subnet: ipaddress.IPv4Network
    first_host: int  # machines get addresses from this host number of the subnet on

    def addresses(self) -> list[str]:
        hosts = list(self.subnet.hosts())
        return [str(h) for h in hosts[self.first_host - 1 :]]


@dataclass(frozen=True)
class LaunchSpec:
    request_id: str
    cluster: str
    pool: str
    name: str
    zone: str
    instance_type: str
    spot: bool
    user_data: str
    tags: dict[str, str]


class LocalCloud:
    def __init__(
        self, directory: Path, catalog: Catalog, network: Network, grace_s: float = 5.0
    ) -> None:
        self.directory = directory
        self.catalog = catalog
        self.network = network
        self.grace_s = grace_s
        self.lock = threading.RLock()
        self.state: CloudState = load_state(directory)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}  # request id -> user data
        self.stopping: dict[str, threading.Thread] = {}
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_forever, name="cloud-clock", daemon=True)

    # ---- life ----

    def start(self) -> None:
        self._recover()
        self._ticker.start()

    def close(self, terminate_all: bool = False) -> None:
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join(timeout=5)
        if terminate_all:
            with self.lock:
                active = [m.request_id for m in self.state.machines.values() if m.active]
            for request_id in active:
                self.terminate(request_id, reason="terminated")
        for thread in list(self.stopping.values()):
            thread.join(timeout=self.grace_s + 15)

    def _recover(self) -> None:
        """After a restart: machines whose namespace is gone are lost; terminations resume."""
        now = time.time()
        with self.lock:
            for machine in self.state.machines.values():
                if not machine.active:
                    continue
                if not machines.netns_exists(machine.netns):
                    self._ended(machine, now, "lost", "its namespace was gone at restart")
                    self.state.add_event(
                        machine.request_id,
                        ErrorKind.TRANSIENT.value,
                        f"machine {machine.name} ({machine.instance_id}) was lost while the "
                        "cloud was down",
                        now,
                        machine.offer_key,
                    )
                elif machine.state == STOPPING:
                    self._terminate_later(machine, machine.end_reason or "terminated")
            self._save()

    # ---- the API's operations ----

    def launch(self, spec: LaunchSpec) -> tuple[MachineRecord, bool]:
        """The machine of ``spec.request_id``, and whether this call made it."""
        with self.lock:
            known = self.state.machines.get(spec.request_id)
            if known is not None:
                return known, False
            kind = self.catalog.types.get(spec.instance_type)
            offer_key = f"{self.catalog.region}/{spec.zone}/{spec.instance_type}" + (
                "/spot" if spec.spot else ""
            )
            self._check_offer(spec, offer_key)
            assert kind is not None
            self._check_quota(kind.cores, kind.family, offer_key)
            address = self._free_address(offer_key)
            machine = self._record(spec, offer_key, address, kind.cores, kind.family)
            script = self._instance_dir(machine) / "user-data"
            script.parent.mkdir(parents=True, exist_ok=True)
            script.touch(mode=0o600)
            script.write_text(spec.user_data, encoding="utf-8")
            try:
                machines.create_machine(
                    machine.netns,
                    machine.veth,
                    self.network.bridge_netns,
                    self.network.bridge,
                    address,
                    self.network.subnet.prefixlen,
                )
            except machines.MachineError as exc:
                raise CloudRefusal(
                    503, ErrorKind.TRANSIENT, f"could not make the machine: {exc}", offer_key
                ) from None
            self.state.launches += 1
            self.state.spot_launches += spec.spot
            machine.never_boots = self.state.launches in self.catalog.never_boot
            preemption = spec.spot and self.catalog.preemption_of(self.state.spot_launches)
            if preemption:
                machine.preempt_after_s = preemption.after_s
                machine.preempt_notice_s = preemption.notice_s
                machine.event_id = str(uuid.uuid4()).upper()
            self.state.machines[spec.request_id] = machine
            self._save()
            log.info("launched %s (%s) at %s", machine.name, machine.instance_id, address)
            return machine, True

    def terminate(self, request_id: str, reason: str = "terminated") -> MachineRecord | None:
        """Start ending the machine (idempotent); None if the cloud never had it."""
        with self.lock:
            machine = self.state.machines.get(request_id)
            if machine is None or machine.state in (STOPPING, TERMINATED):
                return machine
            self._terminate_later(machine, reason)
            self._save()
            return machine

    def machines_of(self, cluster: str | None, include_ended: bool) -> list[MachineRecord]:
        with self.lock:
            return [
                m
                for m in self.state.machines.values()
                if (cluster is None or m.cluster == cluster) and (include_ended or m.active)
            ]

    def approve_preemption(self, address: str, event_ids: list[str]) -> bool:
        """Scheduled Events' StartRequests: a machine lets its announced preemption happen now."""
        with self.lock:
            machine = self.state.by_address(address)
            if machine is None or machine.event_id not in event_ids or not machine.notice_shown:
                return False
            machine.preempt_at = min(machine.preempt_at or time.time(), time.time())
            self._save()
            return True

    # ---- checks ----

    def _check_offer(self, spec: LaunchSpec, offer_key: str) -> None:
        capacity = self.catalog.zones.get(spec.zone)
        kind = self.catalog.types.get(spec.instance_type)
        if capacity is None or kind is None or spec.instance_type not in capacity:
            raise CloudRefusal(
                404,
                ErrorKind.CAPACITY,
                f"zone {spec.zone!r} sells no instance type {spec.instance_type!r} "
                f"(offers: {', '.join(o.key for o in self.catalog.offers()) or 'none'})",
                offer_key,
            )
        if spec.spot and kind.spot_price is None:
            raise CloudRefusal(
                404, ErrorKind.CAPACITY, f"{spec.instance_type} has no spot offer", offer_key
            )
        used = sum(
            1
            for m in self.state.machines.values()
            if m.active and m.zone == spec.zone and m.instance_type == spec.instance_type
        )
        if used >= capacity[spec.instance_type]:
            raise CloudRefusal(
                409,
                ErrorKind.CAPACITY,
                f"zone {spec.zone} has no {spec.instance_type} machine free "
                f"({used} of {capacity[spec.instance_type]} in use); try another zone",
                offer_key,
            )

    def _check_quota(self, cores: float, family: str, offer_key: str) -> None:
        active = [m for m in self.state.machines.values() if m.active]
        total = sum(m.cores for m in active)
        limit = self.catalog.quota_cores
        if limit is not None and total + cores > limit:
            raise CloudRefusal(
                403,
                ErrorKind.QUOTA,
                f"the account's quota of {limit:g} cores would be exceeded ({total:g} in use, "
                f"{cores:g} asked); raise quotas.cores or free machines",
                offer_key,
            )
        family_limit = self.catalog.family_quotas.get(family)
        in_family = sum(m.cores for m in active if m.family == family)
        if family_limit is not None and in_family + cores > family_limit:
            raise CloudRefusal(
                403,
                ErrorKind.QUOTA,
                f"the quota of {family_limit:g} cores for family {family} would be exceeded "
                f"({in_family:g} in use, {cores:g} asked); raise quotas.families.{family}",
                offer_key,
            )

    def _free_address(self, offer_key: str) -> str:
        taken = {m.address for m in self.state.machines.values() if m.active}
        for address in self.network.addresses():
            if address not in taken:
                return address
        raise CloudRefusal(
            409,
            ErrorKind.CAPACITY,
            f"no address left in {self.network.subnet} from host {self.network.first_host}",
            offer_key,
        )

    def _record(
        self, spec: LaunchSpec, offer_key: str, address: str, cores: float, family: str
    ) -> MachineRecord:
        taken = {m.instance_id for m in self.state.machines.values()}
        suffix = secrets.token_hex(4)
        while f"i-{suffix}" in taken:
            suffix = secrets.token_hex(4)
        now = time.time()
        return MachineRecord(
            instance_id=f"i-{suffix}",
            request_id=spec.request_id,
            cluster=spec.cluster,
            pool=spec.pool,
            name=spec.name,
            zone=spec.zone,
            instance_type=spec.instance_type,
            spot=spec.spot,
            offer_key=offer_key,
            cores=cores,
            family=family,
            address=address,
            netns=f"{NETNS_PREFIX}{suffix}",  # 12 characters: link names stay under 16
            veth=f"shcv{suffix}",
            tags=dict(spec.tags),
            launched_at=now,
            boot_at=now + self.catalog.boot_delay_s,
        )

    # ---- the clock ----

    def _tick_forever(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick(time.time())
            except Exception:  # the clock must go on; the log says what broke
                log.exception("the cloud's clock failed a tick")

    def tick(self, now: float) -> None:
        with self.lock:
            changed = False
            for machine in list(self.state.machines.values()):
                if machine.state == PENDING and machine.boot_at <= now:
                    self._boot(machine, now)
                    changed = True
                elif machine.state == RUNNING and machine.preempt_at is not None:
                    changed |= self._preemption_step(machine, now)
            for request_id, process in list(self.processes.items()):
                if process.poll() is not None:
                    del self.processes[request_id]
            if changed:
                self._save()

    def _boot(self, machine: MachineRecord, now: float) -> None:
        machine.state = RUNNING
        machine.running_at = now
        if machine.preempt_after_s is not None:
            machine.preempt_at = now + machine.preempt_after_s
        if machine.never_boots:
            log.info("%s runs but will never boot (catalog: never_boot)", machine.name)
            return
        home = self._instance_dir(machine)
        root = home / "root"
        root.mkdir(parents=True, exist_ok=True)
        env = {
            "HOME": "/root",
            # the image has shoal installed: this host's, the one the cloud runs from
            "PATH": f"{Path(sys.executable).parent}:{machines.BASE_PATH}",
            # The machines share this host's file systems: each keeps its files in a root of
            # its own, and runs its agent in the foreground (it has no init of its own).
            "SHOAL_ROOT": str(root),
            "SHOAL_AGENT_FOREGROUND": "1",
        }
        try:
            boot = machines.run_user_data(
                machine.netns, home / "user-data", home / "console.log", env, root
            )
        except OSError as exc:
            self.state.add_event(
                machine.request_id,
                ErrorKind.TRANSIENT.value,
                f"machine {machine.name} could not run its user data: {exc}",
                now,
                machine.offer_key,
            )
            self._terminate_later(machine, "failed")
            return
        self.processes[machine.request_id] = boot.process
        machine.pid, machine.pid_start = boot.pid, boot.started

    def _preemption_step(self, machine: MachineRecord, now: float) -> bool:
        assert machine.preempt_at is not None
        if now >= machine.preempt_at:
            self.state.add_event(
                machine.request_id,
                ErrorKind.PREEMPTED.value,
                f"spot machine {machine.name} ({machine.instance_id}) was preempted",
                now,
                machine.offer_key,
            )
            self._terminate_later(machine, "preempted")
            return True
        if not machine.notice_shown and now >= machine.preempt_at - machine.preempt_notice_s:
            machine.notice_shown = True
            machine.incarnation += 1
            return True
        return False

    # ---- ending ----

    def _terminate_later(self, machine: MachineRecord, reason: str) -> None:
        machine.state = STOPPING
        machine.end_reason = reason
        if machine.notice_shown:
            machine.incarnation += 1  # the event leaves the document
            machine.notice_shown = False
        thread = threading.Thread(
            target=self._finish_termination,
            args=(machine.request_id,),
            name=f"terminate-{machine.instance_id}",
            daemon=True,
        )
        self.stopping[machine.request_id] = thread
        thread.start()

    def _finish_termination(self, request_id: str) -> None:
        with self.lock:
            machine = self.state.machines[request_id]
            process = self.processes.pop(request_id, None)
        try:
            machines.stop_machine_processes(
                machine.netns, machine.pid, machine.pid_start, self.grace_s, process
            )
            machines.delete_machine(machine.netns, machine.veth, self.network.bridge_netns)
        except Exception:
            log.exception("ending %s failed; it stays stopping until a restart", machine.name)
            return
        with self.lock:
            self._ended(machine, time.time(), machine.end_reason or "terminated", None)
            self.stopping.pop(request_id, None)
            self._save()
        log.info("%s (%s) %s", machine.name, machine.instance_id, machine.end_reason)

    def _ended(self, machine: MachineRecord, now: float, reason: str, why: str | None) -> None:
        machine.state = TERMINATED
        machine.ended_at = now
        machine.end_reason = reason
        if why:
            log.warning("%s: %s", machine.name, why)

    # ---- helpers ----

    def _instance_dir(self, machine: MachineRecord) -> Path:
        return self.directory / "instances" / machine.instance_id

    def _save(self) -> None:
        save_state(self.directory, self.state)
