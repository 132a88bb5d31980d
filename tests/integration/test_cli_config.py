"""Quick-start robustness and "who am I, talking to which server": real `shoal` processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.local.supervisor import alive, read_run, stop_local
from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster, port_base


def shoal(
    home: Path, config: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    clean.update(SHOAL_HOME=str(home), SHOAL_CONFIG=str(config), COLUMNS="200", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean,
        check=False,
    )


@pytest.fixture
def occupied() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_up_moves_off_a_taken_default_port_and_the_cli_finds_it(
    tmp_path: Path, occupied: int
) -> None:
    home, config = tmp_path / "home", tmp_path / "config.yaml"
    env = {"SHOAL_DEFAULT_PORT": str(occupied)}
    try:
        up = shoal(home, config, "up", "--port-base", str(port_base()), env=env)
        assert up.returncode == 0, up.stderr
        assert f"port {occupied} is in use; using port " in up.stdout
        info = read_run(home)
        assert info is not None and not info.url.endswith(f":{occupied}")
        status = shoal(home, config, "status", "-o", "json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["url"] == info.url
        again = shoal(home, config, "up", env=env)  # already up: says so, starts nothing
        assert again.returncode == 0 and f"already running at {info.url}" in again.stdout
    finally:
        info = read_run(home)
        down = shoal(home, config, "down")
        assert down.returncode == 0
        if info is not None:
            assert not alive(info.server_pid) and not alive(info.agent_pid)


def test_up_with_a_taken_explicit_port_fails_naming_it(tmp_path: Path, occupied: int) -> None:
    home = tmp_path / "home"
    done = shoal(home, tmp_path / "config.yaml", "up", "--port", str(occupied))
    assert done.returncode == 1
    assert f"--port {occupied}: port {occupied} on 127.0.0.1 is in use" in done.stderr
    assert "leave --port out" in done.stderr
    assert read_run(home) is None
    stop_local(home)


def test_whoami_and_refused_tokens_name_their_source(cluster: LocalCluster, tmp_path: Path) -> None:
    home, config = cluster.home, tmp_path / "config.yaml"
    (home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    me = json.loads(shoal(home, config, "whoami", "-o", "json").stdout)
    assert (me["user"], me["admin"], me["server"], me["context"]) == (
        "admin",
        True,
        cluster.info.url,
        "local",
    )
    assert me["tokenFrom"] == f"the token file `shoal up` wrote ({home / 'admin.token'})"
    alice = json.loads(
        shoal(home, config, "user", "create", "alice", "--groups", "rl,ml", "-o", "json").stdout
    )
    as_alice = shoal(home, config, "whoami", env={"SHOAL_TOKEN": alice["token"]})
    assert as_alice.returncode == 0, as_alice.stderr
    assert "user:    alice" in as_alice.stdout and "admin:   no" in as_alice.stdout
    assert "groups:  rl, ml" in as_alice.stdout and "token:   from $SHOAL_TOKEN" in as_alice.stdout

    refused = shoal(home, config, "job", "list", env={"SHOAL_TOKEN": "shoal_wrong"})
    assert refused.returncode == 1
    assert f"the token from $SHOAL_TOKEN was refused by {cluster.info.url}" in refused.stderr

    made = shoal(home, config, "config", "set-context", "lab", "--server", cluster.info.url,
                 "--token", "shoal_stale", "--use")  # fmt: skip
    assert made.returncode == 0, made.stderr
    refused = shoal(home, config, "job", "list")
    assert f"the token from context lab (file {config}) was refused" in refused.stderr
    # `shoal login` into the current context fixes it; the token is checked first
    bad_login = shoal(home, config, "login", "--token", "shoal_wrong")
    assert bad_login.returncode == 1 and "the token from --token was refused" in bad_login.stderr
    login = shoal(home, config, "login", "--token", alice["token"])
    assert login.returncode == 0, login.stderr
    assert "as alice; token stored in context lab" in login.stdout
    me = json.loads(shoal(home, config, "whoami", "-o", "json").stdout)
    assert (me["user"], me["context"], me["tokenFrom"]) == (
        "alice",
        "lab",
        f"context lab (file {config})",
    )
    local = json.loads(shoal(home, config, "--context", "local", "whoami", "-o", "json").stdout)
    assert local["user"] == "admin"
