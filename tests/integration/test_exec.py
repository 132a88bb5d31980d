"""`shoal job exec` through the whole product: real server and agent processes, the CLI as a
user runs it (a subprocess; in a real pseudo-terminal for -t). The command runs in the task's
environment and its exit code is the CLI's; a terminal answers what is typed; another user and a
finished job are refused; closing the session ends the shell and its background child; every
session is in the audit log; a container task; a server on the network (node certificates, the
pinned CA)."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator

import psutil
import pytest

from shoal.agent.runtimes.container import podman_problem
from shoal.agent.task_users import TaskUsers
from shoal.local.supervisor import stop_local
from tests.agent.limits_helpers import cgroups_refused
from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster, start_cluster
from tests.integration.conftest import local_cli as shoal
from tests.integration.test_local_mode import native
from tests.integration.test_network_join import Network, network, worker  # noqa: F401

BUSYBOX = "localhost/shoal-test/busybox:local"
SHOAL = [sys.executable, "-m", "shoal", "--context", "local"]
ROLES = "main:\n  command: pwd; sleep 300\nside:\n  command: pwd; sleep 300\n"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster for the module (`shoal --context local` finds it)."""
    home = tmp_path_factory.mktemp("exec") / "shoal-home"
    running = start_cluster(home)
    (home / "server.json").write_text(json.dumps({"url": running.info.url}))
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


def started(cluster: LocalCluster, text: str) -> tuple[str, str]:
    """Submit, wait until every task runs; the job id and its main task's start directory."""
    job_id = cluster.submit(text)
    cluster.wait_for(lambda: cluster.output_so_far(job_id, "main").endswith("\n"), 60)
    return job_id, cluster.output_so_far(job_id, "main").strip()


@pytest.fixture(scope="module")
def job(local: LocalCluster) -> tuple[str, str]:
    return started(local, native("shell", ROLES))


def cli_env(cluster: LocalCluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_HOME=str(cluster.home), SHOAL_CONFIG=str(cluster.home / "no-config.yaml"))
    return env


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_command_runs_in_the_task_and_its_exit_code_is_the_clis(
    local: LocalCluster, job: tuple[str, str]
) -> None:
    job_id, workdir = job
    done = shoal(
        local, "job", "exec", job_id, "--", "sh", "-c", "echo $SHOAL_TASK_ROLE; pwd; exit 3"
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["main", workdir]
    side = shoal(
        local, "job", "exec", job_id, "--task", "side/0", "--", "sh", "-c", "echo $SHOAL_TASK_ROLE"
    )
    assert side.returncode == 0 and side.stdout == "side\n", side.stderr
    piped = subprocess.run(
        [*SHOAL, "job", "exec", "-i", job_id, "--", "wc", "-c"],
        input="twelve bytes", capture_output=True, text=True, env=cli_env(local), timeout=60,
        check=False,
    )  # fmt: skip
    assert piped.returncode == 0 and piped.stdout.strip() == "12", piped.stderr

    listed = shoal(local, "job", "exec-sessions", "--job", job_id, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    newest, middle, first = json.loads(listed.stdout)[:3]
    assert (first["user"], first["job"], first["role"], first["index"]) == (
        "admin",
        job_id,
        "main",
        0,
    )
    assert first["exitCode"] == 3 and first["endReason"] == "exited" and first["tty"] is False
    assert first["argv"] == ["sh", "-c", "echo $SHOAL_TASK_ROLE; pwd; exit 3"]
    assert first["startedAt"] <= first["endedAt"] and first["durationS"] >= 0
    assert middle["role"] == "side" and newest["argv"] == ["wc", "-c"]
    table = shoal(local, "job", "exec-sessions")
    assert "STARTED" in table.stdout and "exited" in table.stdout and "side/0" in table.stdout
    _runs_as_the_tasks_user(local, job_id)


def test_a_terminal_answers_what_is_typed(local: LocalCluster, job: tuple[str, str]) -> None:
    job_id, _ = job
    with cli_in_a_terminal(local, "job", "exec", "-it", job_id) as (pid, terminal):
        os.write(terminal, b"echo role-is-$SHOAL_TASK_ROLE; tty\r")
        seen = _read_until(terminal, b"/dev/pts/")  # typed at once: kept until the shell runs
        assert b"role-is-main\r\n/dev/pts/" in seen
        os.write(terminal, b"sleep 100\r")
        time.sleep(0.3)
        os.write(terminal, b"\x03echo after-$((1 + 1))\r")  # ^C reaches the remote sleep
        _read_until(terminal, b"after-2")
        os.write(terminal, b"exit 4\r")
        _read_until(terminal, b"")
        assert _cooked(terminal)  # this terminal is as it was before
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 4


def test_sigterm_ends_a_terminal_session_and_restores_the_terminal(
    local: LocalCluster, job: tuple[str, str]
) -> None:
    job_id, _ = job
    with cli_in_a_terminal(local, "job", "exec", "-it", job_id) as (pid, terminal):
        os.write(terminal, b"echo ready-$((2 + 2))\r")
        _read_until(terminal, b"ready-4")
        assert not _cooked(terminal)  # raw while the session runs
        os.kill(pid, signal.SIGTERM)
        _read_until(terminal, b"")
        assert _cooked(terminal)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM


@contextlib.contextmanager
def cli_in_a_terminal(cluster: LocalCluster, *args: str) -> Iterator[tuple[int, int]]:
    """The CLI in a real pseudo-terminal, as a person runs it: its pid and the terminal."""
    pid, terminal = pty.fork()
    if pid == 0:
        os.execve(sys.executable, [*SHOAL, *args], cli_env(cluster))
    try:
        yield pid, terminal
    finally:
        os.close(terminal)  # a CLI still running gets SIGHUP from its terminal
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _cooked(terminal: int) -> bool:
    """The terminal echoes and edits lines (as a shell leaves it), not raw."""
    flags = termios.tcgetattr(terminal)[3]
    return bool(flags & termios.ECHO and flags & termios.ICANON)


def _read_until(fd: int, text: bytes, timeout: float = 30.0) -> bytes:
    """What the terminal shows until ``text`` (b"": until it closes)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the CLI ended
            chunk = b""
        seen += chunk
        if (text and text in seen) or not chunk:
            return seen
    raise AssertionError(f"{text!r} not shown within {timeout} s: {seen!r}")


def test_another_user_and_a_finished_job_are_refused(
    local: LocalCluster, job: tuple[str, str]
) -> None:
    job_id, _ = job
    bob = local.client.create_user("bob", False, [], None)["token"]
    env = {**cli_env(local), "SHOAL_URL": local.info.url, "SHOAL_TOKEN": bob}
    refused = subprocess.run(
        [sys.executable, "-m", "shoal", "job", "exec", job_id, "--", "true"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 1
    assert f"job {job_id} is admin's: only its owner or an admin" in refused.stderr

    finished = local.submit(native("quick", "main:\n  command: 'true'\n"))
    assert local.wait(finished)["state"] == "SUCCEEDED"
    done = shoal(local, "job", "exec", finished, "--", "true")
    assert done.returncode == 1
    assert f"task main/0 of job {finished} is SUCCEEDED" in done.stderr, done.stderr


def test_closing_the_session_ends_the_shell_and_its_background_child(
    local: LocalCluster, job: tuple[str, str]
) -> None:
    job_id, _ = job
    script = "sleep 1000 & echo child=$!; echo shell=$$; wait"
    cli = subprocess.Popen(
        [*SHOAL, "job", "exec", job_id, "--",
         "sh", "-c", script],
        stdout=subprocess.PIPE, env=cli_env(local), start_new_session=True,
    )  # fmt: skip
    assert cli.stdout is not None
    pids = [int(cli.stdout.readline().decode().split("=")[1]) for _ in range(2)]
    assert not any(gone(pid) for pid in pids)
    cli.send_signal(signal.SIGTERM)  # as closing the page would
    assert cli.wait(30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 15
    while not all(gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"{pids} outlived the session"
        time.sleep(0.05)
    rows = json.loads(shoal(local, "job", "exec-sessions", "-n", "1", "-o", "json").stdout)
    assert rows[0]["endReason"] == "closed-by-user" and rows[0]["exitCode"] is None


CONTAINERS = podman_problem(shutil.which("podman")) or cgroups_refused()


@pytest.mark.skipif(CONTAINERS is not None, reason=f"no containers here: {CONTAINERS}")
def test_a_command_runs_in_a_container_task(local: LocalCluster) -> None:
    pushed = shoal(local, "image", "push", BUSYBOX)
    assert pushed.returncode == 0, pushed.stderr
    roles = (
        f"main:\n  image: {BUSYBOX}\n  resources: {{memory: 128Mi}}\n  command: pwd; sleep 300\n"
    )
    job_id, workdir = started(local, native("boxed", roles, "runtime: container\n"))
    done = shoal(
        local,
        "job",
        "exec",
        job_id,
        "--",
        "sh",
        "-c",
        "echo $SHOAL_TASK_ROLE; pwd; cat /proc/1/cmdline; exit 5",
    )
    assert done.returncode == 5, done.stderr
    role, directory, first = done.stdout.splitlines()
    assert (role, directory, first.replace("\0", " ").strip()) == ("main", workdir, "sleep 300")
    _runs_as_the_tasks_user(local, job_id)

    cli = subprocess.Popen(
        [*SHOAL, "job", "exec", job_id, "--",
         "sh", "-c", "sleep 1733 & echo started; wait"],
        stdout=subprocess.PIPE, env=cli_env(local), start_new_session=True,
    )  # fmt: skip
    assert cli.stdout is not None and cli.stdout.readline() == b"started\n"
    sleeping = [
        p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "1733"]
    ]
    assert len(sleeping) == 1  # the container's process, seen from the host
    cli.send_signal(signal.SIGTERM)
    cli.wait(30)
    deadline = time.monotonic() + 15
    while not gone(sleeping[0]):
        assert time.monotonic() < deadline, "the container's sleep outlived the session"
        time.sleep(0.05)
    assert local.client.stop(job_id)


def test_a_server_on_the_network_relays_to_an_agent_with_a_node_certificate(
    network: Network,  # noqa: F811
    worker: str,  # noqa: F811
) -> None:
    text = "version: 1\nname: remote-shell\nroles:\n  a:\n    command: sleep 300\n"
    job_id = str(network.admin.submit(text)[0]["id"])
    deadline = time.monotonic() + 60
    while [t["state"] for t in network.admin.job(job_id)["tasks"]] != ["RUNNING"]:
        assert time.monotonic() < deadline, network.admin.job(job_id)
        time.sleep(0.1)
    done = network.shoal("job", "exec", job_id, "--", "sh", "-c", "echo on-$SHOAL_NODE_NAME")
    assert done.returncode == 0 and done.stdout == f"on-{worker}\n", done.stderr
    assert network.admin.stop(job_id)


def _runs_as_the_tasks_user(local: LocalCluster, job_id: str) -> None:
    """The exec'd command has the task's own uid (docs/security.md), never the agent's."""
    task = shoal(local, "job", "exec", job_id, "--", "sh", "-c", "id -u; stat -c %u .")
    assert task.returncode == 0, task.stderr
    uid, owner = task.stdout.split()
    if TaskUsers.default().separate:
        assert int(uid) != os.geteuid() and uid == owner, task.stdout
