"""`cluster create`'s join step keeps the join token off the host's command lines (issue #24 item
4): the token goes to ``INSTALL/join.token`` over SFTP (0600), `shoal agent join --token-file`
reads it, and the file is removed whatever the join did. The node's address is the cluster file's
``advertise_address`` if given, else join's own choice on the host. A stand-in SSH session
records what would run on the host; the shell line itself is run here, with a stand-in shoal."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from shoal.bootstrap import hosts
from shoal.bootstrap.clusterfile import HostPlan, parse_cluster
from shoal.bootstrap.hosts import JOIN_TOKEN_FILE, Layout, join_command
from shoal.bootstrap.ssh import Ran

TOKEN = "shoaljoin1.k3x9a0qe." + "S" * 43 + "." + "ab" * 32
URL = "https://198.18.30.254:9443"


def host(advertise: str | None = None) -> HostPlan:
    return HostPlan(
        index=0,
        address="198.18.30.1",
        name="gpu-1",
        user="root",
        key_file=Path("/keys/id"),
        port=22,
        labels={"rack": "a"},
        cpus="2",
        memory_mib=4096,
        gpus=None,
        port_base=58000,
        key_field="ssh.key_file",
        advertise_address=advertise,
    )


class Session:
    """What `_join` does on the host: files put, commands run, files removed."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.secrets: list[tuple[str, str]] = []
        self.removed: list[str] = []

    async def put_secret(self, step: str, text: str, remote: str) -> None:
        self.secrets.append((remote, text))

    async def run(self, command: str, timeout_s: float = 600.0) -> Ran:
        self.commands.append(command)
        said = "advertising 198.18.30.1 (the address this host uses to reach the server; ...)\n"
        return Ran(command, 0, f"node gpu-1 joined {URL}\n{said}", "")

    async def must(self, step: str, command: str, timeout_s: float = 600.0) -> Ran:
        return await self.run(command, timeout_s)

    async def remove_quietly(self, remote: str) -> None:
        self.removed.append(remote)


class Server:
    address, port = "198.18.30.254", 9443

    def join_token(self) -> str:
        return TOKEN


def test_the_join_step_puts_the_token_in_a_file_and_never_on_a_command_line() -> None:
    session, said = Session(), []
    layout = Layout("/opt/shoal", "python3")
    asyncio.run(
        hosts._join(
            session,  # type: ignore[arg-type]
            layout,
            host(),
            Server(),  # type: ignore[arg-type]
            lambda h, text: said.append(text),
        )
    )
    assert session.commands, "nothing ran"
    for command in session.commands:
        assert TOKEN not in command and "--token " not in command, command
    assert session.secrets == [("/opt/shoal/join.token", TOKEN + "\n")]
    join = session.commands[0]
    assert "--token-file /opt/shoal/join.token" in join
    assert "rm -f /opt/shoal/join.token" in join
    assert session.removed == ["/opt/shoal/join.token"]  # again, in case the command never ran
    assert said == [
        f"join: node gpu-1 joined {URL}; advertising 198.18.30.1 (the address this host uses to "
        "reach the server; ...)"
    ]


def test_the_address_is_joins_own_choice_unless_the_cluster_file_gives_one() -> None:
    layout = Layout("/opt/shoal", "python3")
    assert "--address" not in join_command(layout, host(), URL)
    assert "--address 198.18.31.1" in join_command(layout, host("198.18.31.1"), URL)
    text = (
        "server: {address: 198.18.30.254}\nhosts:\n"
        "  - {address: 198.18.30.1, advertise_address: 198.18.31.1}\n"
        "  - {address: 198.18.30.2}\n"
    )
    cluster = parse_cluster(text, Path("/tmp/c.yaml"))
    assert [h.advertise_address for h in cluster.hosts] == ["198.18.31.1", None]


def test_the_join_line_removes_the_token_file_and_keeps_joins_status(tmp_path: Path) -> None:
    """The shell line as the host's shell gets it, with a stand-in `shoal` that records what it
    was given and fails as a refused join does."""
    layout = Layout(str(tmp_path), "python3")
    shoal = tmp_path / "venv" / "bin" / "shoal"
    shoal.parent.mkdir(parents=True)
    shoal.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/args"\n'
        'while [ "$1" != --token-file ]; do shift; done\n'
        'cat "$2" > "$(dirname "$0")/token-read"\nexit 3\n'
    )
    shoal.chmod(0o755)
    token_file = tmp_path / JOIN_TOKEN_FILE
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    done = subprocess.run(join_command(layout, host(), URL), shell=True, check=False, timeout=30)
    assert done.returncode == 3  # the join's own status
    assert not token_file.exists()
    assert (shoal.parent / "token-read").read_text() == TOKEN + "\n"
    args = (shoal.parent / "args").read_text().split("\n")
    assert args[:3] == ["agent", "join", URL] and TOKEN not in args
