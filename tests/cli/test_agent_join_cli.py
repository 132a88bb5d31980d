"""`shoal agent join` reads the join token from --token-file (or '-', standard input) or
$SHOAL_JOIN_TOKEN, so it need not be on the command line where the host's other users see it in
`ps`; --token keeps working. It says which address the node advertises and why (issue #24 item 4).
The join itself is a stand-in here; tests/integration/test_network_join.py joins a real server."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

import shoal.agent.address
import shoal.agent.identity
from shoal.cli.main import app
from tests.envs import is_user_setting

TOKEN = "shoaljoin1.k3x9a0qe." + "s" * 43 + "." + "ab" * 32
SERVER = "https://198.18.0.1:8476"


@pytest.fixture
def joined(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str]]:
    """What the stand-in join was given: (identity, the token as text)."""
    for key in list(os.environ):
        if is_user_setting(key):
            monkeypatch.delenv(key)
    calls: list[tuple[Any, str]] = []

    def join(identity: Any, token: Any) -> Any:
        calls.append((identity, str(token)))
        return SimpleNamespace(node=identity.node)

    monkeypatch.setattr(shoal.agent.identity, "join", join)
    monkeypatch.setattr(shoal.agent.address, "route_source", lambda host, port: "198.18.0.12")
    return calls


def join(home: Path, *args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["agent", "join", SERVER, "--name", "n1", "--home", str(home), *args], input=stdin
    )
    return result.exit_code, result.output


def test_the_token_from_a_file(tmp_path: Path, joined: list[tuple[Any, str]]) -> None:
    token_file = tmp_path / "join.token"
    token_file.write_text(TOKEN + "\n")
    code, out = join(tmp_path / "home", "--token-file", str(token_file))
    assert code == 0, out
    assert [token for _, token in joined] == [TOKEN]
    assert "node n1 joined https://198.18.0.1:8476" in out
    assert TOKEN not in out


def test_the_token_from_standard_input_or_the_environment(
    tmp_path: Path, joined: list[tuple[Any, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = join(tmp_path / "a", "--token-file", "-", stdin=TOKEN + "\n")
    assert code == 0, out
    monkeypatch.setenv("SHOAL_JOIN_TOKEN", TOKEN)
    code, out = join(tmp_path / "b")
    assert code == 0, out
    assert [token for _, token in joined] == [TOKEN, TOKEN]


def test_token_on_the_command_line_still_works(
    tmp_path: Path, joined: list[tuple[Any, str]]
) -> None:
    code, out = join(tmp_path / "home", "--token", TOKEN)
    assert code == 0, out
    assert [token for _, token in joined] == [TOKEN]


def test_a_missing_empty_or_doubled_token_is_one_clear_error(
    tmp_path: Path, joined: list[tuple[Any, str]]
) -> None:
    code, out = join(tmp_path / "home")
    assert code == 1 and "no join token" in out and "--token-file FILE" in out, out
    empty = tmp_path / "empty"
    empty.write_text("\n")
    code, out = join(tmp_path / "home", "--token-file", str(empty))
    assert code == 1 and f"--token-file {empty}: the file is empty" in out, out
    code, out = join(tmp_path / "home", "--token-file", str(tmp_path / "nothing"))
    assert code == 1 and "cannot read it: No such file or directory" in out, out
    code, out = join(tmp_path / "home", "--token", TOKEN, "--token-file", str(empty))
    assert code == 1 and "not both" in out, out
    damaged = tmp_path / "damaged"
    damaged.write_text("shoaljoin1.x")
    code, out = join(tmp_path / "home", "--token-file", str(damaged))
    assert code == 1 and f"--token-file {damaged}: not a shoal join token" in out, out
    assert joined == []


def test_the_address_is_the_route_to_the_server_unless_given(
    tmp_path: Path, joined: list[tuple[Any, str]]
) -> None:
    code, out = join(tmp_path / "a", "--token", TOKEN)
    assert code == 0, out
    assert joined[-1][0].address == "198.18.0.12"
    assert (
        "advertising 198.18.0.12 (the address this host uses to reach the server; --address to "
        "change it)" in " ".join(out.split())
    )
    code, out = join(tmp_path / "b", "--token", TOKEN, "--address", "198.18.3.3")
    assert code == 0, out
    assert joined[-1][0].address == "198.18.3.3"
    assert "advertising 198.18.3.3 (given with --address)" in out


def test_help_says_the_token_shows_in_ps() -> None:
    shown = CliRunner().invoke(app, ["agent", "join", "--help"], terminal_width=200).output
    assert "--token-file" in shown and "SHOAL_JOIN_TOKEN" in shown
    assert "ps" in " ".join(shown.split())
