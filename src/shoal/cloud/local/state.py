"""What the local cloud holds, kept in ``DIR/state.json`` (written to a temporary file, then
renamed over the old one: a crash leaves the old state or the new, never half of one)."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from shoal.cloud.provider import Instance, InstanceState

STATE_FILE = "state.json"
MAX_EVENTS = 10_000  # the oldest are dropped past this many; cursors keep counting


@dataclass
class MachineRecord:
    """One machine, from its launch to its end (terminated machines are kept, for the record
    and so that the same request id never starts a second one)."""

    instance_id: str
    request_id: str
    cluster: str
    pool: str
    name: str
    zone: str
    instance_type: str
    spot: bool
    offer_key: str
    cores: float
    family: str
    address: str
    netns: str
    veth: str  # its bridge-side end, in the bridge's namespace
    state: str = InstanceState.PENDING.value
    tags: dict[str, str] = field(default_factory=dict)
    launched_at: float = 0.0
    boot_at: float = 0.0  # when the user data runs
    running_at: float | None = None
    never_boots: bool = False
    preempt_after_s: float | None = None  # from its boot
    preempt_notice_s: float = 0.0
    preempt_at: float | None = None
    event_id: str | None = None  # of its scheduled Preempt event
    incarnation: int = 1  # DocumentIncarnation of its scheduled events
    notice_shown: bool = False
    pid: int | None = None  # the user data's bash: a session and process group of its own
    pid_start: str | None = None  # its start time (/proc/PID/stat), so a reused pid is spared
    ended_at: float | None = None
    end_reason: str | None = None  # terminated, preempted, lost

    @property
    def active(self) -> bool:
        return self.state != InstanceState.TERMINATED.value

    def to_instance(self) -> Instance:
        return Instance(
            instance_id=self.instance_id,
            request_id=self.request_id,
            cluster=self.cluster,
            pool=self.pool,
            name=self.name,
            state=InstanceState(self.state),
            offer_key=self.offer_key,
            address=self.address,
            launched_at=self.launched_at,
            spot=self.spot,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MachineRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class CloudEvent:
    """A failure after a launch was accepted, or a preemption: what ``poll_errors`` reports."""

    seq: int
    request_id: str
    kind: str  # an ErrorKind value
    message: str
    at: float
    offer_key: str | None = None


@dataclass
class CloudState:
    machines: dict[str, MachineRecord] = field(default_factory=dict)  # by request id
    events: list[CloudEvent] = field(default_factory=list)
    next_seq: int = 1
    launches: int = 0  # every accepted launch, counted from 1 (never_boot counts these)
    spot_launches: int = 0  # accepted spot launches (preemptions count these)

    def add_event(
        self, request_id: str, kind: str, message: str, at: float, offer_key: str | None
    ) -> CloudEvent:
        event = CloudEvent(self.next_seq, request_id, kind, message, at, offer_key)
        self.next_seq += 1
        self.events.append(event)
        del self.events[:-MAX_EVENTS]
        return event

    def by_address(self, address: str) -> MachineRecord | None:
        return next((m for m in self.machines.values() if m.active and m.address == address), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "machines": [m.to_json() for m in self.machines.values()],
            "events": [asdict(e) for e in self.events],
            "next_seq": self.next_seq,
            "launches": self.launches,
            "spot_launches": self.spot_launches,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CloudState:
        machines = [MachineRecord.from_json(m) for m in data.get("machines", [])]
        return cls(
            machines={m.request_id: m for m in machines},
            events=[CloudEvent(**e) for e in data.get("events", [])],
            next_seq=int(data.get("next_seq", 1)),
            launches=int(data.get("launches", 0)),
            spot_launches=int(data.get("spot_launches", 0)),
        )


def load_state(directory: Path) -> CloudState:
    path = directory / STATE_FILE
    if not path.exists():
        return CloudState()
    return CloudState.from_json(json.loads(path.read_text(encoding="utf-8")))


def save_state(directory: Path, state: CloudState) -> None:
    """Write the state atomically: a temporary file in the same directory, fsynced, renamed."""
    path = directory / STATE_FILE
    temporary = directory / f".{STATE_FILE}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump(state.to_json(), out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
