"""A container sees only its task's GPUs (simulated indices: this machine has none): CDI devices
when the node has a CDI spec for NVIDIA GPUs, else the device nodes that exist, else none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shoal.agent.runtimes import container


def test_without_gpus_or_device_nodes_nothing_is_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "CDI_DIRS", ())
    monkeypatch.setattr(os.path, "exists", lambda path: False)
    assert container._gpu_devices([]) == []
    assert container._gpu_devices([0, 1]) == []


def test_only_the_tasks_device_nodes_and_the_control_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    present = {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    monkeypatch.setattr(container, "CDI_DIRS", ())
    monkeypatch.setattr(os.path, "exists", lambda path: path in present)
    assert container._gpu_devices([2, 0]) == [
        "--device=/dev/nvidia2",
        "--device=/dev/nvidia0",
        "--device=/dev/nvidiactl",
        "--device=/dev/nvidia-uvm",
    ]


def test_cdi_devices_when_the_node_has_a_cdi_spec(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    monkeypatch.setattr(container, "CDI_DIRS", (tmp_path,))
    assert container._gpu_devices([3]) == ["--device=nvidia.com/gpu=3"]
