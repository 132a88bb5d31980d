"""What this machine offers: detected with psutil (and NVML when a GPU driver is present),
overridable so a laptop can pretend to be several 8-GPU nodes."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

import psutil

from shoal.protocol import FIRST_SIMULATED_PORT, PORTS_PER_SIMULATED_NODE

log = logging.getLogger("shoal.agent")


@dataclass(frozen=True, slots=True)
class GpuInfo:
    count: int
    gpu_type: str | None


def open_nvml() -> Any | None:
    """The NVML module (nvidia-ml-py), initialised; None when there is no library or driver.
    Each open is one ``nvmlInit`` (NVML counts them): ``nvmlShutdown`` once done with it."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: a CPU-only machine
        return None
    return pynvml


def detect_gpus() -> GpuInfo:
    """GPUs through NVML (nvidia-ml-py); none when there is no driver."""
    nvml = open_nvml()
    if nvml is None:
        return GpuInfo(0, None)
    try:
        count = nvml.nvmlDeviceGetCount()
        name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0)) if count else None
        if isinstance(name, bytes):
            name = name.decode()
        return GpuInfo(count, name)
    finally:
        nvml.nvmlShutdown()


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    address: str
    cpu_millis: int
    memory_mib: int
    gpu_indices: tuple[int, ...]
    gpu_type: str | None
    port_low: int
    port_high: int
    labels: dict[str, str] | None = None  # a joined node's labels (None: not reported)


def local_nodes(
    count: int = 1,
    cpus: float | None = None,
    memory_mib: int | None = None,
    gpus: int | None = None,
    gpu_type: str | None = None,
    address: str = "127.0.0.1",
    prefix: str = "node",
    port_base: int = FIRST_SIMULATED_PORT,
) -> list[NodeSpec]:
    """``count`` nodes on this machine, each with the given (or detected) resources."""
    detected = detect_gpus() if gpus is None else GpuInfo(gpus, gpu_type)
    cpu_total = cpus if cpus is not None else float(os.cpu_count() or 1)
    memory = memory_mib if memory_mib is not None else psutil.virtual_memory().total // (1 << 20)
    return [
        NodeSpec(
            name=f"{prefix}-{i}",
            address=address,
            cpu_millis=round(cpu_total * 1000),
            memory_mib=int(memory),
            gpu_indices=tuple(range(detected.count)),
            gpu_type=gpu_type or detected.gpu_type,
            port_low=port_base + i * PORTS_PER_SIMULATED_NODE,
            port_high=port_base + (i + 1) * PORTS_PER_SIMULATED_NODE,
        )
        for i in range(count)
    ]


def hostname() -> str:
    return socket.gethostname()
