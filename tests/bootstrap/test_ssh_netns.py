"""The SSH layer against a real sshd running in a network-namespace host of the lab: run, copy,
start detached (it outlives the SSH session), status and stop by pid file; refusals name what to
fix. The host shares this machine's file system, so the test can look at what landed there."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.bootstrap import hostctl
from shoal.bootstrap.ssh import HostSession, SshTarget, StepFailed
from tests.bootstrap.sshd import SshdHost, sshd_missing, start_sshd
from tests.multihost.netns import NetnsLab, namespaces_usable

pytestmark = [
    pytest.mark.skipif(
        namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
    ),
    pytest.mark.skipif(sshd_missing() is not None, reason=str(sshd_missing())),
]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdHost]:
    lab = NetnsLab.create(1, tag=f"ssb{os.getpid() % 10000}")
    try:
        yield start_sshd(lab, lab.host(1), tmp_path_factory.mktemp("sshd"))
    finally:
        lab.destroy()


def target(sshd: SshdHost, **changes: object) -> SshTarget:
    fields: dict[str, object] = {
        "address": sshd.host.address,
        "port": sshd.port,
        "user": sshd.user,
        "key_file": sshd.key_file,
        "known_hosts": sshd.known_hosts,
        "connect_timeout": 10.0,
    }
    fields.update(changes)
    return SshTarget(**fields)  # type: ignore[arg-type]


async def _session(sshd: SshdHost) -> HostSession:
    return await HostSession.open(target(sshd))


def test_run_reports_exit_status_and_output_from_inside_the_namespace(sshd: SshdHost) -> None:
    async def go() -> None:
        async with await _session(sshd) as host:
            done = await host.run("ip -4 -o addr show eth0; echo oops >&2; exit 3")
            assert done.exit_status == 3
            assert f"inet {sshd.host.address}/24" in done.stdout
            assert done.stderr.strip() == "oops"
            with pytest.raises(StepFailed) as failed:
                await host.must("install", "echo first >&2; echo last words >&2; false")
            assert failed.value.step == "install"
            assert "exited 1" in failed.value.message and "last words" in failed.value.message

    asyncio.run(go())


def test_put_copies_files_and_skips_those_already_there(sshd: SshdHost, tmp_path: Path) -> None:
    files = []
    for name, size in (("a.whl", 1000), ("b.whl", 200_000)):
        path = tmp_path / "src" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(os.urandom(size))
        files.append(path)
    remote = str(tmp_path / "dst" / "wheels")

    async def go() -> tuple[int, int]:
        async with await _session(sshd) as host:
            first = await host.put(files, remote, skip_same_size=True)
            second = await host.put(files, remote, skip_same_size=True)
            return first, second

    assert asyncio.run(go()) == (2, 0)
    for path in files:
        assert (Path(remote) / path.name).read_bytes() == path.read_bytes()
    assert not list(Path(remote).glob("*.part"))


def _members(pgid: int) -> list[int]:
    return hostctl.group_members(pgid)


def test_a_detached_process_outlives_the_session_and_stops_by_its_pid_file(
    sshd: SshdHost, tmp_path: Path
) -> None:
    install = str(tmp_path / "install")
    pidfile, log = f"{install}/agent.pid", f"{install}/agent.log"
    # a parent and a child in the same process group: stopping must end both
    command = ["sh", "-c", "sleep 300 & echo child $!; wait"]

    async def start() -> int:
        async with await _session(sshd) as host:
            ctl = await host.install_hostctl(install, "python3")
            done = await host.start_detached(ctl, pidfile, log, install, command)
            assert done.stdout.startswith("started ")
            again = await host.start_detached(ctl, pidfile, log, install, command)
            assert again.stdout.startswith("already running ")  # idempotent
            return int(done.stdout.split()[-1])

    pid = asyncio.run(start())
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # its own session and group
    assert len(_members(pid)) == 2

    async def check_and_stop() -> tuple[int | None, str, int | None, str]:
        async with await _session(sshd) as host:
            ctl = f"python3 {install}/hostctl.py"
            running = await host.detached_pid(ctl, pidfile)
            stopped = await host.stop_detached(ctl, pidfile, grace_s=5)
            after = await host.detached_pid(ctl, pidfile)
            again = await host.stop_detached(ctl, pidfile, grace_s=5)
            return running, stopped, after, again

    running, stopped, after, again = asyncio.run(check_and_stop())
    assert running == pid
    assert stopped == f"stopped {pid}"
    assert after is None and again == "not running"
    assert _members(pid) == []
    assert not Path(pidfile).exists()
    assert "child" in Path(log).read_text()


def test_a_command_that_exits_at_once_fails_the_start_step_with_its_log(
    sshd: SshdHost, tmp_path: Path
) -> None:
    install = str(tmp_path / "install")

    async def go() -> None:
        async with await _session(sshd) as host:
            ctl = await host.install_hostctl(install, "python3")
            with pytest.raises(StepFailed) as failed:
                await host.start_detached(
                    ctl, f"{install}/x.pid", f"{install}/x.log", install,
                    ["sh", "-c", "echo cannot reach the server; exit 4"],
                )  # fmt: skip
            assert failed.value.step == "start"
            assert "exited at once with status 4" in failed.value.message
            assert "cannot reach the server" in failed.value.message

    asyncio.run(go())
    assert not Path(f"{install}/x.pid").exists()


def test_a_pid_file_naming_another_process_never_signals_it(tmp_path: Path) -> None:
    """The pid was reused (the start time differs): stop leaves that process alone."""
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        ticks = hostctl.start_ticks(bystander.pid)
        assert ticks is not None
        pidfile = tmp_path / "agent.pid"
        pidfile.write_text(f"{bystander.pid} {ticks + 1}\n")
        assert hostctl.running_pid(str(pidfile)) is None
        assert hostctl.terminate(str(pidfile), 1.0) == "not running"
        time.sleep(0.2)
        assert bystander.poll() is None
        assert not pidfile.exists()
    finally:
        os.killpg(bystander.pid, signal.SIGKILL)
        bystander.wait()


def test_an_unknown_host_key_or_a_wrong_key_is_refused_naming_the_fix(
    sshd: SshdHost, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    other_key = tmp_path / "other"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True
    )

    async def refused(t: SshTarget) -> StepFailed:
        with pytest.raises(StepFailed) as failed:
            await HostSession.open(t)
        return failed.value

    unknown = asyncio.run(refused(target(sshd, known_hosts=empty)))
    assert unknown.step == "connect"
    assert "is not in" in unknown.message and "ssh-keyscan -p" in unknown.message
    wrong = asyncio.run(refused(target(sshd, key_file=other_key)))
    assert wrong.step == "connect" and "refused the key" in wrong.message
    closed = asyncio.run(refused(target(sshd, port=sshd.port + 1)))
    assert closed.step == "connect" and "connection refused" in closed.message
    assert f"cannot connect to {sshd.user}@{sshd.host.address}:{sshd.port + 1}" in closed.message
    no_key = asyncio.run(refused(target(sshd, key_file=tmp_path / "missing")))
    assert no_key.message.startswith(f"cannot read {tmp_path / 'missing'}")


def test_stop_ends_what_is_left_of_the_group_when_its_leader_is_gone(tmp_path: Path) -> None:
    pidfile, log = str(tmp_path / "a.pid"), str(tmp_path / "a.log")
    pid, message = hostctl.launch(
        pidfile, log, str(tmp_path), ["sh", "-c", "sleep 300 & sleep 1.5"]
    )
    assert pid is not None, message
    deadline = time.monotonic() + 10
    while hostctl.start_ticks(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _members(pid)
    assert hostctl.start_ticks(pid) is None and len(left) == 1  # the leader ended, sleep lives
    assert hostctl.terminate(pidfile, 5.0) == f"stopped {pid}"
    assert _members(pid) == []
