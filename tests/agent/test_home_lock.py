"""One agent per home: a second agent on the same home is refused before it adopts anything (both
would adopt the same attempts and launch the same orders twice)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.agent.identity import Connection
from shoal.agent.main import Agent, AgentHomeInUse


def test_a_second_agent_on_the_same_home_is_refused(tmp_path: Path) -> None:
    connection = Connection.bearer("http://127.0.0.1:9", "t")
    first = Agent(connection, tmp_path, [], "first")
    first._lock_home()
    second = Agent(connection, tmp_path, [], "second")
    with pytest.raises(AgentHomeInUse, match=rf"pid {os.getpid()}"):
        second.start()
    assert not any(t.is_alive() for t in second._threads)  # it started nothing
    other_home = Agent(connection, tmp_path / "other", [], "third")
    other_home._lock_home()  # another home is free


def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    token = tmp_path / "agent.token"
    token.write_text("t\n")
    holder = Agent(Connection.bearer("http://127.0.0.1:9", "t"), tmp_path / "home", [], "held")
    holder._lock_home()
    done = subprocess.run(
        [sys.executable, "-m", "shoal", "agent", "--server", "http://127.0.0.1:9",
         "--token-file", str(token), "--home", str(tmp_path / "home")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "another agent runs with the home" in done.stderr and "Traceback" not in done.stderr
