"""``shoal run`` as a user runs it (a real process, its own process group): SIGTERM, SIGINT and
SIGHUP stop the job's tasks, the embedded agent and server, remove the temporary home and exit
with 128 + the signal; a normal end or a failure removes the home too; ``--port-base`` is
checked and used."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shoal.local.portblock import ephemeral_range, free_port_base
from shoal.local.supervisor import alive
from tests.integration.conftest import port_base

RUN_PORTS = port_base() + 2000  # inside this run's task-port block, clear of the clusters'


def wait_until(what: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(0.05)


def job_file(tmp_path: Path, command: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: runjob
            roles:
              main:
                resources: {{cpu: 1, memory: 64}}
                command: {command}
            """
        )
    )
    return path


def shoal_run(tmp_path: Path, job: Path, *args: str) -> subprocess.Popen[str]:
    """``shoal run`` with its temporary directories under ``tmp_path/tmp``."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "SHOAL_HOME": str(tmp_path / "unused-home"),
        "PYTHONFAULTHANDLER": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "shoal", "run", str(job), "--port-base", str(RUN_PORTS), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a job of a shell
    )


def leftovers(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "tmp").glob("shoal-run-*"))


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGABRT)  # $PYTHONFAULTHANDLER: every thread's stack to stderr
        try:
            out, err = proc.communicate(timeout=10)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"shoal run did not end: {err}") from None
    return proc.returncode, out, err


@pytest.mark.parametrize(
    ("signo", "trap"),
    [
        (signal.SIGTERM, ""),
        (signal.SIGINT, ""),
        (signal.SIGHUP, "trap '' TERM; "),  # a task that ignores SIGTERM gets SIGKILL
    ],
)
def test_signal_stops_the_job_and_cleans_up(tmp_path: Path, signo: int, trap: str) -> None:
    pid_file = tmp_path / "task.pid"
    job = job_file(tmp_path, f"{trap}echo $$ > {pid_file}; exec sleep 300")
    proc = shoal_run(tmp_path, job)
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "")
        task_pid = int(pid_file.read_text())
        assert alive(task_pid) and leftovers(tmp_path)
        proc.send_signal(signo)
        code, _, err = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    name = signal.Signals(signo).name
    assert code == 128 + signo, err
    assert f"got {name}: stopping job" in err
    assert f"{name}: job runjob STOPPED" in err and "removed" in err
    wait_until(lambda: not alive(task_pid), timeout_s=10)
    assert leftovers(tmp_path) == []


def test_signal_right_after_start_still_cleans_up(tmp_path: Path) -> None:
    proc = shoal_run(tmp_path, job_file(tmp_path, "sleep 300"))
    try:
        wait_until(lambda: bool(leftovers(tmp_path)))  # the home exists: it is starting up
        proc.send_signal(signal.SIGTERM)
        code, _, err = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 128 + signal.SIGTERM, err
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("command", "expected"), [("echo port $SHOAL_PORT", 0), ("exit 3", 1)])
def test_home_removed_on_success_and_failure(tmp_path: Path, command: str, expected: int) -> None:
    code, out, err = finish(shoal_run(tmp_path, job_file(tmp_path, command)))
    assert code == expected, err
    if expected == 0:
        assert out.strip() == f"port {RUN_PORTS}"  # the task ports start at --port-base
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("base", "fragment"),
    [("80", "ports below 1024 are privileged"), ("65000", "need ports up to 65999")],
)
def test_bad_port_base_is_one_clear_error(tmp_path: Path, base: str, fragment: str) -> None:
    proc = shoal_run(tmp_path, job_file(tmp_path, "echo never"), "--port-base", base)
    code, _, err = finish(proc)
    assert code == 1
    assert f"--port-base {base}:" in err and fragment in err
    assert leftovers(tmp_path) == []


def test_default_port_block_skips_a_block_with_a_bound_port() -> None:
    start = port_base() + 3000
    low, high = ephemeral_range()
    if start + 999 >= low and start <= high:  # free_port_base rightly passes over such a block
        pytest.skip(f"$SHOAL_TEST_PORT_BASE puts block {start} in the ephemeral range {low}-{high}")
    assert free_port_base(1, start=start) == start
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", start + 500))
        sock.listen()
        assert free_port_base(1, start=start) != start
