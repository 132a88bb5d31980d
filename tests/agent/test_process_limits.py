"""The process runtime holds a task to its limits through its own cgroup (real processes, real
cgroups): memory ends in an OOM kill the agent explains, cpu is throttled to the quota, a fork
bomb stops at the pids limit, /dev/shm has the asked size, and nothing is left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.limits_helpers import cgroups_refused, log_text, make_runner, order, run_to_end

REFUSED = cgroups_refused()
pytestmark = pytest.mark.skipif(REFUSED is not None, reason=f"no cgroup limits here: {REFUSED}")
PY = sys.executable


def test_over_the_memory_limit_is_an_oom_kill_with_the_peak(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    command = f"{PY} -c 'b = bytearray(300 << 20)'"
    report = run_to_end(runner, order(command, memory_mib=64))
    assert report.signal == 9 and report.oom_killed and report.oom_kills >= 1
    assert report.usage["memoryLimitMiB"] == 64
    assert 60 <= report.usage["peakMemoryMiB"] <= 64.5
    cgroup = runner.attempts["1.1"].cgroup
    assert cgroup is not None and not cgroup.exists()  # removed once it ended


def test_a_child_killed_by_the_limit_is_counted_when_the_shell_survives(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    command = f"{PY} -c 'b = bytearray(300 << 20)'; echo survived; exit 3"
    report = run_to_end(runner, order(command, memory_mib=64))
    assert report.exit_code == 3 and not report.oom_killed and report.oom_kills == 1
    assert "survived" in log_text(runner, "1.1", "stdout")


def test_within_the_limit_nothing_is_killed(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    report = run_to_end(runner, order(f"{PY} -c 'b = bytearray(30 << 20)'", memory_mib=128))
    assert report.exit_code == 0 and not report.oom_killed and report.oom_kills == 0
    assert report.usage["peakMemoryMiB"] >= 30


def test_half_a_cpu_measures_half_a_cpu(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    burn = "import time\nt = time.time()\nwhile time.time() - t < 3: pass"
    started = time.monotonic()
    report = run_to_end(runner, order(f'{PY} -c "{burn}"', cpu_millis=500))
    wall = time.monotonic() - started
    assert report.exit_code == 0
    measured = report.usage["cpuSeconds"] / wall
    assert 0.35 <= measured <= 0.65, f"{report.usage['cpuSeconds']} CPU s over {wall:.2f} s"


def test_a_fork_bomb_stops_at_the_pids_limit_and_is_stopped(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    bomb = "bomb() { bomb | bomb & }; bomb; sleep 60"
    runner.launch(order(bomb, pids=64, grace=1.0))
    attempt = runner.attempts["1.1"]
    assert attempt.cgroup is not None
    deadline = time.monotonic() + 20
    while attempt.cgroup.stats().forks_refused == 0:  # it reaches the limit...
        assert time.monotonic() < deadline, "the bomb never reached the limit"
        time.sleep(0.05)
    time.sleep(0.5)
    assert (attempt.cgroup.stats().processes or 0) <= 64  # ...and goes no further
    runner.kill("1.1")
    deadline = time.monotonic() + 20
    while attempt.exit is None:
        runner.poll()
        assert time.monotonic() < deadline, "the bomb was not stopped"
        time.sleep(0.05)
    assert attempt.exit.stop_requested
    assert not attempt.cgroup.exists() and not attempt.cgroup.pids()


def test_shm_has_the_size_the_role_asked_for(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    if "shm" in runner.unsupported():
        pytest.skip(f"no private /dev/shm here: {runner.unsupported()['shm']}")
    report = run_to_end(runner, order("df -m /dev/shm | tail -1", shm_mib=96))
    assert report.exit_code == 0
    assert " 96 " in log_text(runner, "1.1", "stdout")


def test_the_node_reports_what_it_cannot_limit(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    runner.limiter.unsupported["pids"] = "pretend: the kernel has no pids controller"
    report = run_to_end(runner, order("true"))
    assert report.exit_code == 0
    assert "cannot enforce the task's pids 256 limit: pretend" in log_text(runner, "1.1")
    assert runner.unsupported()["pids"].startswith("pretend")


def test_a_command_runs_in_a_running_tasks_environment_and_cgroup(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    runner.launch(order("sleep 60"))
    attempt = runner.attempts["1.1"]
    assert attempt.cgroup is not None
    launch = runner.exec_launch(
        "1.1", ["/bin/sh", "-c", 'echo "$SHOAL_TASK_ROLE $(pwd)"; cat /proc/self/cgroup']
    )
    done = subprocess.run(
        launch.argv,
        env=launch.env,
        cwd=launch.cwd,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=lambda: [Path(f).write_text(str(os.getpid())) for f in launch.join],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"main {attempt.workdir}"
    assert "/1.1" in done.stdout  # it joined the task's cgroup
    runner.kill("1.1")
    while attempt.exit is None:
        runner.poll()
        time.sleep(0.05)
