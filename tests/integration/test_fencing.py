"""Fencing with real processes on loopback: never two attempts of one task at once.

Each task appends ``start``/``stop`` stamps to a file; the tests check that the intervals of the
attempts of one task never overlap. (a) ``kill -9`` of the agent and a restart within the node
timeout: the tasks are adopted and finish once, with their exit codes and complete logs. (b) An
agent down past the node timeout (two agent processes): its task is stopped by its keeper before
the node is NOT_READY, runs again on the other agent's node, and the restarted agent takes new
work. (c) A frozen server (SIGSTOP) past the lease: the agent's tasks stop before the node timeout.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from shoal.local.supervisor import RUN_FILE, UpOptions, _agent_args, alive, stop_local
from tests.integration.conftest import LocalCluster, port_base, start_cluster
from tests.integration.test_local_mode import native

TIMEOUT = 8.0  # --node-timeout of (b) and (c): lease 4 s with --kill-grace 1


def stamped(stamps: Path, seconds: str, code: int = 0) -> str:
    """A task that stamps its start and its end (also on SIGTERM) into ``stamps``."""
    me = "$SHOAL_TASK_ROLE$SHOAL_TASK_INDEX $SHOAL_JOB_ATTEMPT.$SHOAL_TASK_ATTEMPT"
    return (
        f's={stamps}; echo "start {me} $(date +%s.%N)" >> $s; '
        f"trap 'echo \"stop {me} $(date +%s.%N)\" >> $s; exit 143' TERM; "
        f"echo before; sleep {seconds} & wait; echo after; "
        f'echo "stop {me} $(date +%s.%N)" >> $s; exit {code}'
    )


def role(command: str, instances: int = 1) -> str:
    return f"w:\n  instances: {instances}\n  command: {json.dumps(command)}\n"


def intervals(stamps: Path) -> dict[str, list[tuple[float, float | None]]]:
    """Each task's attempts as (start, stop) in start order; stop None: no stop stamp."""
    starts: dict[tuple[str, str], float] = {}
    stops: dict[tuple[str, str], float] = {}
    for line in stamps.read_text().splitlines():
        kind, task, attempt, at = line.split()
        (starts if kind == "start" else stops)[(task, attempt)] = float(at)
    tasks: dict[str, list[tuple[float, float | None]]] = defaultdict(list)
    for (task, attempt), start in starts.items():
        tasks[task].append((start, stops.get((task, attempt))))
    return {task: sorted(runs) for task, runs in tasks.items()}


def assert_never_overlapping(stamps: Path) -> dict[str, list[tuple[float, float | None]]]:
    runs = intervals(stamps)
    for task, attempts in runs.items():
        for (_, stop), (start, _) in itertools.pairwise(attempts):
            assert stop is not None and stop <= start, f"{task}: attempts overlap: {attempts}"
    return runs


def starts(stamps: Path) -> int:
    return stamps.read_text().count("start ") if stamps.exists() else 0


def spawn_agent(home: Path, args: list[str]) -> subprocess.Popen[bytes]:
    with open(home / "agent-extra.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "shoal", *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def restart_local_agent(cluster: LocalCluster, options: UpOptions) -> int:
    """Start the cluster's agent again on its home; ``shoal down`` stops the new one."""
    agent = spawn_agent(cluster.home, _agent_args(options, cluster.info.url))
    run = json.loads((cluster.home / RUN_FILE).read_text())
    (cluster.home / RUN_FILE).write_text(json.dumps({**run, "agent_pid": agent.pid}))
    return agent.pid


def kill_9(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)  # the agent's own group: its tasks run in sessions of theirs
    deadline = time.monotonic() + 10
    while alive(pid):
        assert time.monotonic() < deadline
        time.sleep(0.02)


def options(home: Path, **changes: Any) -> UpOptions:
    base = UpOptions(home=home, port=0, nodes=1, cpus=4.0, memory_mib=8192, gpus=2)
    return replace(base, **{"kill_grace_s": 2.0, "port_base": port_base(), **changes})


def test_kill_9_of_the_agent_and_a_restart_keep_the_tasks(tmp_path: Path) -> None:
    home, stamps = tmp_path / "home", tmp_path / "stamps"
    cluster = start_cluster(home, nodes=1)
    try:
        kept = cluster.submit(native("kept", role(stamped(stamps, "3"), instances=2)))
        seven = cluster.submit(native("seven", role(stamped(tmp_path / "s7", "3", code=7))))
        cluster.wait_for(lambda: starts(stamps) == 2 and starts(tmp_path / "s7") == 1)
        kill_9(cluster.info.agent_pid)
        time.sleep(1.0)  # the tasks run on with no agent
        restart_local_agent(cluster, options(home))
        job = cluster.wait(kept, timeout_s=60)
        assert job["state"] == "SUCCEEDED", job
        assert [t["exitCode"] for t in job["tasks"]] == [0, 0]
        assert [t["attempt"] for t in job["tasks"]] == [1, 1]
        for index in (0, 1):
            assert cluster.log(kept, "w", index) == "before\nafter\n"
        failed = cluster.wait(seven, timeout_s=60)
        assert (failed["state"], failed["exitClass"], failed["exitCode"]) == (
            "FAILED",
            "USER_FAILURE",
            7,
        )
        assert cluster.log(seven, "w") == "before\nafter\n"
    finally:
        cluster.client.close()
        stop_local(home, grace_s=10)
    runs = assert_never_overlapping(stamps)
    assert {task: len(r) for task, r in runs.items()} == {"w0": 1, "w1": 1}  # none ran twice
    assert all(stop is not None for r in runs.values() for _, stop in r)


def _node_of(cluster: LocalCluster, job_id: str) -> str | None:
    tasks = cluster.client.job(job_id)["tasks"]
    return tasks[0]["node"] if tasks and tasks[0]["state"] == "RUNNING" else None


def _state_of(cluster: LocalCluster, node: str) -> str:
    return str(next(n["state"] for n in cluster.client.nodes() if n["name"] == node))


def test_an_agent_down_past_the_timeout_its_task_runs_elsewhere_never_twice(
    tmp_path: Path,
) -> None:
    home, stamps = tmp_path / "home", tmp_path / "stamps"
    cluster = start_cluster(home, nodes=1, node_timeout_s=TIMEOUT, kill_grace_s=1.0)
    other_args = [
        "agent",
        "--server",
        cluster.info.url,
        "--home",
        str(home / "agent-b"),
        "--token-file",
        str(home / "agent.token"),
        "--node-prefix",
        "other",
        "--cpus",
        "4",
        "--memory",
        "8192",
        "--gpus",
        "2",
        "--port-base",
        str(port_base() + 1000),
    ]
    agents = {"node-0": cluster.info.agent_pid, "other-0": spawn_agent(home, other_args).pid}
    try:
        cluster.wait_for(
            lambda: sorted(n["name"] for n in cluster.client.nodes()) == sorted(agents)
        )
        command = stamped(stamps, '$([ "$SHOAL_JOB_ATTEMPT" = 1 ] && echo 60 || echo 1)')
        job_id = cluster.submit(native("moved", role(command), "retries: 2\n"))
        cluster.wait_for(lambda: _node_of(cluster, job_id) is not None and starts(stamps) == 1)
        first = _node_of(cluster, job_id)
        assert first is not None
        kill_9(agents[first])
        cluster.wait_for(lambda: _state_of(cluster, first) == "NOT_READY", timeout_s=30)
        job = cluster.wait(job_id, timeout_s=60)
        assert job["state"] == "SUCCEEDED", job
        (task,) = job["tasks"]
        assert task["node"] != first
        # the dead agent comes back: its nodes are READY again and it takes new work
        if first == "node-0":
            agents[first] = restart_local_agent(
                cluster, options(home, node_timeout_s=TIMEOUT, kill_grace_s=1.0)
            )
        else:
            agents[first] = spawn_agent(home, other_args).pid
        cluster.wait_for(lambda: _state_of(cluster, first) == "READY", timeout_s=30)
        second = next(name for name in agents if name != first)
        cluster.client.node_action(second, "cordon")
        after = cluster.submit(native("after", role("echo fresh")))
        done = cluster.wait(after, timeout_s=60)
        assert done["state"] == "SUCCEEDED" and done["tasks"][0]["node"] == first
        not_ready_at = max(
            e["at"] for e in cluster.client.node_events(first) if e["kind"] == "heartbeats_missed"
        )
    finally:
        cluster.client.close()
        for name, pid in agents.items():
            if name != "node-0" and alive(pid):
                os.killpg(pid, signal.SIGTERM)
        stop_local(home, grace_s=10)
    runs = assert_never_overlapping(stamps)
    (attempts,) = runs.values()
    assert len(attempts) == 2
    (_, stopped), _ = attempts
    assert stopped is not None and stopped < not_ready_at  # fenced before it was declared lost


def test_a_frozen_server_past_the_lease_stops_the_tasks_before_the_node_timeout(
    tmp_path: Path,
) -> None:
    home, stamps = tmp_path / "home", tmp_path / "stamps"
    cluster = start_cluster(home, nodes=1, node_timeout_s=TIMEOUT, kill_grace_s=1.0)
    try:
        command = stamped(stamps, '$([ "$SHOAL_JOB_ATTEMPT" = 1 ] && echo 60 || echo 1)')
        job_id = cluster.submit(native("frozen", role(command), "retries: 2\n"))
        cluster.wait_for(lambda: starts(stamps) == 1)
        frozen_at = time.time()
        os.killpg(cluster.info.server_pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + TIMEOUT + 5
            while "stop " not in stamps.read_text():
                assert time.monotonic() < deadline, "the task was not stopped"
                time.sleep(0.05)
        finally:
            os.killpg(cluster.info.server_pid, signal.SIGCONT)
        ((_, stop),) = intervals(stamps)["w0"]
        assert stop is not None and stop - frozen_at < TIMEOUT
        job = cluster.wait(job_id, timeout_s=60)
        assert job["state"] == "SUCCEEDED", job
        messages = [e["message"] for e in cluster.client.events(job_id) if e["kind"] == "exited"]
        assert any("fencing" in m or "lost" in m for m in messages), messages
    finally:
        cluster.client.close()
        stop_local(home, grace_s=10)
    runs = assert_never_overlapping(stamps)
    assert len(runs["w0"]) == 2
