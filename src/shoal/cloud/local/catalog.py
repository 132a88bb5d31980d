"""The local cloud's catalog: what it sells, where, how much of it, and how it fails.

```yaml
region: local
instance_types:
  small: {cpus: 1, memory: 2Gi, price: 0.10, spot_price: 0.03}
  gpu:   {cpus: 4, memory: 16Gi, gpus: 2, gpu_type: a100, price: 3.0, family: gpu}
zones:                          # how many machines of each type a zone holds at once
  z1: {small: 1}
  z2: {small: 4, gpu: 2}
quotas:                         # cores the account may hold: in total, and per family
  cores: 16
  families: {gpu: 8}
boot_delay: 2s                  # from the launch until the user data runs
preemptions:                    # the Nth spot launch is taken back `after` its boot,
  - {spot_launch: 1, after: 20s, notice: 10s}   # announced `notice` before
never_boot: [3]                 # the 3rd launch runs but its user data never does
```

A type's ``family`` defaults to its name; a spot offer exists for a type with a ``spot_price``.
Problems name the field by its path with the line, like the cloud file's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shoal.cloud.provider import Offer
from shoal.spec.diagnostics import validate_collecting
from shoal.spec.errors import ProblemCollector, SpecError, SpecProblem
from shoal.spec.quantities import CpuAmount, MemoryAmount
from shoal.spec.source import parse_document, read_settings_file
from shoal.spec.units import cpu_millis, duration_seconds, memory_mib

PROVIDER_NAME = "local"
NAME = r"^[a-z][a-z0-9-]{0,30}$"


def seconds(value: object) -> float:
    """A number of seconds, or a duration such as ``2s`` or ``1m``; never negative."""
    if isinstance(value, bool):
        raise ValueError("must be a duration, got a boolean")
    result = float(value) if isinstance(value, int | float) else float(duration_seconds(value))
    if result < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return result


class InstanceTypeSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpus: CpuAmount
    memory: MemoryAmount
    gpus: int = Field(0, ge=0, le=64)  # simulated: the agent is told it has this many
    gpu_type: str | None = None
    price: float = Field(..., ge=0, description="per hour")
    spot_price: float | None = Field(None, ge=0, description="per hour; None: no spot offer")
    family: str | None = None


class QuotaSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cores: float | None = Field(None, ge=0, description="all machines together; None: no limit")
    families: dict[str, float] = Field(default_factory=dict)


class PreemptionSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spot_launch: int = Field(..., ge=1, description="the Nth spot launch (counted from 1)")
    after: float | str = Field(..., description="seconds after its boot")
    notice: float | str = Field(0, description="seconds before, the Preempt event is scheduled")

    @field_validator("after", "notice")
    @classmethod
    def _durations(cls, value: object) -> object:
        seconds(value)
        return value

    @model_validator(mode="after")
    def _notice_fits(self) -> PreemptionSection:
        if seconds(self.notice) > seconds(self.after):
            raise ValueError(f"notice ({self.notice}) must not exceed after ({self.after})")
        return self


class CatalogDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")
    region: str = Field("local", pattern=NAME)
    instance_types: dict[str, InstanceTypeSection] = Field(..., min_length=1)
    zones: dict[str, dict[str, int]] = Field(..., min_length=1)
    quotas: QuotaSection = Field(default_factory=QuotaSection)
    boot_delay: float | str = 0
    preemptions: list[PreemptionSection] = Field(default_factory=list)
    never_boot: list[int] = Field(default_factory=list, description="launch ordinals (from 1)")

    @field_validator("boot_delay")
    @classmethod
    def _boot_delay(cls, value: object) -> object:
        seconds(value)
        return value


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    cpu_millis: int
    memory_mib: int
    gpus: int
    gpu_type: str | None
    price: float
    spot_price: float | None
    family: str

    @property
    def cores(self) -> float:
        return self.cpu_millis / 1000


@dataclass(frozen=True, slots=True)
class Preemption:
    spot_launch: int
    after_s: float
    notice_s: float


@dataclass(frozen=True, slots=True)
class Catalog:
    region: str
    types: dict[str, InstanceType]
    zones: dict[str, dict[str, int]]  # zone -> type -> machines it holds at once
    quota_cores: float | None
    family_quotas: dict[str, float]
    boot_delay_s: float
    preemptions: tuple[Preemption, ...]
    never_boot: frozenset[int]

    def offers(
        self, instance_type: str | None = None, zones: tuple[str, ...] = (), spot: bool = False
    ) -> list[Offer]:
        """Every (zone, type) this catalog sells matching the filter, without availability."""
        found = []
        for zone, capacity in self.zones.items():
            if zones and zone not in zones:
                continue
            for name in capacity:
                kind = self.types[name]
                if instance_type not in (None, name) or (spot and kind.spot_price is None):
                    continue
                found.append(self.offer(zone, kind, spot))
        return found

    def offer(self, zone: str, kind: InstanceType, spot: bool) -> Offer:
        price = kind.spot_price if spot and kind.spot_price is not None else kind.price
        return Offer(
            provider=PROVIDER_NAME,
            region=self.region,
            zone=zone,
            instance_type=kind.name,
            price_per_hour=price,
            cpu_millis=kind.cpu_millis,
            memory_mib=kind.memory_mib,
            gpus=kind.gpus,
            gpu_type=kind.gpu_type,
            spot=spot,
        )

    def preemption_of(self, spot_launch: int) -> Preemption | None:
        return next((p for p in self.preemptions if p.spot_launch == spot_launch), None)


def load_catalog(path: Path) -> Catalog:
    """Read and validate a catalog; :class:`SpecError` lists every problem with its field."""
    return parse_catalog(read_settings_file(path))


def parse_catalog(text: str) -> Catalog:
    loaded = parse_document(text)
    problems = ProblemCollector()
    document = validate_collecting(CatalogDocument, loaded.data, problems)
    if document is not None:
        _cross_checks(document, problems)
    if problems.errors:
        raise SpecError(
            [
                SpecProblem(p.path, p.message, p.hint, loaded.line_of.get(p.path))
                for p in problems.errors
            ]
        )
    assert document is not None
    return _resolve(document)


def _cross_checks(document: CatalogDocument, problems: ProblemCollector) -> None:
    known = ", ".join(sorted(document.instance_types))
    for zone, capacity in document.zones.items():
        for name, count in capacity.items():
            if name not in document.instance_types:
                problems.error(
                    f"zones.{zone}.{name}",
                    f"no instance type named {name!r} (instance_types: {known})",
                    "name one of the instance_types: section's keys",
                )
            if count < 0:
                problems.error(f"zones.{zone}.{name}", f"must be >= 0, got {count}")
    for index, ordinal in enumerate(document.never_boot):
        if ordinal < 1:
            problems.error(f"never_boot[{index}]", f"launches count from 1, got {ordinal}")


def _resolve(document: CatalogDocument) -> Catalog:
    types = {
        name: InstanceType(
            name=name,
            cpu_millis=cpu_millis(section.cpus),
            memory_mib=memory_mib(section.memory),
            gpus=section.gpus,
            gpu_type=section.gpu_type,
            price=section.price,
            spot_price=section.spot_price,
            family=section.family or name,
        )
        for name, section in document.instance_types.items()
    }
    preemptions = tuple(
        Preemption(p.spot_launch, seconds(p.after), seconds(p.notice)) for p in document.preemptions
    )
    return Catalog(
        region=document.region,
        types=types,
        zones={zone: dict(capacity) for zone, capacity in document.zones.items()},
        quota_cores=document.quotas.cores,
        family_quotas=dict(document.quotas.families),
        boot_delay_s=seconds(document.boot_delay),
        preemptions=preemptions,
        never_boot=frozenset(document.never_boot),
    )
