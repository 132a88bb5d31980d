"""The end-of-run check of tests/conftest.py (tests/leftovers.py) finds a run's own leftovers and
nothing of another run's: cgroups and containers by the instance names of the agent homes under
the run's temporary directory, labs by the pids of its pytest processes, processes by its token
or its temporary directory. On fake cgroup trees and ``podman ps`` output, and real processes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from shoal.agent.limits import instance_name
from tests import leftovers


def test_agent_homes_are_found_by_their_journal_or_lease(tmp_path: Path) -> None:
    (tmp_path / "w0" / "test_a0" / "home" / "agent" / "attempts").mkdir(parents=True)
    (tmp_path / "w1" / "b" / "node-0").mkdir(parents=True)
    (tmp_path / "w1" / "b" / "node-0" / "lease").write_text("1.0\n")
    (tmp_path / "w1" / "c" / "server").mkdir(parents=True)
    assert leftovers.agent_homes(tmp_path) == {
        tmp_path / "w0" / "test_a0" / "home" / "agent",
        tmp_path / "w1" / "b" / "node-0",
    }
    assert leftovers.instances_under(tmp_path) == {
        instance_name(tmp_path / "w0" / "test_a0" / "home" / "agent"),
        instance_name(tmp_path / "w1" / "b" / "node-0"),
    }


def test_task_cgroups_of_the_runs_agents_only(tmp_path: Path) -> None:
    ours, theirs = "shoal-0123456789", "shoal-abcdefabcd"
    memory = tmp_path / "memory" / "process_api" / "f00d"  # v1: below the agent's own cgroup
    for base in (tmp_path / "cpu", memory):
        (base / ours / "7.1").mkdir(parents=True)
        (base / theirs / "9.1").mkdir(parents=True)
    (tmp_path / "pids" / ours).mkdir(parents=True)  # tidied to nothing: no task cgroup left
    roots = [tmp_path / "cpu", tmp_path / "memory", tmp_path / "pids"]
    assert leftovers.task_cgroups({ours}, roots) == sorted(
        [str(tmp_path / "cpu" / ours / "7.1"), str(memory / ours / "7.1")]
    )
    assert leftovers.task_cgroups(set(), roots) == []


def test_cgroups_recorded_beside_attempts_are_found_too(tmp_path: Path) -> None:
    left, gone = tmp_path / "cg" / "shoal-x" / "1.1", tmp_path / "cg" / "shoal-x" / "2.1"
    left.mkdir(parents=True)
    for attempt, cgroup in (("1.1", left), ("2.1", gone)):
        record = tmp_path / "temp" / "agent" / attempt / "cgroup.json"
        record.parent.mkdir(parents=True)
        record.write_text(json.dumps({"version": 1, "dirs": {"memory": str(cgroup)}}))
    assert leftovers.recorded_cgroups(tmp_path / "temp", [tmp_path / "cg"]) == [str(left)]
    assert leftovers.recorded_cgroups(tmp_path / "temp", [tmp_path / "elsewhere"]) == []


def test_containers_of_the_runs_agents_by_label_or_name() -> None:
    listed: list[dict[str, object]] = [
        {"Names": ["shoal-0123456789-1.1"], "State": "created", "Labels": None},
        {"Names": ["x"], "State": "running", "Labels": {"shoal.agent": "shoal-0123456789"}},
        {"Names": ["shoal-abcdefabcd-1.1"], "State": "created", "Labels": {}},
        {"Names": ["busy_cori"], "State": "exited", "Labels": None},
    ]
    assert leftovers.ours(listed, {"shoal-0123456789"}) == [
        "shoal-0123456789-1.1 (created)",
        "x (running)",
    ]


def test_lab_names_come_from_the_pytest_pids() -> None:
    assert leftovers.lab_tags([123456, 7]) == {"sl23456", "shp23456", "sl7", "shp7"}


def test_processes_of_the_run_by_token_or_temporary_directory(tmp_path: Path) -> None:
    token = "t" + os.urandom(8).hex()
    marked = {**os.environ, leftovers.RUN_ENV: token}
    other = {**os.environ, leftovers.RUN_ENV: "another-run"}
    started = [
        subprocess.Popen(["sleep", "30"], env=marked),
        subprocess.Popen(["sleep", "31"], env=other, cwd=tmp_path),
        subprocess.Popen(["sleep", "32"], env=other),
    ]
    try:
        time.sleep(0.1)
        found = leftovers.processes(token, tmp_path, leftovers.ancestors())
        pids = {int(line.split()[1].rstrip(":")) for line in found}
        assert pids == {started[0].pid, started[1].pid}
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
    assert leftovers.processes(token, tmp_path, leftovers.ancestors()) == []


def test_nothing_found_is_false_and_findings_are_listed() -> None:
    assert not leftovers.Leftovers()
    found = leftovers.Leftovers(cgroups=["/sys/fs/cgroup/cpu/shoal-x/1.1"], processes=["pid 9: a"])
    assert found and found.lines() == [
        "1 task cgroups:",
        "  /sys/fs/cgroup/cpu/shoal-x/1.1",
        "1 processes:",
        "  pid 9: a",
    ]
