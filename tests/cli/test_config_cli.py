"""`shoal config` contexts and the order in which the CLI picks its server and token."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli.main import app
from shoal.client import ShoalError
from shoal.client import config as clientconfig
from shoal.client.config import resolve
from tests.envs import is_user_setting


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    for key in list(os.environ):
        if is_user_setting(key):
            monkeypatch.delenv(key)
    home, config = tmp_path / "home", tmp_path / "cfg" / "config.yaml"
    monkeypatch.setenv("SHOAL_HOME", str(home))
    monkeypatch.setenv("SHOAL_CONFIG", str(config))
    monkeypatch.setattr(clientconfig, "selected_context", None)
    return home, config


def local_cluster(home: Path, url: str = "http://127.0.0.1:18599") -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.json").write_text(json.dumps({"url": url, "pid": 1}))
    (home / "admin.token").write_text("shoal_localadmin\n")


def shoal(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def test_no_server_configured_is_an_error_not_a_default_url(where: tuple[Path, Path]) -> None:
    with pytest.raises(ShoalError, match="no shoal server is configured: run `shoal up`"):
        resolve()
    code, out = shoal("job", "list")
    assert code == 1 and "no shoal server is configured" in out and "8476" not in out


def test_contexts_crud_file_mode_and_masking(where: tuple[Path, Path], tmp_path: Path) -> None:
    _, config = where
    token_file = tmp_path / "lab.token"
    token_file.write_text("shoal_fromfile\n")
    assert shoal("config", "set-context", "lab", "--server", "http://lab:8476", "--token-file",
                 str(token_file))[0] == 0  # fmt: skip
    code, out = shoal("config", "set-context", "dev", "--server", "http://dev:1", "--token",
                      "shoal_secretsecret", "--use")  # fmt: skip
    assert code == 0 and "now the current context" in out
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert shoal("config", "current-context") == (0, "dev\n")
    code, out = shoal("config", "view")
    assert "shoal_secretsecret" not in out and "(masked)" in out and "http://lab:8476" in out
    code, out = shoal("config", "get-contexts", "-o", "json")
    listed = json.loads(out)
    assert listed["current"] == "dev"
    assert [c["name"] for c in listed["contexts"]] == ["dev", "lab", "local"]
    found = resolve()
    assert (found.url, found.token, found.context) == ("http://dev:1", "shoal_secretsecret", "dev")
    assert found.token_source == f"context dev (file {config})"
    # only the options given change: a new server keeps the token
    assert shoal("config", "set-context", "dev", "--server", "http://dev:2")[0] == 0
    assert (resolve().url, resolve().token) == ("http://dev:2", "shoal_secretsecret")
    assert shoal("config", "use-context", "lab")[0] == 0
    found = resolve()
    assert (found.token, found.token_source) == (
        "shoal_fromfile",
        f"context lab (token file {token_file})",
    )
    assert shoal("config", "delete-context", "lab")[0] == 0
    code, out = shoal("config", "current-context")
    assert code == 1 and "no current context" in out


def test_set_context_says_which_file_it_wrote_and_which_context_is_current(
    where: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, config = where
    code, out = shoal("config", "set-context", "lab", "--server", "https://198.18.30.1:8476")
    assert code == 0 and f"context lab created in {config}: https://198.18.30.1:8476" in out
    assert "no current context is set: `shoal config use-context lab` (or --use) sets it" in out
    code, out = shoal("config", "set-context", "rack", "--server", "https://198.18.31.1:8476",
                      "--use")  # fmt: skip
    assert code == 0 and f"context rack created in {config}" in out
    assert "rack is now the current context" in out and "(was" not in out
    code, out = shoal("config", "set-context", "lab", "--use")
    assert f"context lab updated in {config}" in out
    assert "lab is now the current context (was rack)" in out
    code, out = shoal("config", "set-context", "lab", "--use")
    assert "lab is still the current context" in out
    code, out = shoal("config", "set-context", "rack", "--token", "shoal_x")
    assert "the current context is still lab: `shoal config use-context rack` switches" in out
    code, out = shoal("config", "set-context", "lab", "--token", "shoal_y")
    assert "lab is the current context" in out and "note:" not in out
    monkeypatch.setenv("SHOAL_URL", "http://198.18.32.1:8476")
    code, out = shoal("config", "set-context", "lab", "--use")
    assert "note: $SHOAL_URL is set (http://198.18.32.1:8476): commands use it" in out
    assert shoal("config", "current-context") == (0, "lab\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set-context", "local", "--server", "http://x:1"], "reserved"),
        (["set-context", "new"], "give its --server"),
        (["set-context", "a b", "--server", "http://x:1"], "context name 'a b'"),
        (["set-context", "x", "--server", "ftp://x"], "--server 'ftp://x'"),
        (
            ["set-context", "x", "--server", "http://x", "--token", "t", "--token-file", "f"],
            "not both",
        ),
        (["set-context", "x", "--server", "http://x", "--token-file", "/nonexistent"], "no such"),
        (["use-context", "nope"], "no context 'nope'"),
        (["delete-context", "nope"], "no context 'nope'"),
    ],
)
def test_bad_input_is_one_clear_line(
    where: tuple[Path, Path], args: list[str], message: str
) -> None:
    code, out = shoal("config", *args)
    assert code == 1 and message in out
    assert not where[1].exists()  # nothing half-written


def test_resolution_order(where: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    home, _ = where
    local_cluster(home)
    found = resolve()  # 4. the local cluster
    assert (found.url, found.context) == ("http://127.0.0.1:18599", "local")
    assert found.token == "shoal_localadmin" and "admin.token" in str(found.token_source)
    (home / "token").write_text("shoal_loggedin\n")  # `shoal login` beats `shoal up`'s token
    assert resolve().token == "shoal_loggedin"
    shoal("config", "set-context", "lab", "--server", "http://lab:1", "--token", "shoal_lab")
    shoal("config", "use-context", "lab")
    assert resolve().url == "http://lab:1"  # 3. the current context beats the local cluster
    monkeypatch.setenv("SHOAL_TOKEN", "shoal_env")
    found = resolve()
    assert (found.url, found.token, found.token_source) == (
        "http://lab:1",
        "shoal_env",
        "$SHOAL_TOKEN",
    )
    monkeypatch.setenv("SHOAL_URL", "http://env:2")  # 2. $SHOAL_URL beats the current context
    assert (resolve().url, resolve().url_source) == ("http://env:2", "$SHOAL_URL")
    monkeypatch.delenv("SHOAL_TOKEN")
    assert resolve().token is None  # the local admin token is never sent to another server
    monkeypatch.setenv("SHOAL_CONTEXT", "local")  # 1. a chosen context beats everything
    assert resolve().url == "http://127.0.0.1:18599"
    monkeypatch.setattr(clientconfig, "selected_context", "lab")  # --context beats $SHOAL_CONTEXT
    assert (resolve().url, resolve().token) == ("http://lab:1", "shoal_lab")


def test_a_malformed_config_file_is_named(where: tuple[Path, Path]) -> None:
    _, config = where
    config.parent.mkdir(parents=True)
    config.write_text("contexts: [{name: x}]\n")
    with pytest.raises(ShoalError, match=f"{config}: every context needs a name and a server"):
        resolve()


def test_completion_is_on(tmp_path: Path) -> None:
    env = {**os.environ, "_SHOAL_COMPLETE": "complete_bash", "COMP_WORDS": "shoal conf",
           "COMP_CWORD": "1", "SHOAL_HOME": str(tmp_path)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "shoal"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.stdout.split() == ["config"], done.stderr
    # typer finds the shell by looking at the parent processes (under `make test`, make's
    # /bin/sh, which it does not support), falling back to $SHELL: run it from bash.
    shown = subprocess.run(
        ["/bin/bash", "-c", f"{shlex.quote(sys.executable)} -m shoal --show-completion bash; exit"],
        capture_output=True,
        text=True,
        env={**os.environ, "SHELL": "/bin/bash"},
        timeout=60,
        check=False,
    )
    assert "_SHOAL_COMPLETE" in shown.stdout, (shown.returncode, shown.stderr)


def test_logout_forgets_the_saved_token_and_says_what_went(
    where: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, config = where
    local_cluster(home)
    (home / "token").write_text("shoal_loggedin\n")  # as `shoal login` writes it
    code, out = shoal("logout")  # no context: the local cluster
    assert code == 0, out
    assert f"removed the token in {home / 'token'}" in out
    assert f"{home / 'admin.token'} (the cluster's admin token" in out
    assert not (home / "token").exists() and (home / "admin.token").exists()
    assert "nothing to forget" in shoal("logout")[1]

    token_file = tmp_path / "lab.token"
    token_file.write_text("shoal_fromfile\n")
    shoal("config", "set-context", "lab", "--server", "http://lab:1", "--token-file",
          str(token_file))  # fmt: skip
    shoal("config", "set-context", "dev", "--server", "http://dev:1", "--token", "shoal_inline",
          "--use")  # fmt: skip
    code, out = shoal("logout")  # the current context, dev
    assert code == 0 and "logged out of context dev (http://dev:1): removed its token" in out
    assert "shoal_inline" not in config.read_text()
    code, out = shoal("--context", "lab", "logout")
    assert code == 0 and f"no longer reads its token from {token_file.resolve()}" in out, out
    assert token_file.exists() and "lab.token" not in config.read_text()
    assert resolve("lab").token is None and resolve().token is None
    assert shoal("--context", "nope", "logout")[0] == 1

    monkeypatch.setenv("SHOAL_URL", "http://env:2")
    code, out = shoal("logout")
    assert code == 1 and "$SHOAL_URL" in out and "nothing is saved" in out
