"""The CLI is a client: its start-up path never loads the server, the store, the planner or the
heavy libraries they need (the cause of a 2 s `shoal --version`). Not timed: bench/cli.py
measures; this checks what is imported, in a fresh interpreter per command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SERVER_SIDE = [
    "shoal.server",
    "shoal.store",
    "shoal.local",
    "shoal.core",
    "shoal.planning",
    "shoal.agent",
    "shoal.sim",
    "shoal.spec.model",
    "shoal.spec.loader",
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "uvicorn",
    "psutil",
    "matplotlib",
    "numpy",
]
# typer is pinned below 0.29, which builds pydantic TypeAdapters for the options it parses.
CLIENT_PATH = [*SERVER_SIDE, "pydantic", "yaml"]
NO_OPTIONS_PARSED = [*CLIENT_PATH, "rich.markdown", "rich.table", "httpx"]

PROBE = """
import json, sys
sys.argv = ["shoal", *json.loads(sys.argv[1])]
from shoal.cli.entry import main
try:
    main()
except SystemExit:
    pass
print("\\n@@" + json.dumps(sorted(sys.modules)))
"""


def loaded_modules(args: list[str], env: dict[str, str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    marker = done.stdout.rfind("\n@@")
    assert marker >= 0, done.stderr
    return set(json.loads(done.stdout[marker + 3 :]))


def forbidden_in(modules: set[str], forbidden: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    clean["SHOAL_HOME"] = str(tmp_path / "home")
    clean["SHOAL_CONFIG"] = str(tmp_path / "config.yaml")
    return clean


@pytest.mark.parametrize(
    ("args", "forbidden"),
    [
        (["--version"], NO_OPTIONS_PARSED),
        (["--help"], NO_OPTIONS_PARSED),
        (["job", "--help"], CLIENT_PATH),  # the root's options are parsed on the way
        (["config", "--help"], CLIENT_PATH),
    ],
)
def test_version_and_help_load_no_server_side_module(
    args: list[str], forbidden: list[str], env: dict[str, str]
) -> None:
    modules = loaded_modules(args, env)
    assert "shoal" in modules
    assert forbidden_in(modules, forbidden) == []


def test_version_loads_not_even_the_command_tree(env: dict[str, str]) -> None:
    modules = loaded_modules(["--version"], env)
    assert forbidden_in(modules, ["typer", "click", "rich", "shoal.cli.main"]) == []


@pytest.mark.parametrize(
    "args",
    [
        ["job", "list", "--all"],
        ["job", "status", "some-job"],
        ["status"],
        ["whoami"],
        ["config", "get-contexts"],
    ],
)
def test_remote_commands_load_only_the_client(args: list[str], env: dict[str, str]) -> None:
    # Port 9 (discard) on loopback: nothing answers, so the whole request path runs and fails.
    env["SHOAL_URL"] = "http://127.0.0.1:9"
    env["SHOAL_TOKEN"] = "shoal_test"
    modules = loaded_modules(args, env)
    assert "shoal.client" in modules
    assert forbidden_in(modules, CLIENT_PATH) == []


def test_the_probe_sees_a_server_import(env: dict[str, str]) -> None:
    """The check can fail: a command that starts local processes does load the server."""
    modules = loaded_modules(["job", "validate", "/nonexistent.yaml"], env)
    assert "shoal.spec.loader" in modules
