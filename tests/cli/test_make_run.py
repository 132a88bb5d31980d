"""`make run`'s knobs reach `shoal up`: PORT (the server's port) and PORT_BASE (the first task
port), read from the command make would run (``make -n``), parsed by the CLI's own parser."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import typer

from shoal.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def shoal_up_line(*variables: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    planned = subprocess.run(
        ["make", "-n", "run", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.replace("\\\n", " ").splitlines()
    (line,) = [line for line in lines if "/shoal up " in line]
    return shlex.split(line)[1:]


def parse(args: list[str]) -> dict[str, object]:
    root = typer.main.get_command(app)
    _, command, rest = root.resolve_command(root.make_context("shoal", ["up"]), args)
    assert command is not None
    return dict(command.make_context("up", rest).params)


def test_make_run_passes_port_and_port_base_to_shoal_up() -> None:
    params = parse(shoal_up_line("PORT=9000", "PORT_BASE=30000"))
    assert (params["port"], params["port_base"]) == (9000, 30000)
    defaults = parse(shoal_up_line())
    assert (defaults["port"], defaults["port_base"]) == (None, 20000)
