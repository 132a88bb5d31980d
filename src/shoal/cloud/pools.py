"""The cloud file: the providers shoal may create machines with, and the node pools it scales.

```yaml
cluster: lab                       # written on every machine's tags; one name per server
providers:
  lab: {type: local, endpoint: http://198.18.5.254:7600}
  az: {type: azure, subscription_id: ..., resource_group: shoal-rg, location: westeurope}
pools:
  - name: cpu
    provider: lab
    instance_type: small           # or `requirements: {cpus: 4, memory: 16Gi, gpus: 1}`
    zones: [z1, z2]                # tried in price order; empty: every zone
    min: 0
    max: 4
    spot: false
    labels: {team: rl}
    idle_timeout: 2m               # an idle node is drained and removed after this long
    join_timeout: 5m               # a machine that has not joined by then is removed
```

Problems name the field by its path with the line, like the job file's and the cluster file's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shoal.spec.diagnostics import validate_collecting
from shoal.spec.errors import ProblemCollector, SpecError, SpecProblem
from shoal.spec.quantities import CpuAmount, MemoryAmount
from shoal.spec.source import parse_document, read_settings_file
from shoal.spec.units import (
    cpu_millis,
    duration_seconds,
    memory_mib,
)

POOL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9._/:-]{0,63}$")
INSTALL_MODES = ("preinstalled", "wheelhouse", "pinned")


class LocalProviderSection(BaseModel):
    """The namespace-backed provider: its cloud daemon's address (``shoal cloud local serve``)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["local"]
    endpoint: str


class AzureProviderSection(BaseModel):
    """Azure Resource Manager: credentials come from azure-identity's DefaultAzureCredential."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["azure"]
    subscription_id: str
    resource_group: str
    location: str
    subnet_id: str  # the virtual network subnet machines join (…/subnets/NAME)
    image: str  # an image id, or publisher:offer:sku:version
    admin_user: str = "shoal"
    ssh_public_key: str | None = None
    # ARM's address; only tests (the fake ARM endpoint) change it
    endpoint: str = "https://management.azure.com"
    # what removing a machine does: "delete" (nothing left to bill) or "deallocate" (disks kept)
    removal: Literal["delete", "deallocate"] = "delete"
    # price per hour of each VM size (pay-as-you-go, and spot): a size without one is not offered
    prices: dict[str, float] = Field(default_factory=dict)
    spot_prices: dict[str, float] = Field(default_factory=dict)


ProviderSection = Annotated[
    LocalProviderSection | AzureProviderSection, Field(discriminator="type")
]


class Requirements(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpus: CpuAmount = 1
    memory: MemoryAmount = "1Gi"
    gpus: int = Field(0, ge=0, le=64)
    gpu_type: str | None = None


def _duration(value: object) -> int:
    seconds = duration_seconds(value)
    if seconds <= 0:
        raise ValueError(f"must be a positive duration, got {value!r}")
    return seconds


class PoolSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    provider: str
    instance_type: str | None = None
    requirements: Requirements | None = None
    zones: list[str] = Field(default_factory=list)
    min: int = Field(0, ge=0, le=10_000)
    max: int = Field(..., ge=0, le=10_000)
    spot: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    idle_timeout: int | str = "10m"
    join_timeout: int | str = "10m"
    install: Literal["preinstalled", "wheelhouse", "pinned"] = "wheelhouse"
    # with `preinstalled`: where the machine image has shoal (None: `shoal` on its PATH)
    shoal_path: str | None = Field(None, pattern=r"^/[A-Za-z0-9._/+-]*$")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not POOL_NAME.match(value):
            raise ValueError(
                f"must be lower-case letters, digits and '-', starting with a letter, "
                f"at most 31 characters, got {value!r}"
            )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not LABEL_KEY.match(key) or not LABEL_VALUE.match(text):
                raise ValueError(f"label {key}={text!r}: keys and values are letters, digits, ._/-")
        return value

    @field_validator("idle_timeout", "join_timeout")
    @classmethod
    def _timeouts(cls, value: object) -> object:
        _duration(value)
        return value

    @model_validator(mode="after")
    def _shape(self) -> PoolSection:
        if (self.instance_type is None) == (self.requirements is None):
            raise ValueError("give either instance_type or requirements (one of the two)")
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class CloudDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: str = Field(..., min_length=1, max_length=40, pattern=r"^[a-z][a-z0-9-]*$")
    providers: dict[str, ProviderSection]
    pools: list[PoolSection]


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One pool, resolved: durations in seconds, requirements in shoal's units."""

    name: str
    provider: str
    instance_type: str | None
    zones: tuple[str, ...]
    min_nodes: int
    max_nodes: int
    spot: bool
    labels: tuple[tuple[str, str], ...]
    idle_timeout_s: int
    join_timeout_s: int
    install: str
    shoal_path: str | None = None
    cpu_millis: int | None = None  # requirements (None with an instance type)
    memory_mib: int | None = None
    gpus: int | None = None
    gpu_type: str | None = None


@dataclass(frozen=True, slots=True)
class CloudConfig:
    path: Path
    cluster: str
    providers: dict[str, ProviderSection]
    pools: tuple[PoolSpec, ...]

    def pool(self, name: str) -> PoolSpec | None:
        return next((p for p in self.pools if p.name == name), None)


def load_cloud(path: Path) -> CloudConfig:
    """Read and validate a cloud file; :class:`SpecError` lists every problem with its field."""
    return parse_cloud(read_settings_file(path), path)


def parse_cloud(text: str, path: Path) -> CloudConfig:
    loaded = parse_document(text)
    problems = ProblemCollector()
    document = validate_collecting(CloudDocument, loaded.data, problems)
    _cross_checks(loaded.data, problems)  # on the raw file: said even beside other problems
    if problems.errors:
        raise SpecError(
            [
                SpecProblem(p.path, p.message, p.hint, loaded.line_of.get(p.path))
                for p in problems.errors
            ]
        )
    assert document is not None
    return CloudConfig(
        path, document.cluster, dict(document.providers), tuple(map(_resolve, document.pools))
    )


def _cross_checks(data: object, problems: ProblemCollector) -> None:
    """Pools name a declared provider, and each its own name (read from the file as written,
    so these are said together with any other problem)."""
    if not isinstance(data, dict):
        return
    providers = data.get("providers")
    declared = sorted(providers) if isinstance(providers, dict) else []
    pools = data.get("pools")
    seen: dict[str, int] = {}
    for index, pool in enumerate(pools if isinstance(pools, list) else []):
        if not isinstance(pool, dict):
            continue
        provider, name = pool.get("provider"), pool.get("name")
        if isinstance(provider, str) and isinstance(providers, dict) and provider not in declared:
            problems.error(
                f"pools[{index}].provider",
                f"no provider named {provider!r} (providers: {', '.join(declared) or 'none'})",
                "name one of the providers: section's keys",
            )
        if isinstance(name, str) and name in seen:
            problems.error(
                f"pools[{index}].name",
                f"pool name {name!r} is already used by pools[{seen[name]}]",
                "give each pool its own name",
            )
        if isinstance(name, str):
            seen.setdefault(name, index)


def _resolve(pool: PoolSection) -> PoolSpec:
    need = pool.requirements
    extra: dict[str, Any] = {}
    if need is not None:
        extra = {
            "cpu_millis": cpu_millis(need.cpus),
            "memory_mib": memory_mib(need.memory),
            "gpus": need.gpus,
            "gpu_type": need.gpu_type,
        }
    return PoolSpec(
        name=pool.name,
        provider=pool.provider,
        instance_type=pool.instance_type,
        zones=tuple(pool.zones),
        min_nodes=pool.min,
        max_nodes=pool.max,
        spot=pool.spot,
        labels=tuple(sorted(pool.labels.items())),
        idle_timeout_s=_duration(pool.idle_timeout),
        join_timeout_s=_duration(pool.join_timeout),
        install=pool.install,
        shoal_path=pool.shoal_path,
        **extra,
    )
