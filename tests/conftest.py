"""Shared test fixtures: where the verbatim compatibility samples live. And, at the end of a run,
the check that it left nothing on the machine (tests/leftovers.py): task cgroups, podman
containers, network namespaces or processes of its own still there fail the run, listed."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Generator
from pathlib import Path

import pytest

from shoal.agent.task_users import MODE_VARIABLE, TaskUser, interpreter_reachable
from shoal.agent.workspace import TASK_ROOT_VARIABLE
from tests import leftovers

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SETTLE_S = 15.0  # how long what the last tests stopped may take to go
PIDS = pytest.StashKey[set[int]]()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "compat").is_dir():
        pytest.skip(f"the shared compatibility samples are not beside the repository ({SHARED})")
    return SHARED


def pytest_configure(config: pytest.Config) -> None:
    """The run's token, inherited by every process it starts (xdist's workers included: they
    are started after this); each worker tells the controller its pid (labs are named by it)."""
    os.environ.setdefault(leftovers.RUN_ENV, uuid.uuid4().hex)
    # the agents' task roots (shoal.agent.workspace): a directory tasks running as their users
    # can pass (pytest's own are private), the run's own, removed at its end
    task_root = Path(f"/tmp/shoal-tasks-{os.environ[leftovers.RUN_ENV]}")
    os.environ.setdefault(TASK_ROOT_VARIABLE, str(task_root))
    if not hasattr(config, "workerinput"):
        task_root.mkdir(mode=0o711, exist_ok=True)
        task_root.chmod(0o711)
    if not hasattr(config, "workerinput") and not _interpreter_reachable():
        os.environ.setdefault(MODE_VARIABLE, "agent")  # tests/security sets its own
    config.stash[PIDS] = {os.getpid()}
    if hasattr(config, "workeroutput"):
        config.workeroutput["shoal_pid"] = os.getpid()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """(pytest-xdist, on the controller) a worker ended: keep its pid."""
    output = getattr(node, "workeroutput", None) or {}
    config = getattr(node, "config", None)
    if "shoal_pid" in output and config is not None:
        config.stash[PIDS].add(int(output["shoal_pid"]))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None]:
    """After every other finish (xdist's workers are gone by then), on the controller only:
    fail the run if it left anything of its own on the machine."""
    result = yield
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly:
        return result
    temp = config._tmp_path_factory.getbasetemp()  # the workers' are below it
    token = os.environ[leftovers.RUN_ENV]
    deadline = time.monotonic() + SETTLE_S
    found = leftovers.find(token, temp, config.stash[PIDS])
    while found and time.monotonic() < deadline:
        time.sleep(0.5)
        found = leftovers.find(token, temp, config.stash[PIDS])
    shutil.rmtree(os.environ[TASK_ROOT_VARIABLE], ignore_errors=True)
    if found:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        lines = ["this test run left these behind (tests/leftovers.py):", *found.lines()]
        if reporter is not None:
            reporter.write_sep("=", "leftovers", red=True)
            for line in lines:
                reporter.write_line(line)
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return result


def _interpreter_reachable() -> bool:
    """Whether a task running as another user (shoal.agent.task_users) can run this
    interpreter and its packages, and read the examples: else the run's agents run tasks as
    their own user (said in the header), and only tests/security runs tasks as their users,
    with /usr/bin/python3."""
    return interpreter_reachable() and TaskUser("nobody", 65534, 65534).can_enter(REPO)


@pytest.fixture(autouse=True)
def _passable_tmp_path(request: pytest.FixtureRequest) -> None:
    """A test's temporary directory is like /tmp (sticky, anyone may create files in it) and
    those above it may be passed: the test's tasks run as their users, and write there as a
    user's tasks write to the directories their user gives them."""
    if "tmp_path" not in request.fixturenames:
        return
    path: Path = request.getfixturevalue("tmp_path")
    path.chmod(0o1777)
    top = Path(tempfile.gettempdir())
    for directory in path.parents:
        if directory == top or directory.stat().st_uid != os.geteuid():
            break
        with contextlib.suppress(OSError):
            directory.chmod(directory.stat().st_mode | 0o111)


def pytest_report_header(config: pytest.Config) -> str:
    mode = os.environ.get(MODE_VARIABLE)
    if mode == "agent":
        return (
            "tasks run as the agent's user: this interpreter or checkout is not reachable by "
            "other users (tests/security still runs tasks as their users)"
        )
    return "tasks run as their users (docs/security.md)"
