"""Resource vectors: cpu in millicores, memory in MiB, and a GPU count."""

from __future__ import annotations

from dataclasses import dataclass

# What a guarantee or borrowing limit holds for a resource it does not limit (the server's and
# the simulator's VCs): cpu millicores and memory MiB, GPUs. Any amount at or above it (a sum of
# a guarantee and a limit included) is "unlimited" when shown to a user.
UNLIMITED = 1 << 40
UNLIMITED_GPU = 1 << 30


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

    def describe_limit(self) -> str:
        """A guarantee or limit as users read it: only the resources it limits, and the others
        named as unlimited (``2 GPU (cpu and memory unlimited)``; ``unlimited`` if none is)."""
        parts = [
            (self.cpu_millis >= UNLIMITED, "cpu", f"{self.cpu_millis / 1000:g} cpu"),
            (self.memory_mib >= UNLIMITED, "memory", f"{self.memory_mib} MiB"),
            (self.gpu >= UNLIMITED_GPU, "GPU", f"{self.gpu} GPU"),
        ]
        finite = [text for unlimited, _, text in parts if not unlimited]
        endless = [name for unlimited, name, _ in parts if unlimited]
        if not finite:
            return "unlimited"
        if not endless:
            return ", ".join(finite)
        return f"{', '.join(finite)} ({' and '.join(endless)} unlimited)"
