"""Fields of settings files (cloud pools, catalogs) that hold cores and memory as users write
them: checked where they are read, kept as written. Apart from ``units`` so that the CLI's
start-up path, which parses durations, does not load pydantic."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from shoal.spec.units import cpu_millis, memory_mib


def _checked_cpus(value: int | float | str) -> int | float | str:
    cpu_millis(value)
    return value


def _checked_memory(value: int | str) -> int | str:
    memory_mib(value)
    return value


CpuAmount = Annotated[int | float | str, AfterValidator(_checked_cpus)]
MemoryAmount = Annotated[int | str, AfterValidator(_checked_memory)]
