"""Read resource quantities with bounds; on error record a problem and return a safe value."""

from __future__ import annotations

from dataclasses import dataclass

from shoal.spec import units
from shoal.spec.errors import ProblemCollector
from shoal.spec.model import MAX_CPU_MILLIS, MAX_MEMORY_MIB

MAX_RUNTIME_S = 365 * 24 * 3600


@dataclass(slots=True)
class ResourceReader:
    problems: ProblemCollector

    def cpu(self, value: object, path: str) -> int:
        try:
            millis = units.cpu_millis(value)
        except ValueError as exc:
            self.problems.error(path, str(exc), units.CPU_HINT)
            return 1000
        if millis < 1 or millis > MAX_CPU_MILLIS:
            self.problems.error(
                path,
                f"must be between 0.001 and {MAX_CPU_MILLIS // 1000} cores, "
                f"got {units.shown(value)}",
                "no node has that many cores" if millis > 0 else units.CPU_HINT,
            )
            return 1000
        return millis

    def memory(self, value: object, path: str, *, lowercase_m_is_mib: bool = False) -> int:
        try:
            mib = units.memory_mib(value, lowercase_m_is_mib=lowercase_m_is_mib)
        except ValueError as exc:
            self.problems.error(path, str(exc), units.MEMORY_HINT)
            return 1024
        if mib < 1 or mib > MAX_MEMORY_MIB:
            self.problems.error(
                path,
                f"must be between 1 MiB and {MAX_MEMORY_MIB // (1024 * 1024)} TiB, "
                f"got {units.shown(value)}",
                units.MEMORY_HINT,
            )
            return 1024
        return mib

    def duration(self, value: object, path: str) -> int | None:
        try:
            seconds = units.duration_seconds(value)
        except ValueError as exc:
            self.problems.error(path, str(exc), units.DURATION_HINT)
            return None
        if seconds < 1 or seconds > MAX_RUNTIME_S:
            self.problems.error(
                path,
                f"must be between 1 second and 365 days, got {units.shown(value)}",
                units.DURATION_HINT,
            )
            return None
        return seconds
