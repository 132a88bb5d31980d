"""Nothing of a task outlives its keeper (real processes): a grandchild that left the task's
process group (``setsid``) and a child that ignores SIGTERM are ended once the task's first
process has ended, on its own or fenced by a lapsed lease, with no agent to clean up; fenced, the
keeper also does the agent's part: the runtime's cleanup command and the task's cgroup."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from shoal.agent.journal import boot_clock
from shoal.agent.limits import TaskLimiter
from shoal.agent.processes import keeper_argv
from shoal.local.supervisor import alive
from shoal.protocol import TaskLimits
from tests.agent.limits_helpers import cgroups_refused

# a daemon that left the group, a child that ignores SIGTERM; their pids in PIDS
LEAVES = "setsid sleep 300 & echo $! >> {pids}; (trap '' TERM; exec sleep 200) & echo $! >> {pids}"


def run_keeper(
    tmp_path: Path, command: str, lease: float | None
) -> tuple[dict[str, object], list[int]]:
    lease_file = tmp_path / "lease"
    if lease is not None:
        lease_file.write_text(f"{boot_clock() + lease:.3f}\n")
    pids = tmp_path / "pids"
    argv = keeper_argv(tmp_path, lease_file, 0.5, ["/bin/sh", "-c", command.format(pids=pids)])
    with open(tmp_path / "output", "wb") as output:  # not a pipe: leftovers would hold it open
        subprocess.run(
            argv, timeout=60, check=False, stdout=output, stderr=output, start_new_session=True
        )
    assert (tmp_path / "output").read_bytes() == b""
    left = [int(p) for p in pids.read_text().split()]
    return json.loads((tmp_path / "exit.json").read_text()), left


def test_what_a_finished_task_left_running_is_ended_with_it(tmp_path: Path) -> None:
    record, left = run_keeper(tmp_path, LEAVES + "; sleep 0.2; exit 4", lease=None)
    assert (record["exit_code"], record["fenced"]) == (4, False)
    assert len(left) == 2
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in left):  # zombies until init reaps them count as dead
        assert time.monotonic() < deadline, f"left running: {[p for p in left if alive(p)]}"
        time.sleep(0.02)


def test_a_fenced_task_leaves_nothing_even_outside_its_process_group(tmp_path: Path) -> None:
    record, left = run_keeper(tmp_path, LEAVES + "; sleep 60", lease=0.5)
    assert record["fenced"] is True
    assert record["signal"] == 15  # the shell ended on SIGTERM; what ignored it was killed
    assert len(left) == 2
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in left):
        assert time.monotonic() < deadline, f"left running: {[p for p in left if alive(p)]}"
        time.sleep(0.02)


CLEANUP = "echo cleaned >> {marker}"


def with_cleanup(tmp_path: Path) -> Path:
    """The runtime's cleanup command (a container's removal), here one that leaves a mark."""
    marker = tmp_path / "cleaned"
    argv = ["/bin/sh", "-c", CLEANUP.format(marker=marker)]
    (tmp_path / "cleanup.json").write_text(json.dumps(argv))
    return marker


def test_a_fenced_keeper_runs_the_runtimes_cleanup_as_no_agent_will(tmp_path: Path) -> None:
    marker = with_cleanup(tmp_path)
    record, _ = run_keeper(tmp_path, LEAVES + "; sleep 60", lease=0.5)
    assert record["fenced"] is True
    assert marker.read_text() == "cleaned\n"


def test_an_unfenced_keeper_leaves_the_cleanup_to_its_agent(tmp_path: Path) -> None:
    marker = with_cleanup(tmp_path)
    record, _ = run_keeper(tmp_path, LEAVES + "; exit 0", lease=None)
    assert record["fenced"] is False
    assert not marker.exists()  # the agent reads the cgroup's figures first, then cleans up


@pytest.mark.skipif(cgroups_refused() is not None, reason=str(cgroups_refused()))
def test_a_fenced_keeper_removes_the_tasks_cgroup(tmp_path: Path) -> None:
    """An agent killed and never started again left the task's cgroup behind (issue 25)."""
    limiter = TaskLimiter(tmp_path / "agent")
    cgroup = limiter.create("3.1", TaskLimits(cpu_millis=500, memory_mib=64, pids=64), tmp_path)
    assert cgroup is not None and cgroup.exists()
    lease_file = tmp_path / "lease"
    lease_file.write_text(f"{boot_clock() + 0.5:.3f}\n")
    argv = keeper_argv(tmp_path, lease_file, 0.5, ["/bin/sh", "-c", "sleep 60"], cgroup.procs_files)
    subprocess.run(argv, timeout=60, check=False, capture_output=True, start_new_session=True)
    assert json.loads((tmp_path / "exit.json").read_text())["fenced"] is True
    assert not cgroup.exists()
    assert not any(d.parent.exists() for d in cgroup.dirs.values())  # the agent's, now empty
