"""Trace readers: the Philly trace (Pollux's copy), Tiresias' job list and shoal's own job list.

The Alibaba pod/node trace lives in ``sim/alibaba.py``. Each reader returns a ``Trace`` sorted
by submission time; a row that cannot be read raises ``TraceError`` naming file, line and column.
Column meanings and units: ``../shared/traces/README.md``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import RoleRequest
from shoal.sim.workload import SimJob, Trace, TraceError, gpu_gang, sort_jobs
from shoal.spec.model import PriorityClass
from shoal.spec.units import cpu_millis, memory_mib


class TraceFormat(StrEnum):
    PHILLY = "philly"
    ALIBABA = "alibaba"
    TIRESIAS = "tiresias"
    SHOAL = "shoal"


@dataclass(frozen=True, slots=True)
class GangRules:
    """How a trace job that only gives a GPU count becomes a gang on this cluster."""

    gpus_per_node: int
    cpu_millis_per_gpu: int = 0
    memory_mib_per_gpu: int = 0

    def gang(self, gpus: int) -> tuple[RoleRequest, ...]:
        return gpu_gang(gpus, self.gpus_per_node, self.cpu_millis_per_gpu, self.memory_mib_per_gpu)


PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
TIRESIAS_COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")


def detect_format(path: Path) -> TraceFormat:
    """By the header line (CSV) or the file suffix (shoal's YAML/JSON job list)."""
    if path.suffix.lower() in {".yaml", ".yml", ".json"}:
        return TraceFormat.SHOAL
    with path.open(encoding="utf-8") as handle:
        header = set(handle.readline().strip().split(","))
    if set(PHILLY_COLUMNS) <= header:
        return TraceFormat.PHILLY
    if set(TIRESIAS_COLUMNS) <= header:
        return TraceFormat.TIRESIAS
    if {"name", "cpu_milli", "num_gpu", "creation_time"} <= header:
        return TraceFormat.ALIBABA
    raise TraceError(
        f"{path}: cannot tell the trace format from its header {sorted(header)}; "
        "pass --format philly|alibaba|tiresias|shoal"
    )


def csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for every non-blank row, after checking the header has ``required``."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: the header lacks column(s) {', '.join(missing)}")
        for row in reader:
            if not any((value or "").strip() for value in row.values()):
                continue  # the Philly file ends with a blank line
            yield reader.line_num, row


def number(path: Path, line: int, row: dict[str, str], column: str, kind: type = float) -> Any:
    text = (row.get(column) or "").strip()
    try:
        return kind(float(text)) if kind is int else kind(text)
    except ValueError:
        raise TraceError(
            f"{path}:{line}: column {column!r} must be a number, got {text!r}"
        ) from None


def read_philly(path: Path, rules: GangRules, limit: int | None = None) -> Trace:
    """Submission times become seconds after the earliest one (the file is not sorted)."""
    parsed: list[tuple[datetime, float, int, str, int]] = []
    for line, row in csv_rows(path, PHILLY_COLUMNS):
        try:
            stamp = datetime.fromisoformat(row["timestamp"].strip())
        except ValueError:
            raise TraceError(
                f"{path}:{line}: column 'timestamp' must look like 2017-10-03 14:02:05, "
                f"got {row['timestamp']!r}"
            ) from None
        gpus = number(path, line, row, "num_gpus", int)
        if gpus <= 0:
            raise TraceError(f"{path}:{line}: column 'num_gpus' must be at least 1, got {gpus}")
        duration = number(path, line, row, "duration")
        parsed.append((stamp, duration, gpus, row["cluster"].strip(), line))
    if not parsed:
        raise TraceError(f"{path}: no jobs in the trace")
    parsed.sort(key=lambda item: (item[0], item[4]))
    if limit is not None:
        parsed = parsed[:limit]
    start = parsed[0][0]
    jobs = [
        SimJob(
            f"philly-{line}",
            (stamp - start).total_seconds(),
            duration,
            rules.gang(gpus),
            virtual_cluster=cluster,
        )
        for stamp, duration, gpus, cluster, line in parsed
    ]
    return Trace(sort_jobs(jobs), f"{path.name} (Philly, Pollux copy)")


def read_tiresias(path: Path, rules: GangRules, limit: int | None = None) -> Trace:
    jobs = []
    for line, row in csv_rows(path, TIRESIAS_COLUMNS):
        gpus = number(path, line, row, "num_gpu", int)
        if gpus <= 0:
            raise TraceError(f"{path}:{line}: column 'num_gpu' must be at least 1, got {gpus}")
        jobs.append(
            SimJob(
                f"tiresias-{row['job_id'].strip()}",
                number(path, line, row, "submit_time"),
                number(path, line, row, "duration"),
                rules.gang(gpus),
            )
        )
    ordered = sort_jobs(jobs)
    return Trace(ordered[:limit] if limit is not None else ordered, f"{path.name} (Tiresias)")


class _RoleEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    instances: int = Field(default=1, ge=1)
    gpu: int = Field(default=0, ge=0)
    cpu: float | str = 0
    memory: int | str = 0
    gpu_type: str | None = None


class _JobEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    submit: float = Field(ge=0, description="seconds after the trace starts")
    duration: float = Field(ge=0, description="run time in seconds on an idle cluster")
    virtual_cluster: str = "default"
    priority: PriorityClass | int = PriorityClass.TEST
    user: str = ""
    gpus: Annotated[int, Field(ge=1)] | None = None
    roles: list[_RoleEntry] | None = None

    @field_validator("roles")
    @classmethod
    def _some_roles(cls, roles: list[_RoleEntry] | None) -> list[_RoleEntry] | None:
        if roles is not None and not roles:
            raise ValueError("give at least one role, or use `gpus` instead")
        return roles


class _JobList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[_JobEntry] = Field(min_length=1)


def _roles(entry: _JobEntry, rules: GangRules) -> tuple[RoleRequest, ...]:
    if (entry.gpus is None) == (entry.roles is None):
        raise TraceError(f"job {entry.id}: give exactly one of `gpus` (a GPU count) or `roles`")
    if entry.gpus is not None:
        return rules.gang(entry.gpus)
    assert entry.roles is not None
    return tuple(
        RoleRequest(
            role.name,
            role.instances,
            ResourceVector(cpu_millis(role.cpu), memory_mib(role.memory), role.gpu),
            role.gpu_type,
            (),
        )
        for role in entry.roles
    )


def read_shoal(path: Path, rules: GangRules, limit: int | None = None) -> Trace:
    """shoal's job list (YAML or JSON): ``jobs: [{id, submit, duration, gpus | roles, ...}]``."""
    text = path.read_text(encoding="utf-8")
    try:
        raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
        listing = _JobList.model_validate(raw)
    except (yaml.YAMLError, json.JSONDecodeError) as error:
        raise TraceError(f"{path}: not valid YAML/JSON: {error}") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TraceError(f"{path}: {where}: {first['msg']}") from None
    seen: set[str] = set()
    jobs = []
    for entry in listing.jobs:
        if entry.id in seen:
            raise TraceError(f"{path}: job id {entry.id!r} appears twice; ids must be unique")
        seen.add(entry.id)
        priority = (
            entry.priority.rank if isinstance(entry.priority, PriorityClass) else entry.priority
        )
        jobs.append(
            SimJob(
                entry.id,
                entry.submit,
                entry.duration,
                _roles(entry, rules),
                entry.virtual_cluster,
                priority,
                entry.user,
            )
        )
    ordered = sort_jobs(jobs)
    return Trace(ordered[:limit] if limit is not None else ordered, f"{path.name} (shoal)")
