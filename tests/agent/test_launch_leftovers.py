"""Nothing of an attempt is left on the node when its launch is cut short (issue 25, item 7: a
test run left task cgroups and a podman container in state "Created"):

- the agent stops while a launch is under way: the keeper is started before the stop looks (and
  stopped with the rest) or not at all, and then the attempt's cgroup and container go;
- the agent was killed during a launch: started again, it removes the cgroup (recorded before it
  was made) and the container of the attempt that never ran;
- ``podman run`` fails after creating the container: the shim removes it.

Real keepers and cgroups (where this machine has them); a runtime that waits in ``prepare``, and a
fake podman that logs its calls."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from shoal.agent.attempt import Attempt
from shoal.agent.cache import NodeCache
from shoal.agent.processes import signal_group
from shoal.agent.runner import Runner
from shoal.agent.runtimes import Launch, TaskSetup, container_shim
from shoal.protocol import LaunchOrder
from tests.agent.limits_helpers import cgroups_refused, order

LIMITED = cgroups_refused() is None


class WaitingRuntime:
    """The process runtime's command, once the test lets ``prepare`` go on."""

    name = "process"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.cleaned: list[str] = []

    def unavailable(self) -> str | None:
        return None

    def refused_limits(self) -> dict[str, str]:
        return {}

    def prepare(self, setup: TaskSetup) -> Launch:
        self.entered.set()
        assert self.go.wait(30)
        join = setup.cgroup.procs_files if setup.cgroup is not None else []
        return Launch(argv=setup.shell_argv, env=setup.env, cwd=setup.start_dir, join=join)

    def cleanup(self, attempt_id: str) -> None:
        self.cleaned.append(attempt_id)

    def exec_argv(self, setup: TaskSetup, argv: list[str], tty: bool) -> Launch:
        raise NotImplementedError

    def exit_signal(self, exit_code: int) -> int | None:
        return None

    def launch_error(self, attempt_dir: Path) -> str | None:
        return None


def no_downloads(path: str, sink: object) -> None:
    raise AssertionError(path)


def runner_with(home: Path, runtime: WaitingRuntime) -> Runner:
    return Runner(home, NodeCache(home / "cache", no_downloads), runtimes={"process": runtime})


def task(attempt_id: str = "1.1") -> LaunchOrder:
    launch = order("sleep 60", attempt_id)
    return launch if LIMITED else launch.model_copy(update={"limits": None})


def test_a_launch_under_way_when_the_agent_stops_leaves_nothing(tmp_path: Path) -> None:
    runtime = WaitingRuntime()
    runner = runner_with(tmp_path, runtime)
    launching = threading.Thread(target=runner.launch, args=(task(),))
    launching.start()
    assert runtime.entered.wait(30)  # its cgroup is made; its keeper is not started yet
    stopping = threading.Thread(target=runner.stop_all, args=(5.0,))
    stopping.start()
    while not runner.draining:
        time.sleep(0.001)
    runtime.go.set()
    launching.join(30)
    stopping.join(30)
    attempt = runner.attempts["1.1"]
    try:
        assert attempt.pid is None, "a keeper started after the agent's stop had looked"
        assert attempt.exit is not None and attempt.exit.agent_shutdown
        assert attempt.exit.launch_error is None  # stopped by the shutdown, not failed
        assert runtime.cleaned == ["1.1"]
        assert attempt.cgroup is None or not attempt.cgroup.exists()
    finally:
        if attempt.pid is not None:  # without the fix: the keeper the agent no longer sees
            signal_group(attempt.pid, 9)
            if attempt.proc is not None:
                attempt.proc.wait()
            runner._release(attempt)


def test_an_attempt_cut_short_by_a_killed_agent_is_cleaned_up_when_it_starts_again(
    tmp_path: Path,
) -> None:
    runtime = WaitingRuntime()
    killed = runner_with(tmp_path, runtime)
    launch = task("2.1")
    attempt = Attempt(launch, tmp_path / "work" / "2.1", tmp_path / "work" / "2.1.logs")
    killed.journal.save(attempt.saved())  # what launch() saves first, then the cgroup:
    made = None
    if launch.limits is not None:
        made = killed.limiter.create("2.1", launch.limits, killed.journal.dir("2.1"))
    again = runner_with(tmp_path, runtime)
    assert again.recover() == ["2.1"]
    ended = again.attempts["2.1"].exit
    assert ended is not None and ended.launch_error == "its agent stopped as it launched"
    assert runtime.cleaned == ["2.1"]  # a container it may have created
    assert made is None or not made.exists()


def test_a_container_that_podman_created_but_could_not_start_is_removed(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    podman = tmp_path / "podman"
    podman.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" = run ] && exit 126\nexit 0\n')
    podman.chmod(0o755)
    shim = [sys.executable, "-I", "-S", container_shim.__file__, "shoal-x-1.1", "-", "--"]
    run = [str(podman), "run", "--detach", "--name", "shoal-x-1.1", "image", "/bin/sh"]
    done = subprocess.run([*shim, *run], cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 126
    assert (tmp_path / container_shim.START_FAILED).read_text() == "126"
    assert calls.read_text().splitlines() == [
        "run --detach --name shoal-x-1.1 image /bin/sh",
        "rm --force --ignore --time 0 shoal-x-1.1",
    ]
