"""Resource vectors: cpu in millicores, memory in MiB, and a GPU count."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class ResourceVector:
    cpu_millis: int = 0
    memory_mib: int = 0
    gpu: int = 0

    def __add__(self, other: ResourceVector) -> ResourceVector:
        return ResourceVector(
            self.cpu_millis + other.cpu_millis,
            self.memory_mib + other.memory_mib,
            self.gpu + other.gpu,
        )

    def __sub__(self, other: ResourceVector) -> ResourceVector:
        return ResourceVector(
            self.cpu_millis - other.cpu_millis,
            self.memory_mib - other.memory_mib,
            self.gpu - other.gpu,
        )

    def scaled(self, factor: int) -> ResourceVector:
        return ResourceVector(self.cpu_millis * factor, self.memory_mib * factor, self.gpu * factor)

    def fits_in(self, other: ResourceVector) -> bool:
        return (
            self.cpu_millis <= other.cpu_millis
            and self.memory_mib <= other.memory_mib
            and self.gpu <= other.gpu
        )

    def describe(self) -> str:
        cpu = self.cpu_millis / 1000
        cpu_text = f"{cpu:g}"
        return f"{cpu_text} cpu, {self.memory_mib} MiB, {self.gpu} GPU"
