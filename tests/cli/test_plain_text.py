"""The CLI prints messages, paths and names as they are: nothing in square brackets is taken for
Rich markup and dropped (``pip install 'shoal[cluster]'`` was shown as ``pip install 'shoal'``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli.main import app
from shoal.client import config as clientconfig
from tests.envs import is_user_setting


@pytest.fixture(autouse=True)
def no_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if is_user_setting(key):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SHOAL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHOAL_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.setattr(clientconfig, "selected_context", None)


def shoal(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_an_error_naming_an_extra_keeps_its_brackets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "shoal.bootstrap.clusterfile", None)  # the extra is missing
    code, _, err = shoal("cluster", "validate", str(tmp_path / "cluster.yaml"))
    assert code == 1
    assert "pip install 'shoal[cluster]'" in err, err


def test_paths_with_brackets_are_shown_whole_in_errors_lines_and_tables(tmp_path: Path) -> None:
    folder = tmp_path / "run[x]"
    folder.mkdir()
    missing = folder / "ca.crt"
    code, _, err = shoal("config", "set-context", "lab", "--server", "https://lab:1", "--ca",
                         str(missing))  # fmt: skip
    assert code == 1 and f"--ca {missing}: no such file" in err, err

    token = folder / "lab.token"
    token.write_text("shoal_secret\n")
    code, out, err = shoal("config", "set-context", "lab", "--server", "http://lab:1",
                           "--token-file", str(token))  # fmt: skip
    assert code == 0 and f"token file {token}" in out, out + err
    code, out, _ = shoal("config", "get-contexts")  # a table cell
    assert code == 0 and f"file {token}" in out, out

    job = folder / "job.yaml"
    job.write_text("version: 1\nname: j\nroles:\n  a:\n    command: echo '[bold]x[/]'\n")
    code, out, err = shoal("job", "validate", str(job))
    assert code == 0, err
    assert f"valid: {job}: native job j" in out, out
    assert "echo '[bold]x[/]'" in out, out
    job.write_text("version: 1\nname: j\nroles:\n  a:\n    comand: echo\n")
    code, _, err = shoal("job", "validate", str(job))
    assert code == 1 and f"error: {job}: " in err, err
