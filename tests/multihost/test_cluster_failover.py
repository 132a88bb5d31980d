"""Nodes that die or drop off the network, across namespace hosts: the node goes NOT_READY within
the configured timeout, its task runs again on another host, the node comes back, and no two
attempts of one task ever run at the same time.

Proof of the last point: every attempt appends stamps to a file of its own host's directory
(``start``, then ``alive`` every 0.1 s, then ``stop``, or ``term`` on SIGTERM). The filesystem is
shared by the namespace hosts, so an attempt cut off from the network still writes its stamps;
had an earlier attempt been alive when a later one started, it would have stamped after that
start. The test asserts that each attempt's first stamp comes more than 0.5 s after every earlier
attempt's last stamp."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.multihost.conftest import MakeRack
from tests.multihost.netns import namespaces_usable
from tests.multihost.rack import Rack

pytestmark = pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)
NODE_TIMEOUT_S = 8.0
STAMPED_JOB = """\
version: 1
name: fenced
retries: 3
roles:
  worker:
    instances: 1
    resources: {cpu: 1, memory: 64Mi}
    command: >-
      d=$STAMPS/$SHOAL_NODE_NAME; mkdir -p $d; f=$d/$SHOAL_JOB_ATTEMPT.$SHOAL_TASK_ATTEMPT;
      trap 'echo "term $(date +%s.%N)" >> $f; exit 143' TERM;
      echo "start $(date +%s.%N)" >> $f;
      for i in $(seq 1 SECONDS0); do echo "alive $(date +%s.%N)" >> $f; sleep 0.1; done;
      echo "stop $(date +%s.%N)" >> $f
"""


@dataclass(frozen=True)
class Interval:
    name: str  # node/jobattempt.taskattempt
    first: float
    last: float
    ended: str  # stop | term | (none: killed)


def intervals(stamps: Path) -> list[Interval]:
    found = []
    for path in sorted(stamps.glob("*/*")):
        # A stop signal that reaches `date` inside "$(date ...)" leaves a stamp without a time
        # ("alive"): bash goes on to echo it before its trap runs. Such a line says nothing.
        lines = [line.split() for line in path.read_text().splitlines() if len(line.split()) == 2]
        times = [float(t) for _, t in lines]
        found.append(
            Interval(
                f"{path.parent.name}/{path.name}",
                min(times),
                max(times),
                lines[-1][0] if lines[-1][0] in ("stop", "term") else "",
            )
        )
    return sorted(found, key=lambda i: i.first)


def assert_never_two_at_once(stamps: Path) -> list[Interval]:
    found = intervals(stamps)
    for earlier, later in itertools.pairwise(found):
        gap = later.first - max(i.last for i in found if i.first <= earlier.first)
        assert gap > 0.5, (
            f"{later.name} started {gap:.2f}s after {earlier.name}'s last stamp: {found}"
        )
    return found


@pytest.fixture
def rack(make_rack: MakeRack) -> Rack:
    return make_rack(nodes=3, node_timeout_s=NODE_TIMEOUT_S, kill_grace_s=1.0)


def _submit(rack: Rack, tmp_path: Path, seconds: int) -> tuple[str, Path]:
    stamps = tmp_path / "stamps"
    spec = tmp_path / "fenced.yaml"
    spec.write_text(STAMPED_JOB.replace("SECONDS0", str(seconds * 10)))
    done = rack.shoal("job", "submit", str(spec), "-o", "json", "--env", f"STAMPS={stamps}")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"]), stamps


def _running_on(rack: Rack, job_id: str) -> str | None:
    job = rack.admin.job(job_id)
    task = job["tasks"][0]
    return str(task["node"]) if task["state"] == "RUNNING" else None


def _moved(rack: Rack, job_id: str, away_from: str) -> bool:
    node = _running_on(rack, job_id)
    return node is not None and node != away_from


def test_kill_9_of_an_agent_moves_its_task_and_never_runs_two_attempts(
    rack: Rack, tmp_path: Path
) -> None:
    job_id, stamps = _submit(rack, tmp_path, seconds=25)
    rack.wait_for(lambda: _running_on(rack, job_id) is not None, 30, "the task running")
    first = _running_on(rack, job_id)
    assert first is not None
    rack.kill(rack.agents[first])  # its task is left without an agent
    lost_after = rack.wait_state(first, "NOT_READY", NODE_TIMEOUT_S + 10)
    assert lost_after <= NODE_TIMEOUT_S + 3, lost_after
    rack.wait_for(lambda: _moved(rack, job_id, first), 30, "the task running elsewhere")
    rack.start_agent(first)  # the stale attempt, if still there, dies before any new work
    rack.wait_state(first, "READY", 30)
    job = rack.admin.wait(job_id, timeout_s=90, poll_s=0.2)
    assert job["state"] == "SUCCEEDED", f"{job}\n{rack.tail_logs()}"
    found = assert_never_two_at_once(stamps)
    assert found[0].name.startswith(f"{first}/") and found[0].ended != "stop", found
    assert found[-1].ended == "stop" and not found[-1].name.startswith(f"{first}/"), found


def test_a_cut_link_moves_the_task_and_healing_brings_the_node_back(
    rack: Rack, tmp_path: Path
) -> None:
    job_id, stamps = _submit(rack, tmp_path, seconds=25)
    rack.wait_for(lambda: _running_on(rack, job_id) is not None, 30, "the task running")
    first = _running_on(rack, job_id)
    assert first is not None
    rack.lab.cut(rack.node_host(first))
    lost_after = rack.wait_state(first, "NOT_READY", NODE_TIMEOUT_S + 10)
    assert lost_after <= NODE_TIMEOUT_S + 3, lost_after
    rack.wait_for(lambda: _moved(rack, job_id, first), 30, "the task running elsewhere")
    rack.lab.heal(rack.node_host(first))
    rack.wait_state(first, "READY", 30)
    assert rack.agents[first].poll() is None  # the same agent, back on the network
    job = rack.admin.wait(job_id, timeout_s=90, poll_s=0.2)
    assert job["state"] == "SUCCEEDED", f"{job}\n{rack.tail_logs()}"
    found = assert_never_two_at_once(stamps)
    assert found[0].name.startswith(f"{first}/") and found[0].ended != "stop", found
    assert found[-1].ended == "stop", found
