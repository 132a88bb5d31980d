"""The bootstrap every cloud machine runs (shoal.cloud.bootstrap), and the wheelhouse the server
serves it (GET /api/v1/install/{file}).

- the script parses (`bash -n`) in every install mode, and holds the token only in a
  here-document; bad parameters are refused naming the parameter;
- the server serves a manifest of its wheelhouse and each file it names (sha256 as listed), no
  other name, and says `make wheelhouse` when it has none;
- for real: a local-cloud machine runs the script (`preinstalled`) against a real server on a
  namespace host; the node joins with its one-time token, which no command line ever showed and
  which is gone from the machine afterwards; a second use of the token is refused.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shoal.cloud.bootstrap import BootstrapError, render_user_data
from shoal.cloud.provider import LaunchRequest
from shoal.pki import JoinToken
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from tests.cloud.localcloud import start_cloud
from tests.envs import without_shoal
from tests.multihost.netns import NetnsLab, namespaces_usable
from tests.multihost.rack import Rack

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
VENV_SHOAL = str(Path(sys.executable).with_name("shoal"))
CATALOG = """\
instance_types:
  small: {cpus: 1, memory: 1Gi, price: 0.1}
zones:
  z1: {small: 2}
"""


def _token() -> str:
    return str(JoinToken.new("ab" * 32))


@pytest.mark.parametrize("install", ["preinstalled", "wheelhouse", "pinned"])
def test_script_parses_and_holds_the_token_only_in_a_here_document(
    install: str, tmp_path: Path
) -> None:
    token = _token()
    script = render_user_data(
        server_url="https://198.18.30.1:8476",
        join_token=token,
        node_name="gpu-1a2b",
        ca_pem=CA,
        install=install,
        labels={"team": "rl", "shoal.pool": "gpu"},
        cpu_millis=4000,
        memory_mib=16384,
        gpus=2,
        scheduled_events_url="http://198.18.30.254:7600/metadata/scheduledevents?api-version=2020-07-01",
    )
    assert script.startswith("#!/bin/bash\n")  # cloud-init runs user data that starts with #!
    path = tmp_path / "user-data"
    path.write_text(script)
    checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    lines = script.splitlines()
    (at,) = [i for i, line in enumerate(lines) if token in line]
    assert lines[at - 1] == "cat > \"$TOKEN_FILE\" <<'SHOAL_JOIN_TOKEN'" and lines[at] == token
    assert '--token-file "$TOKEN_FILE"' in script and "--token " not in script
    assert "--cpus 4 " in script and "--gpus 2" in script and "team=rl,shoal.pool=gpu" in script
    assert "export SHOAL_SCHEDULED_EVENTS_URL=" in script


def test_bad_parameters_are_refused_naming_them() -> None:
    good = {"server_url": "https://s:1", "join_token": _token(), "node_name": "n1", "ca_pem": CA}
    for change, word in (
        ({"install": "docker"}, "install"),
        ({"node_name": "bad name"}, "node_name"),
        ({"server_url": "http://s:1"}, "server_url"),
        ({"join_token": "nope"}, "join_token"),
        ({"labels": {"k": "a,b"}}, "label"),
    ):
        with pytest.raises(BootstrapError, match=word):
            render_user_data(**{**good, **change})  # type: ignore[arg-type]


@pytest.fixture
def install_api(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(prepare(ServerSettings(home=tmp_path / "home")))) as client:
        yield client


def test_the_server_serves_its_wheelhouse_by_manifest_only(install_api: TestClient) -> None:
    manifest = install_api.get("/api/v1/install/MANIFEST")  # no token: public packages
    assert manifest.status_code == 200, manifest.text
    listed = dict(reversed(line.split()) for line in manifest.text.splitlines())
    wheel = next(name for name in listed if name.startswith("shoal-"))
    assert len(listed) > 5 and all(name.endswith(".whl") for name in listed)
    fetched = install_api.get(f"/api/v1/install/{wheel}")
    assert fetched.status_code == 200
    assert hashlib.sha256(fetched.content).hexdigest() == listed[wheel]
    for name in ("nope.whl", "..%2F..%2Fadmin.token", "%2Fetc%2Fpasswd"):
        refused = install_api.get(f"/api/v1/install/{name}")
        assert refused.status_code == 404, name
        assert refused.json()["code"] in ("NoSuchInstallFile", "NoApiError")  # never a file


def test_without_a_wheelhouse_the_server_says_make_wheelhouse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOAL_WHEELHOUSE", str(tmp_path / "none"))
    with TestClient(create_app(prepare(ServerSettings(home=tmp_path / "h2")))) as api:
        refused = api.get("/api/v1/install/MANIFEST")
    assert refused.status_code == 404
    body = refused.json()
    assert body["code"] == "NoWheelhouse" and "make wheelhouse" in body["message"]


# ---- for real: a local-cloud machine joins a real server ----


def _start_server(lab: NetnsLab, root: Path) -> Rack:
    """The rack's server on host 1 (its own CA), and an admin context in the root namespace."""
    env = without_shoal(os.environ)
    env["SHOAL_CONFIG"] = str(root / "config.yaml")
    env["SHOAL_HOME"] = str(root / "cli-home")
    rack = Rack(lab, root, node_timeout_s=8.0, kill_grace_s=1.0, env=env)
    init = subprocess.run(
        [sys.executable, "-m", "shoal", "server", "init", "--home", str(rack.home),
         "--host", rack.server_host.address],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    rack.start_server()
    made = rack.shoal(
        "config", "set-context", "rack", "--server", rack.url,
        "--token-file", str(rack.home / "admin.token"), "--ca", str(rack.ca), "--use",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return rack


def _command_lines(netns: str) -> list[str]:
    listed = subprocess.run(
        ["ip", "netns", "pids", netns], capture_output=True, text=True, check=False
    ).stdout.split()
    lines = []
    for pid in listed:
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return lines


@pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)
def test_a_cloud_machine_joins_with_its_one_time_token(tmp_path: Path) -> None:
    lab = NetnsLab.create(2, tag=f"shct{os.getpid() % 100000}")
    rack: Rack | None = None
    cloud = None
    try:
        rack = _start_server(lab, tmp_path)
        line = rack.join_line("--ttl", "2m", "--uses", "1")
        token = line[line.index("--token") + 1]
        user_data = render_user_data(
            server_url=rack.url,
            join_token=token,
            node_name="cpu-0001",
            ca_pem=rack.ca.read_text(),
            install="preinstalled",
            shoal_path=VENV_SHOAL,
            labels={"shoal.pool": "cpu"},
            cpu_millis=1000,
            memory_mib=1024,
            gpus=0,
        )
        cloud = start_cloud(lab, tmp_path, CATALOG)
        provider = cloud.provider()
        (offer,) = provider.offers("small", (), False)
        tags = {"shoal-cluster": "lab", "shoal-pool": "cpu", "shoal-request": "j1"}
        machine = provider.launch(
            LaunchRequest("j1", "lab", "cpu", "cpu-0001", offer, user_data, tags)
        )
        netns = str(provider.describe("j1")["netns"])
        secret = JoinToken.parse(token).secret
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while rack.nodes().get("cpu-0001", {}).get("state") != "READY":
            assert time.monotonic() < deadline, f"cpu-0001 not READY: {_console(cloud, machine)}"
            seen.extend(_command_lines(netns))
            time.sleep(0.05)
        assert any("agent join" in c for c in seen), seen  # the sampling did see the join
        assert not [c for c in seen if secret in c]
        node = rack.nodes()["cpu-0001"]
        assert node["labels"].get("shoal.pool") == "cpu", node
        root = cloud.directory / "instances" / machine.instance_id / "root"
        assert not (root / "join.token").exists()
        assert secret not in _console(cloud, machine)
        again = tmp_path / "again.token"
        again.write_text(token + "\n")
        second = rack.on_host(
            lab.host(2), "agent", "join", rack.url, "--token-file", str(again),
            "--name", "thief", "--home", str(tmp_path / "thief"),
        )  # fmt: skip
        assert second.returncode != 0
        assert "used 1 time(s)" in second.stderr + second.stdout, second.stderr
        provider.terminate("j1")
    finally:
        if cloud is not None:
            cloud.close()
        if rack is not None:
            rack.close()
        lab.destroy()


def _console(cloud: object, machine: object) -> str:
    directory = cloud.directory / "instances" / machine.instance_id  # type: ignore[attr-defined]
    log = directory / "console.log"
    return log.read_text(errors="replace")[-2000:] if log.exists() else "(no console)"
