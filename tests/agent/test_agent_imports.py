"""An agent machine needs only the agent: importing every agent module, in a fresh interpreter,
loads none of the server, the store, the planner, the scheduling core, the job-spec readers or
the libraries they need. The wire types come from ``shoal.protocol``."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import shoal.agent

SERVER_SIDE = [
    "shoal.server",
    "shoal.store",
    "shoal.planning",
    "shoal.core",
    "shoal.local",
    "shoal.sim",
    "shoal.spec",
    "shoal.cli",
    "shoal.client",
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "uvicorn",
]

PROBE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print("\\n@@" + json.dumps(sorted(sys.modules)))
"""


def agent_modules() -> list[str]:
    found = pkgutil.iter_modules(shoal.agent.__path__, "shoal.agent.")
    return ["shoal.agent.main", *sorted(m.name for m in found)]


def loaded_by(modules: list[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    marker = done.stdout.rfind("\n@@")
    assert marker >= 0, done.stderr
    return set(json.loads(done.stdout[marker + 3 :]))


def forbidden_in(modules: set[str], forbidden: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))


def test_the_agent_loads_nothing_of_the_server_side() -> None:
    names = agent_modules()
    assert {"shoal.agent.main", "shoal.agent.runner", "shoal.agent.resources"} <= set(names)
    modules = loaded_by(names)
    assert forbidden_in(modules, SERVER_SIDE) == []
    assert "shoal.protocol" in modules


def test_the_probe_sees_a_server_import() -> None:
    """The check can fail: the server's agent router does load the server side."""
    modules = loaded_by(["shoal.server.routers.agent"])
    assert forbidden_in(modules, SERVER_SIDE) != []
