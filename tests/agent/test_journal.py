"""Agent restarts keep their tasks (real processes): the saved attempt's format, the keeper's exit
record and lease, re-adoption by a new runner on the same home (a live keeper, an ended one, a
zombie, a pid now naming another process), and a restarted agent that kills the attempts the
server calls stale before it takes any order."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest

from shoal.agent.cache import NodeCache
from shoal.agent.identity import Connection
from shoal.agent.journal import Found, Journal, SavedAttempt, boot_clock, same_process
from shoal.agent.main import Agent
from shoal.agent.runner import Runner
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION, LaunchOrder
from tests.integration.conftest import port_base


def no_downloads(path: str, sink: object) -> None:
    raise AssertionError(f"these tasks have no code or data, yet {path} was asked for")


def order(attempt_id: str, command: str, grace: float = 1.0, **extra: Any) -> LaunchOrder:
    return LaunchOrder(
        attempt_id=attempt_id,
        job_id="7",
        role="w",
        index=0,
        node="n0",
        command=command,
        env={},
        hostfile="",
        has_code=False,
        kill_grace_s=grace,
        epoch=3,
        **extra,
    )


def wait_exit(runner: Runner, attempt_id: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while runner.attempts[attempt_id].exit is None:
        assert time.monotonic() < deadline, "the task did not end"
        runner.poll()
        time.sleep(0.02)
    return runner.attempts[attempt_id].exit


def wait_until(what: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.02)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "agent"


def test_a_saved_attempt_is_private_atomic_and_keeps_no_secret(home: Path) -> None:
    runner = Runner(home, NodeCache(home / "cache", no_downloads))
    runner.launch(order("1.1", "echo $X; sleep 30", secrets={"$X": "hunter2"}))
    stdout = runner.attempts["1.1"].log_dir / "stdout"
    try:
        wait_until(lambda: stdout.read_text() == "hunter2\n")  # the task has it, not the file
        path = home / "attempts" / "1.1" / "state.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert not list(path.parent.glob("*.tmp"))
        text = path.read_text()
        assert "hunter2" not in text
        saved = SavedAttempt.model_validate_json(text)
        attempt = runner.attempts["1.1"]
        assert saved.pid == attempt.pid and saved.pid is not None
        assert saved.create_time == psutil.Process(saved.pid).create_time()
        assert saved.order.epoch == 3 and saved.order.secrets == {}
        assert saved.log_dir == str(attempt.log_dir)
        assert Journal(home).find(saved) is Found.RUNNING
    finally:
        runner.stop_all(1.0)
    assert Journal(home).exit_record("1.1") is not None  # the keeper recorded the end


def test_a_new_runner_adopts_a_live_attempt_and_reads_its_exit_code(home: Path) -> None:
    first = Runner(home, NodeCache(home / "cache", no_downloads))
    first.launch(order("2.1", "echo before; sleep 1.5; echo after; exit 3"))
    wait_until(lambda: (first.attempts["2.1"].log_dir / "stdout").read_text() == "before\n")
    # the first agent is gone (its runner is simply dropped); a new one starts on the same home
    second = Runner(home, NodeCache(home / "cache", no_downloads))
    assert second.recover() == ["2.1"]
    adopted = second.attempts["2.1"]
    assert adopted.adopted and adopted.exit is None and adopted.proc is None
    assert [r.attempt_id for r in second.running_reports()] == ["2.1"]
    assert second.running_reports()[0].epoch == 3
    report = wait_exit(second, "2.1")
    assert (report.exit_code, report.signal, report.fenced, report.epoch) == (3, None, False, 3)
    assert (adopted.log_dir / "stdout").read_text() == "before\nafter\n"
    first.attempts["2.1"].proc.wait()  # type: ignore[union-attr]  # the test's own child


def test_an_attempt_that_ended_while_no_agent_ran_is_reported_with_its_code(home: Path) -> None:
    first = Runner(home, NodeCache(home / "cache", no_downloads))
    first.launch(order("3.1", "exit 7"))
    keeper = first.attempts["3.1"].pid
    assert keeper is not None
    wait_until(lambda: psutil.Process(keeper).status() == psutil.STATUS_ZOMBIE)
    assert not same_process(keeper, first.attempts["3.1"].create_time)  # a zombie is dead
    second = Runner(home, NodeCache(home / "cache", no_downloads))
    second.recover()
    report = second.attempts["3.1"].exit
    assert report is not None and (report.exit_code, report.epoch) == (7, 3)
    second.attempts["3.1"].logs_done = True
    assert [e.attempt_id for e in second.exit_reports()] == ["3.1"]
    second.acknowledge(["3.1"])
    assert not (home / "attempts" / "3.1").exists()  # forgotten once acknowledged
    first.attempts["3.1"].proc.wait()  # type: ignore[union-attr]


def test_a_saved_pid_that_names_another_process_now_is_not_adopted(home: Path) -> None:
    journal = Journal(home)
    me = psutil.Process(os.getpid())
    saved = SavedAttempt(
        order=order("4.1", "true"),
        workdir=str(home / "w"),
        log_dir=str(home / "l"),
        pid=me.pid,
        create_time=me.create_time() - 100,  # the saved process started long before this one
    )
    journal.save(saved)
    assert journal.find(saved) is Found.VANISHED
    runner = Runner(home, NodeCache(home / "cache", no_downloads))
    runner.recover()
    report = runner.attempts["4.1"].exit
    assert report is not None and (report.exit_code, report.signal) == (None, 9)
    runner.kill("4.1")  # nothing is signalled: this test process is still alive
    assert me.is_running()


def test_the_keeper_stops_its_task_when_the_lease_runs_out(home: Path) -> None:
    journal = Journal(home)
    journal.extend_lease(boot_clock() + 1.0)
    runner = Runner(home, NodeCache(home / "cache", no_downloads))
    trap = "trap 'echo stopped; exit 143' TERM; echo up; sleep 30 & wait"
    runner.launch(order("5.1", trap))
    started = time.monotonic()
    report = wait_exit(runner, "5.1")
    took = time.monotonic() - started
    assert report.fenced and report.exit_code == 143
    assert 0.5 < took < 10
    assert (runner.attempts["5.1"].log_dir / "stdout").read_text() == "up\nstopped\n"


def test_a_fenced_task_that_ignores_sigterm_is_killed_after_its_grace(home: Path) -> None:
    Journal(home).extend_lease(boot_clock() - 1.0)  # already run out
    runner = Runner(home, NodeCache(home / "cache", no_downloads))
    runner.launch(order("6.1", "trap '' TERM; sleep 30", grace=0.5))
    report = wait_exit(runner, "6.1")
    assert report.fenced and (report.exit_code, report.signal) == (None, 9)


# ---- a restarted agent against a stand-in server ----


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, stale: list[str], keeper: int, create_time: float) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.stale, self.keeper, self.create_time = stale, keeper, create_time
        self.first_orders: bool | None = None  # was the stale keeper alive at the first order?
        self.reports: list[dict[str, Any]] = []


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if self.path.endswith("/report"):
            self.server.reports.append(body)
            answer: dict[str, Any] = {"acked": [], "kill": self.server.stale, "lease_s": 30.0}
        elif self.path.endswith("/orders"):
            if self.server.first_orders is None:
                alive = same_process(self.server.keeper, self.server.create_time)
                self.server.first_orders = alive
            answer = {"launch": [], "kill": []}
        else:
            answer = {"sizes": {}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header(PROTOCOL_HEADER, str(PROTOCOL_VERSION))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stale_run(home: Path) -> Iterator[tuple[Runner, int, float]]:
    first = Runner(home, NodeCache(home / "cache", no_downloads))
    first.launch(order("8.1", "trap 'sleep 0.5; exit 143' TERM; sleep 60 & wait"))
    attempt = first.attempts["8.1"]
    assert attempt.pid is not None and attempt.create_time is not None
    yield first, attempt.pid, attempt.create_time
    first.stop_all(0.5)


def test_a_restarted_agent_kills_stale_attempts_before_it_takes_orders(
    home: Path, stale_run: tuple[Runner, int, float]
) -> None:
    _, keeper, create_time = stale_run
    server = StandIn(port_base() + 3960, ["8.1"], keeper, create_time)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    agent = Agent(Connection.bearer(url, "t"), home, [], "restarted")
    try:
        agent.start()
        wait_until(lambda: server.first_orders is not None)
        assert server.first_orders is False  # dead before the first order was asked for
        first_report = server.reports[0]
        assert [r["attempt_id"] for r in first_report["running"]] == ["8.1"]
        assert first_report["running"][0]["epoch"] == 3
        assert not same_process(keeper, create_time)
        lease = Journal(home).lease_deadline()
        assert lease is not None and lease > boot_clock() + 25  # extended by the answers
    finally:
        agent.stop(0.5)
        server.shutdown()
        server.server_close()


def test_an_attempt_saved_before_its_keeper_pid_is_found_by_its_command_line(
    home: Path,
) -> None:
    first = Runner(home, NodeCache(home / "cache", no_downloads))
    first.launch(order("9.1", "sleep 30"))
    keeper = first.attempts["9.1"]
    journal = Journal(home)
    saved = keeper.saved()
    journal.save(saved.model_copy(update={"pid": None, "create_time": None}))  # as if cut short
    try:
        second = Runner(home, NodeCache(home / "cache", no_downloads))
        second.recover()
        adopted = second.attempts["9.1"]
        assert adopted.exit is None and adopted.pid == keeper.pid
        assert adopted.create_time == keeper.create_time
    finally:
        first.stop_all(0.5)
    missing = SavedAttempt(order=order("9.2", "true"), workdir="w", log_dir="l")
    journal.save(missing)
    third = Runner(home, NodeCache(home / "cache", no_downloads))
    third.recover()
    report = third.attempts["9.2"].exit
    assert report is not None and report.launch_error == "its agent stopped as it launched"
