"""The cluster file: the template is a valid one; wrong files are refused with every problem named
by its field (and line), through `shoal cluster validate` with exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.bootstrap.clusterfile import (
    load_cluster,
    missing_local_files,
    parse_cluster,
    template_text,
)
from shoal.spec.errors import SpecError
from tests.cli.test_cli_imports import CLIENT_PATH, forbidden_in, loaded_modules
from tests.envs import is_user_setting

GOOD = """
server: {address: 198.18.30.254, port: 9443, home: srv}
install_dir: /opt/shoal
ssh: {user: ops, key_file: keys/id, known_hosts: keys/known_hosts}
hosts:
  - address: 198.18.30.1
    labels: {rack: a}
    memory: 4Gi
    cpus: 2
  - address: 198.18.30.2
    name: b
    user: root
    key_file: /abs/key
    port: 2200
    port_base: 58000
"""


def _problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_cluster(text, Path("/tmp/c.yaml"))
    return [p.render() for p in caught.value.problems]


def shoal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_template_is_a_valid_cluster_file(tmp_path: Path) -> None:
    printed = shoal("cluster", "template")
    assert printed.returncode == 0
    assert printed.stdout == template_text()
    assert "# " in printed.stdout  # commented
    path = tmp_path / "cluster.yaml"
    path.write_text(printed.stdout)
    cluster = load_cluster(path)
    assert [h.name for h in cluster.hosts] == ["gpu-1", "cpu-1"]
    assert cluster.hosts[1].user == "ubuntu" and cluster.hosts[1].port == 2222
    assert cluster.hosts[0].memory_mib == 256 * 1024 and cluster.hosts[0].labels["gpu"] == "a100"
    checked = shoal("cluster", "validate", str(path))
    assert checked.returncode == 0, checked.stderr
    assert "valid, 2 host(s), server https://192.168.1.10:8443" in checked.stdout


def test_defaults_and_relative_paths_are_resolved(tmp_path: Path) -> None:
    cluster = parse_cluster(GOOD, tmp_path / "c.yaml")
    first, second = cluster.hosts
    assert first.name == "198-18-30-1"  # from the address
    assert first.user == "ops" and first.port == 22
    assert first.key_file == tmp_path / "keys" / "id"
    assert first.key_field == "ssh.key_file" and second.key_field == "hosts[1].key_file"
    assert first.label_arg == "rack=a" and first.memory_mib == 4096 and first.cpus == "2"
    assert second.name == "b" and second.port == 2200 and second.port_base == 58000
    assert cluster.server_home == tmp_path / "srv"
    assert cluster.server_url == "https://198.18.30.254:9443"
    assert cluster.known_hosts == tmp_path / "keys" / "known_hosts"


def test_every_wrong_field_is_named_with_its_line() -> None:
    found = _problems(
        "server: {address: 'a b', port: 70000}\n"
        "install_dir: relative/dir\n"
        "hosts:\n"
        "  - address: 198.18.30.1\n"
        "    memory: 4X\n"
        "    labls: {}\n"
        "    gpus: -1\n"
        "    user: 'Bad User'\n"
    )
    assert any(p.startswith("server.address (line 1): must be a host name") for p in found)
    assert any(p.startswith("server.port (line 1): must be an integer <= 65535") for p in found)
    assert any(p.startswith("install_dir (line 2): must be an absolute path") for p in found)
    assert any(p.startswith("hosts[0].memory (line 5):") and "4Gi" in p for p in found)
    assert "hosts[0].labls (line 6): unknown field; did you mean 'labels'?" in found
    assert any(p.startswith("hosts[0].gpus (line 7): must be an integer >= 0") for p in found)
    assert any(p.startswith("hosts[0].user (line 8): must be a user name") for p in found)


def test_missing_sections_and_clashing_hosts_are_refused() -> None:
    assert _problems("hosts: []\n") == [
        "server: is required",
        "hosts (line 1): must have at least 1 item",
    ]
    clash = _problems(
        "server: {address: s}\n"
        "hosts:\n"
        "  - {address: h1, name: n}\n"
        "  - {address: h2, name: n}\n"
        "  - {address: h1}\n"
    )
    assert any(p.startswith("hosts[1].name") and "already used by hosts[0]" in p for p in clash)
    assert any(
        p.startswith("hosts[2].address") and "already listed as hosts[0]" in p for p in clash
    )


def test_missing_key_and_known_hosts_files_name_their_fields(tmp_path: Path) -> None:
    cluster = parse_cluster(GOOD, tmp_path / "c.yaml")
    found = [p.render() for p in missing_local_files(cluster)]
    assert any(p.startswith("ssh.known_hosts: no such file") for p in found)
    assert any(p.startswith("ssh.key_file: no such private key file") for p in found)
    assert any(p.startswith("hosts[1].key_file: no such private key file /abs/key") for p in found)


def test_validate_and_create_exit_1_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server: {address: s, port: 0}\nhosts:\n  - {address: h, cpus: 0}\n")
    for command in ("validate", "create", "status", "delete"):
        done = shoal("cluster", command, str(path))
        assert done.returncode == 1, (command, done.stdout)
        assert "server.port (line 1): must be an integer >= 1" in done.stderr
        assert "hosts[0].cpus (line 3): must be more than 0 cores" in done.stderr
    path.write_text(GOOD)  # valid, but its key files do not exist: nothing is started
    done = shoal("cluster", "create", str(path))
    assert done.returncode == 1
    assert "ssh.known_hosts: no such file" in done.stderr
    assert not (tmp_path / "srv").exists()


def test_template_and_help_load_neither_the_server_nor_asyncssh(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env["SHOAL_HOME"] = str(tmp_path)
    for args in (["cluster", "--help"], ["cluster", "template"]):
        modules = loaded_modules(args, env)
        assert forbidden_in(modules, [*CLIENT_PATH, "asyncssh", "shoal.bootstrap.ssh"]) == []
