"""`shoal server init` is idempotent and never replaces the CA; `start` refuses what would not
work; a local-mode server has no joining; contexts and `$SHOAL_HOME` carry the CA."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from shoal.cli.main import app
from shoal.client import config as clientconfig
from shoal.client.config import resolve
from shoal.server.app import create_app, prepare
from shoal.server.ca import PkiFiles, server_hosts
from shoal.server.settings import ServerSettings
from tests.envs import is_user_setting


@pytest.fixture(autouse=True)
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if is_user_setting(key):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SHOAL_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.setattr(clientconfig, "selected_context", None)


def shoal(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_init_twice_keeps_the_ca_and_issues_the_server_cert_again_only_for_new_hosts(
    tmp_path: Path,
) -> None:
    home = tmp_path / "srv"
    code, out = shoal("server", "init", "--home", str(home), "--host", "lab.example")
    assert code == 0, out
    assert "CA created" in out and "shoal server start --home" in out and "--ca " in out
    files = PkiFiles.of(home)
    ca, ca_hash = files.ca_cert.read_bytes(), files.ca_hash()
    assert f"sha256:{ca_hash}" in out
    assert (home / "admin.token").stat().st_mode & 0o077 == 0

    code, out = shoal("server", "init", "--home", str(home))  # no --host: keep the hosts
    assert code == 0 and "CA kept" in out and "server certificate kept" in out, out
    assert files.ca_cert.read_bytes() == ca

    code, out = shoal("server", "init", "--home", str(home), "--host", "lab.example",
                      "--host", "10.0.0.5")  # fmt: skip
    assert code == 0 and "issued again" in out, out
    assert files.ca_cert.read_bytes() == ca
    assert sorted(server_hosts(files)) == ["10.0.0.5", "127.0.0.1", "lab.example", "localhost"]


def test_init_refuses_half_a_ca(tmp_path: Path) -> None:
    home = tmp_path / "srv"
    assert shoal("server", "init", "--home", str(home))[0] == 0
    PkiFiles.of(home).ca_key.unlink()
    code, out = shoal("server", "init", "--home", str(home))
    assert code == 1
    assert "ca.key does not" in out and "never replaces a CA silently" in out
    assert PkiFiles.of(home).ca_cert.exists()


def test_start_refuses_no_init_and_an_address_the_certificate_does_not_name(
    tmp_path: Path,
) -> None:
    home = tmp_path / "srv"
    code, out = shoal("server", "start", "--home", str(home), "--host", "127.0.0.1")
    assert code == 1 and "run `shoal server init" in out
    assert shoal("server", "init", "--home", str(home))[0] == 0
    code, out = shoal("server", "start", "--home", str(home), "--host", "10.9.9.9")
    assert code == 1
    assert "names only 127.0.0.1, localhost" in out and "--host 10.9.9.9" in out


@pytest.fixture
def local_api(tmp_path: Path) -> Iterator[TestClient]:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home))
    with TestClient(create_app(ctx, run_scheduler=False)) as client:
        client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        yield client


def test_a_local_mode_server_has_no_joining(local_api: TestClient) -> None:
    for method, path in (("POST", "/api/v1/join-tokens"), ("GET", "/api/v1/join/ca")):
        response = local_api.request(method, path, json={} if method == "POST" else None)
        assert response.status_code == 409, response.text
        assert response.json()["code"] == "NotOnNetworkError"
        assert "shoal server init" in response.json()["message"]


def test_the_ca_reaches_the_client_from_a_context_or_the_server_home(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    code, out = shoal("config", "set-context", "lab", "--server", "https://lab:8476",
                      "--token", "shoal_x", "--ca", str(ca))  # fmt: skip
    assert code == 0 and f"CA {ca}" in out, out
    assert resolve("lab").ca == str(ca)
    code, out = shoal("config", "set-context", "lab", "--ca", str(tmp_path / "missing.crt"))
    assert code == 1 and "no such file" in out

    home = tmp_path / "srv"
    (home / "pki").mkdir(parents=True)
    (home / "pki" / "ca.crt").write_text("pem")
    (home / "server.json").write_text(json.dumps({"url": "https://127.0.0.1:9", "pid": 1}))
    assert resolve(home=home).ca == str(home / "pki" / "ca.crt")


def test_a_mistyped_token_ttl_is_named_before_any_server_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOAL_HOME", str(tmp_path / "no-cluster"))  # no server configured
    code, out = shoal("node", "token", "create", "--ttl", "5x")
    assert code == 2, out
    assert "--ttl" in out and "90s, 30m, 1h, 7d or never" in out
    assert "no shoal server is configured" not in out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_start_with_timings_that_cannot_fence_is_one_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "srv"
    code, out = shoal("server", "init", "--home", str(home), "--host", "127.0.0.1")
    assert code == 0, out
    code, out = shoal(
        "server", "start", "--home", str(home), "--host", "127.0.0.1", "--port", str(free_port()),
        "--node-timeout", "6", "--kill-grace", "1",
    )  # fmt: skip
    assert code == 1, out
    assert "--node-timeout 6s" in out and "raise --node-timeout to 7s" in out, out
