"""No container of an attempt outlives it, whatever moment of its start the stop comes at (issue
#24 item 4: a test run left a podman container in state "Created").

``podman run`` runs in a process group of its own (a stop signal is the shim's to pass on), so
neither the SIGKILL of the keeper's group (the agent's hard kill, or whoever kills an agent and its
tasks) nor the agent's removal reached it: it went on to create (and start) the container after
the shim, and whoever removes the container, was gone. A fake ``podman`` in front of the real one
holds ``podman run`` back, so the stop comes while the container is being made, every time.

Real podman and the project's test image (scripts/containers-setup.sh); a cgroup where this
machine has them. Every container is named and labelled after the test's own agent instance
(its home is the test's directory) and removed by that label at the end, pass or fail."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from shoal.agent.cache import NodeCache
from shoal.agent.limits import instance_name
from shoal.agent.processes import signal_group
from shoal.agent.runner import Runner
from shoal.agent.runtimes.container import ContainerRuntime, LocalImages, podman_problem
from shoal.protocol import ImageRef, LaunchOrder
from tests.agent.limits_helpers import cgroups_refused, order

PODMAN = shutil.which("podman")
PYTHON = "localhost/shoal-test/python:bookworm"
PROBLEM = podman_problem(PODMAN)
LIMITED = PROBLEM is None and cgroups_refused() is None
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no containers here: {PROBLEM}")
HELD_S = 3.0  # how long the fake podman holds `podman run` back
SETTLE_S = 30.0  # how long a container killed mid-start may take to go


class Agent:
    """A Runner with the container runtime, whose podman is a fake one that notes the pid of
    ``podman run`` and holds it back ``held`` seconds (then runs the real podman in its place)."""

    def __init__(self, home: Path, held: float) -> None:
        self.home = home
        self.instance = instance_name(home)
        scratch = home / "podman"
        scratch.mkdir(parents=True)
        self.scratch = scratch
        self.started = home / "run-started"  # the pid of the fake podman's `run`
        podman = home / "podman.sh"
        podman.write_text(
            "#!/bin/sh\n"
            f'[ "$1" = run ] && {{ echo $$ > {self.started}; sleep {held}; }}\n'
            f'exec {PODMAN} "$@"\n'
        )
        podman.chmod(0o755)
        runtime = ContainerRuntime(LocalImages(scratch, str(podman)), scratch, self.instance,
                                   str(podman))  # fmt: skip
        self.runner = Runner(home, NodeCache(home / "cache", _no_downloads),
                             runtimes={"container": runtime})  # fmt: skip

    def launch(self, limited: bool) -> LaunchOrder:
        launch = order("echo ready; sleep 300", image=_image(self.scratch), grace=0.5)
        if not limited:
            launch = launch.model_copy(update={"limits": None})
        self.runner.launch(launch)
        assert self.runner.attempts["1.1"].pid is not None, self.runner.attempts["1.1"].exit
        return launch

    def run_pid(self) -> int:
        """The pid of ``podman run`` (the fake one execs the real one), once it began."""
        deadline = time.monotonic() + 60
        while not self.started.exists() or not self.started.read_text().strip():
            assert time.monotonic() < deadline, "podman run never began"
            time.sleep(0.01)
        return int(self.started.read_text())

    def containers(self) -> list[str]:
        return _containers(f"label=shoal.agent={self.instance}", self.scratch)

    def kill_everything(self) -> None:
        """What a test's teardown does to an agent and its tasks: SIGKILL of the keeper's
        process group (the agent, this test, does nothing more: as if killed too)."""
        attempt = self.runner.attempts["1.1"]
        assert attempt.pid is not None and attempt.proc is not None
        signal_group(attempt.pid, signal.SIGKILL)
        attempt.proc.wait()

    def tear_down(self) -> None:
        """Whatever the test left, pass or fail: processes naming its containers (keeper, shim,
        guard, podman run), its containers (by label), its cgroup."""
        for attempt in self.runner.attempts.values():
            if attempt.pid is not None:
                signal_group(attempt.pid, signal.SIGKILL)
            if attempt.proc is not None:
                attempt.proc.wait()
        for process in psutil.process_iter(["cmdline"]):
            if any(self.instance in part for part in process.info["cmdline"] or ()):
                with contextlib.suppress(psutil.Error):
                    process.kill()
        for container in self.containers():
            subprocess.run([PODMAN or "podman", "rm", "--force", "--time", "0", container],
                           cwd=self.scratch, capture_output=True, check=False)  # fmt: skip
        for attempt in self.runner.attempts.values():
            if attempt.cgroup is not None:
                self.runner.limiter.release(attempt.cgroup)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    running = Agent(tmp_path / "agent", HELD_S)
    try:
        yield running
    finally:
        running.tear_down()


def test_killed_while_podman_run_creates_the_container_leaves_no_container(agent: Agent) -> None:
    """The observed sequence: the agent and its keepers' process groups are SIGKILLed while
    ``podman run`` makes the container. Its own process group, it went on: the container was
    created (and, from an image that cannot start, left "Created")."""
    agent.launch(LIMITED)
    run = agent.run_pid()  # held back: the container is not made yet
    agent.kill_everything()
    _wait_ended(run)  # podman run went on, and made the container
    _assert_goes(agent)


def test_killed_right_after_the_start_leaves_no_container(tmp_path: Path) -> None:
    agent = Agent(tmp_path / "agent", 0.0)
    try:
        agent.launch(LIMITED)
        log = agent.runner.attempts["1.1"].log_path("stdout")
        deadline = time.monotonic() + 60
        while "ready" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline, "the container never started"
            time.sleep(0.05)
        agent.kill_everything()  # the shim waits for the running container
        _assert_goes(agent)
    finally:
        agent.tear_down()


def test_an_agent_stop_while_podman_run_creates_the_container_leaves_none(agent: Agent) -> None:
    """SIGTERM: Agent.stop, Runner.stop_all, on a node without cgroups (nothing kills ``podman
    run`` then): its removal must come after ``podman run``, not before."""
    agent.launch(limited=False)
    run = agent.run_pid()
    agent.runner.stop_all(0.5)  # the grace ends while podman run is held back
    agent.runner.poll()
    attempt = agent.runner.attempts["1.1"]
    assert attempt.exit is not None and attempt.exit.agent_shutdown
    assert not psutil.pid_exists(run) or psutil.Process(run).status() == psutil.STATUS_ZOMBIE, (
        "podman run outlived the agent's stop"
    )
    assert agent.containers() == [], "a container outlived its attempt"
    assert not list(agent.scratch.glob("*.guard"))


def test_an_agent_started_again_removes_containers_of_attempts_it_does_not_run(
    tmp_path: Path,
) -> None:
    """What a start cut short with everything of it killed (its guard too) can still leave: an
    agent started again on the same home removes it; another agent's containers stay."""
    home, other = tmp_path / "agent", tmp_path / "other"
    home.mkdir()
    image = _image(tmp_path)
    ours, theirs = instance_name(home), instance_name(other)
    try:
        for instance in (ours, theirs):
            label = ["--label", f"shoal.agent={instance}", "--label", "shoal.attempt=7.1"]
            made = subprocess.run(
                [PODMAN or "podman", "create", "--name", f"{instance}-7.1", *label,
                 image.image_id, "/bin/sh", "-c", "true"],
                cwd=tmp_path, capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert made.returncode == 0, made.stderr
        runner = Runner(home, NodeCache(home / "cache", _no_downloads))
        assert runner.recover() == []
        assert _containers(f"label=shoal.agent={ours}", tmp_path) == []
        assert _containers(f"label=shoal.agent={theirs}", tmp_path) == [f"{theirs}-7.1"]
    finally:
        for instance in (ours, theirs):
            for container in _containers(f"label=shoal.agent={instance}", tmp_path):
                subprocess.run([PODMAN or "podman", "rm", "--force", container],
                               cwd=tmp_path, capture_output=True, check=False)  # fmt: skip


def _assert_goes(agent: Agent) -> None:
    deadline = time.monotonic() + SETTLE_S
    while agent.containers():
        assert time.monotonic() < deadline, f"left behind: {agent.containers()}"
        time.sleep(0.2)


def _wait_ended(pid: int) -> None:
    deadline = time.monotonic() + 60
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "podman run did not end"
        time.sleep(0.05)


def _containers(label: str, scratch: Path) -> list[str]:
    listed = subprocess.run(
        [PODMAN or "podman", "ps", "--all", "--format", "json", "--filter", label],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(",".join(c["Names"]) for c in json.loads(listed.stdout or "[]"))


def _image(scratch: Path) -> ImageRef:
    done = subprocess.run(
        [PODMAN or "podman", "image", "inspect", "--format", "{{.Id}}", PYTHON],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(
            f"{PYTHON} is not built: run scripts/containers-setup.sh ({done.stderr.strip()})"
        )
    return ImageRef(name=PYTHON, image_id=done.stdout.strip(), blob_sha256="0" * 64, size=0)


def _no_downloads(path: str, sink: object) -> None:
    raise AssertionError(path)
