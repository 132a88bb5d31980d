"""`shoal server install-service` and `shoal agent install-service`: the units they write pass
`systemd-analyze verify`, their ExecStart is a shoal command line the CLI's own parser takes, and
a target that cannot be written is one clear error."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from shoal.cli.main import app
from shoal.cli.service_units import systemd_quote

COMMAND = typer.main.get_command(app)
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def shoal(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def unit_settings(text: str) -> dict[str, str]:
    settings = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings[key] = value
    return settings


def parsed(words: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The command path and the leaf command's parameters, as `shoal WORDS` would parse them
    (click's parser down the groups, then the command's own context: types and ranges
    converted, required options checked), never run."""
    command: Any = COMMAND
    context = command.context_class(command, info_name="shoal")
    path: list[str] = []
    args = list(words)
    while getattr(command, "commands", None) is not None:
        _, args, _ = command.make_parser(context).parse_args(args)
        name, *args = args
        assert name in command.commands, f"shoal {' '.join(path)} has no command {name!r}"
        command = command.commands[name]
        path.append(name)
        context = command.context_class(command, parent=context, info_name=name)
    leaf = command.make_context(path[-1], args, parent=context.parent)
    return path, leaf.params


def exec_words(text: str) -> list[str]:
    words = shlex.split(unit_settings(text)["ExecStart"])
    assert words[:3] == [os.path.abspath(sys.executable), "-m", "shoal"], words
    assert os.path.isabs(words[0]) and os.access(words[0], os.X_OK)
    return words[3:]


def verify(unit: Path) -> None:
    if SYSTEMD_ANALYZE is None:
        pytest.skip(
            "systemd-analyze is not installed (apt-get install systemd): units not verified"
        )
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=unit.parent,
    )
    said = [line for line in (done.stdout + done.stderr).splitlines() if unit.name in line]
    assert done.returncode == 0 and not said, done.stdout + done.stderr


def test_the_server_unit_verifies_and_runs_server_start_with_the_options_given(
    tmp_path: Path,
) -> None:
    home = tmp_path / "server home"  # a space: quoted in ExecStart
    code, out, err = shoal("server", "install-service", "--home", str(home), "--host",
                           "198.18.40.1", "--port", "8999", "--node-timeout", "8",
                           "--kill-grace", "1", "--output", str(tmp_path))  # fmt: skip
    assert code == 0, out + err
    unit = tmp_path / "shoal-server.service"
    assert f"wrote the server's systemd unit {unit}" in out
    assert f"systemctl daemon-reload && systemctl enable --now {unit}" in out
    assert "has no CA yet" in err and "shoal server init" in err
    text = unit.read_text()
    settings = unit_settings(text)
    assert settings["Restart"] == "on-failure"
    assert settings["After"] == "network-online.target"
    assert settings["WantedBy"] == "multi-user.target"
    path, params = parsed(exec_words(text))
    assert path == ["server", "start"]
    assert params["home"] == str(home) and params["host"] == "198.18.40.1"
    assert (params["port"], params["node_timeout"], params["kill_grace"]) == (8999, 8.0, 1.0)
    verify(unit)


def test_the_agent_unit_keeps_tasks_when_the_agent_dies_and_verifies(tmp_path: Path) -> None:
    target = tmp_path / "shoal-agent-n1.service"
    home = tmp_path / "agent"
    code, out, err = shoal("agent", "install-service", "--home", str(home), "--grace", "5",
                           "--output", str(target))  # fmt: skip
    assert code == 0, out + err
    assert "holds no node identity yet" in err
    text = target.read_text()
    settings = unit_settings(text)
    assert settings["KillMode"] == "process"  # keepers, not systemd, end tasks of a dead agent
    assert "Fencing" in text and "Agent restarts" in text  # the comment says why
    assert settings["Restart"] == "on-failure"
    assert settings["RestartPreventExitStatus"] == "2"  # a removed node: restarting cannot help
    assert settings["Delegate"] == "yes" and settings["StartLimitIntervalSec"] == "0"
    assert settings["After"] == "network-online.target"
    path, params = parsed(exec_words(text))
    assert path == ["agent", "run"]
    assert (params["home"], params["grace"]) == (str(home), 5.0)
    verify(target)


def test_print_writes_nothing_and_the_unit_is_on_stdout(tmp_path: Path) -> None:
    code, out, _ = shoal("agent", "install-service", "--home", str(tmp_path), "--print")
    assert code == 0 and out.startswith("# Written by `shoal agent install-service`")
    assert "KillMode=process" in out and "daemon-reload" not in out
    assert list(tmp_path.iterdir()) == []
    code, _, err = shoal("agent", "install-service", "--print", "--output", str(tmp_path))
    assert code == 1 and "not both" in err


def denied(*_: object) -> None:
    raise PermissionError(13, "Permission denied")


def test_a_target_that_cannot_be_written_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = shoal("agent", "install-service", "--output",
                           str(tmp_path / "missing" / "a.service"))  # fmt: skip
    assert code == 1 and "no such directory" in err and "--print" in err, out + err
    # /proc takes no new file, even from root
    code, out, err = shoal("server", "install-service", "--host", "198.18.40.1", "--home",
                           str(tmp_path), "--output", "/proc/shoal-server.service")  # fmt: skip
    assert code == 1 and "cannot write /proc/shoal-server.service: " in err, out + err
    assert "--output PATH or --print" in err and "Traceback" not in out + err
    with monkeypatch.context() as patch:  # as /etc/systemd/system is to a user, not root
        patch.setattr(os, "replace", denied)
        code, _, err = shoal("agent", "install-service", "--output", str(tmp_path / "a.service"))
    assert code == 1 and "Permission denied" in err and "run it as root (sudo)" in err
    assert list(tmp_path.glob("*.service*")) == []  # nor a temporary file left
    code, _, err = shoal("agent", "install-service", "--output", str(tmp_path / "agent.unit"))
    assert code == 1 and "ends in .service" in err


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("/opt/shoal/bin/python", "/opt/shoal/bin/python"),
        ("/srv/my home", '"/srv/my home"'),
        ("/srv/100%", "/srv/100%%"),
        ("/srv/$HOME", '"/srv/$$HOME"'),
        ('a"b', '"a\\"b"'),
    ],
)
def test_exec_start_words_are_quoted_for_systemd(word: str, quoted: str) -> None:
    assert systemd_quote(word) == quoted
