"""The container runtime through a real Runner: podman with crun, the project's test images
(scripts/containers-setup.sh), the task's own cgroup. Same env contract, directory and host
network as a process; the same limits, OOM verdict and clean stop."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from shoal.agent.limits import instance_name
from shoal.agent.runtimes.container import container_name, podman_problem
from shoal.protocol import ImageRef
from tests.agent.limits_helpers import cgroups_refused, log_text, make_runner, order, run_to_end

BUSYBOX = "localhost/shoal-test/busybox:local"
PYTHON = "localhost/shoal-test/python:bookworm"
PROBLEM = podman_problem(shutil.which("podman")) or cgroups_refused()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no containers here: {PROBLEM}")


def image(name: str, scratch: Path) -> ImageRef:
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", name],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"{name} is not built: run scripts/containers-setup.sh ({done.stderr.strip()})")
    return ImageRef(name=name, image_id=done.stdout.strip(), blob_sha256="0" * 64, size=0)


def containers_named(name: str, scratch: Path) -> str:
    return subprocess.run(
        ["podman", "ps", "--all", "--quiet", "--filter", f"name=^{name}$"],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_container_task_sees_the_contract_its_directory_and_the_hosts_network(
    tmp_path: Path,
) -> None:
    runner = make_runner(tmp_path)
    command = 'echo "role=$SHOAL_TASK_ROLE dir=$(pwd) host=$(hostname)"; ls "$SHOAL_HOSTFILE"'
    report = run_to_end(runner, order(command, image=image(BUSYBOX, tmp_path)))
    assert report.exit_code == 0, log_text(runner, "1.1")
    workdir = runner.attempts["1.1"].workdir
    out = log_text(runner, "1.1", "stdout")
    assert f"role=main dir={workdir} host={socket.gethostname()}" in out
    assert not containers_named(container_name(instance_name(tmp_path), "1.1"), tmp_path)


def test_over_the_memory_limit_in_a_container_is_an_oom_kill(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    command = "python3 -c 'b = bytearray(400 << 20)'"
    report = run_to_end(runner, order(command, memory_mib=160, image=image(PYTHON, tmp_path)))
    assert report.signal == 9 and report.oom_killed, log_text(runner, "1.1")
    assert 150 <= report.usage["peakMemoryMiB"] <= 160.5


def test_half_a_cpu_in_a_container_measures_half_a_cpu(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    burn = "import time\nt = time.time()\nwhile time.time() - t < 3: pass"
    started = time.monotonic()
    launch = order(f'python3 -c "{burn}"', cpu_millis=500, image=image(PYTHON, tmp_path))
    report = run_to_end(runner, launch)
    wall = time.monotonic() - started
    assert report.exit_code == 0, log_text(runner, "1.1")
    measured = report.usage["cpuSeconds"] / wall
    assert 0.35 <= measured <= 0.65, f"{report.usage['cpuSeconds']} CPU s over {wall:.2f} s"


def test_a_fork_bomb_in_a_container_stops_at_the_limit_and_stop_leaves_nothing(
    tmp_path: Path,
) -> None:
    runner = make_runner(tmp_path)
    bomb = "bomb() { bomb | bomb & }; bomb; sleep 60"
    runner.launch(order(bomb, pids=96, grace=1.0, image=image(BUSYBOX, tmp_path)))
    attempt = runner.attempts["1.1"]
    assert attempt.cgroup is not None
    deadline = time.monotonic() + 30
    while attempt.cgroup.stats().forks_refused == 0:  # it reaches the limit...
        assert attempt.exit is None, log_text(runner, "1.1")
        assert time.monotonic() < deadline, "the bomb never reached the limit"
        runner.poll()
        time.sleep(0.05)
    assert (attempt.cgroup.stats().processes or 0) <= 96  # ...and goes no further
    runner.kill("1.1")
    deadline = time.monotonic() + 60
    while attempt.exit is None:
        runner.poll()
        assert time.monotonic() < deadline, "the container was not stopped"
        time.sleep(0.05)
    assert attempt.exit.stop_requested
    assert not attempt.cgroup.exists()
    assert not containers_named(container_name(instance_name(tmp_path), "1.1"), tmp_path)


def test_stop_reaches_every_process_in_the_container(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    command = "trap 'echo got TERM; exit 0' TERM; sleep 300 & echo ready; wait"
    runner.launch(order(command, grace=20.0, image=image(BUSYBOX, tmp_path)))
    attempt = runner.attempts["1.1"]
    deadline = time.monotonic() + 60
    while "ready" not in log_text(runner, "1.1", "stdout"):
        assert time.monotonic() < deadline and attempt.exit is None, log_text(runner, "1.1")
        runner.poll()
        time.sleep(0.05)
    runner.kill("1.1")
    started = time.monotonic()
    while attempt.exit is None:
        runner.poll()
        assert time.monotonic() - started < 15, "SIGTERM did not end the task before the grace"
        time.sleep(0.05)
    assert "got TERM" in log_text(runner, "1.1", "stdout")


def test_an_image_not_on_the_node_is_a_launch_error_naming_the_fix(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    missing = ImageRef(name="nowhere/x:1", image_id="f" * 64, blob_sha256="0" * 64, size=0)
    report = run_to_end(runner, order("true", image=missing))
    assert report.launch_error is not None
    assert "shoal image push nowhere/x:1" in report.launch_error


def test_a_command_runs_in_a_running_tasks_container(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    runner.launch(order("echo ready; sleep 60", image=image(BUSYBOX, tmp_path)))
    attempt = runner.attempts["1.1"]
    deadline = time.monotonic() + 60
    while "ready" not in log_text(runner, "1.1", "stdout"):
        assert time.monotonic() < deadline and attempt.exit is None, log_text(runner, "1.1")
        time.sleep(0.05)
    launch = runner.exec_launch("1.1", ["/bin/sh", "-c", 'echo "$SHOAL_TASK_ROLE $(pwd)"'])
    done = subprocess.run(
        launch.argv, env=launch.env, cwd=launch.cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"main {attempt.workdir}"
    runner.kill("1.1")
    while attempt.exit is None:
        runner.poll()
        time.sleep(0.05)
