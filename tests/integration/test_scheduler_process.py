"""The scheduler in a process of its own (docs/architecture.md, "The scheduler process"): a child
of the server that schedules, answers queue positions, is started again when it dies, and ends
when the server ends, however the server ends."""

from __future__ import annotations

import os
import signal
import time

import psutil

from shoal.local.supervisor import alive
from tests.integration.conftest import LocalCluster
from tests.integration.test_local_mode import native
from tests.integration.test_recovery import _restart_server


def _scheduler_of(server_pid: int, timeout_s: float = 30.0) -> psutil.Process:
    """The server's scheduler process (waiting for it to be started, or started again)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in psutil.Process(server_pid).children():
            try:
                if "shoal.server.scheduler_main" in child.cmdline():
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    raise AssertionError(f"server {server_pid} has no scheduler process")


def _position(job: dict[str, object]) -> object:
    reason = job.get("pending")
    return reason.get("position") if isinstance(reason, dict) else None


def _gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False


def test_jobs_are_scheduled_by_a_child_process_that_knows_queue_positions(
    cluster: LocalCluster,
) -> None:
    scheduler = _scheduler_of(cluster.info.server_pid)
    assert scheduler.pid != cluster.info.server_pid
    # Two GPUs per node, two nodes: the first two jobs run, the next three wait in order.
    big = "w:\n  resources: {gpu: 2}\n  command: sleep 30\n"
    ids = [cluster.submit(native(f"big{i}", big)) for i in range(5)]
    cluster.wait_for(lambda: cluster.client.job(ids[1])["state"] == "RUNNING")
    cluster.wait_for(lambda: _position(cluster.client.job(ids[4])) == 3)
    listed = {str(j["id"]): j for j in cluster.client.jobs()}
    assert [_position(listed[i]) for i in ids[2:]] == [1, 2, 3]
    for job_id in ids:
        cluster.client.stop(job_id)


def test_a_killed_scheduler_process_is_started_again_and_scheduling_goes_on(
    cluster: LocalCluster,
) -> None:
    first = _scheduler_of(cluster.info.server_pid)
    first.kill()
    assert _gone(first.pid, 10)
    second = _scheduler_of(cluster.info.server_pid)
    assert second.pid != first.pid
    job = cluster.submit(native("after", "w:\n  command: echo scheduled\n"))
    assert cluster.wait(job)["state"] == "SUCCEEDED"
    log = (cluster.home / "server.log").read_text()
    assert f"the scheduler process (pid {first.pid}) ended with signal 9" in log


def test_the_scheduler_process_ends_with_a_server_killed_by_sigkill(cluster: LocalCluster) -> None:
    first = _scheduler_of(cluster.info.server_pid)
    queued = cluster.submit(native("queued", "w:\n  resources: {gpu: 2}\n  command: echo ok\n"))
    os.kill(cluster.info.server_pid, signal.SIGKILL)
    cluster.wait_for(lambda: not alive(cluster.info.server_pid), timeout_s=10)
    assert _gone(first.pid, 10), "the scheduler outlived its server"
    server = _restart_server(cluster)
    try:
        second = _scheduler_of(server.pid)
        assert second.pid != first.pid
        cluster.wait_for(cluster.client.health, timeout_s=30)
        assert cluster.wait(queued, timeout_s=60)["state"] == "SUCCEEDED"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)  # uvicorn re-raises SIGTERM once it has shut down
        assert _gone(second.pid, 10), "SIGTERM to the server's group left its scheduler behind"


def test_sigterm_to_the_server_alone_stops_its_scheduler_too(cluster: LocalCluster) -> None:
    scheduler = _scheduler_of(cluster.info.server_pid)
    os.kill(cluster.info.server_pid, signal.SIGTERM)  # not the group: the server must end it
    cluster.wait_for(lambda: not alive(cluster.info.server_pid), timeout_s=20)
    assert _gone(scheduler.pid, 10)
    log = (cluster.home / "server.log").read_text()
    assert "Traceback" not in log, log
