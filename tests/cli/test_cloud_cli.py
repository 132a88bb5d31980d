"""The cloud commands' refusals (docs/cloud.md): `shoal server start --cloud FILE` names each
wrong field of the file and starts nothing; `shoal cluster scale` asks for a size or --auto."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli.main import app
from tests.envs import is_user_setting


@pytest.fixture(autouse=True)
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if is_user_setting(key):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SHOAL_CONFIG", str(tmp_path / "config.yaml"))


def shoal(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_a_wrong_cloud_file_is_refused_naming_the_field_before_anything_starts(
    tmp_path: Path,
) -> None:
    home = tmp_path / "srv"
    assert shoal("server", "init", "--home", str(home), "--host", "127.0.0.1")[0] == 0
    cloud = tmp_path / "cloud.yaml"
    cloud.write_text(
        "cluster: lab\nproviders:\n  lab: {type: local, endpoint: 'http://127.0.0.1:9'}\n"
        "pools:\n  - {name: cpu, provider: nope, instance_type: small, max: 2}\n"
        "  - {name: gpu, provider: lab, instance_type: big, min: 3, max: 1}\n"
    )
    code, out = shoal("server", "start", "--home", str(home), "--host", "127.0.0.1",
                      "--port", "1", "--cloud", str(cloud))  # fmt: skip
    assert code == 1, out
    assert "pools[1]" in out and "min (3) must not exceed max (1)" in out
    assert "pools[0].provider" in out and "no provider named 'nope'" in out
    assert not (home / "server.json").exists()  # nothing started
    code, out = shoal("server", "start", "--home", str(home), "--host", "127.0.0.1",
                      "--port", "1", "--cloud", str(tmp_path / "missing.yaml"))  # fmt: skip
    assert code == 1 and "cannot read" in out, out
    code, out = shoal("server", "start", "--home", str(home), "--host", "127.0.0.1",
                      "--port", "1", "--cloud-join-url", "https://x:1")  # fmt: skip
    assert code == 1 and "--cloud-join-url goes with --cloud" in out, out


def test_scale_wants_a_size_or_auto() -> None:
    code, out = shoal("cluster", "scale", "cpu")
    assert code == 1 and "give a size" in out, out
    code, out = shoal("cluster", "scale", "cpu", "2", "--auto")
    assert code == 1 and "give a size" in out, out
