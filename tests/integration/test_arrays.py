"""A job array on a real local cluster (server and agent processes): 200 elements under a cap of
5 on a node with room for 16, the cap respected as the tasks themselves saw it, every element told
its index, and the whole array stopped as one: held elements cancelled, running ones killed, no
process left behind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.local.supervisor import alive, stop_local
from tests.integration.conftest import LocalCluster, start_cluster

CAP = 5
QUICK = 40  # elements below this index end at once; the others run until stopped
JOB = """version: 1
name: sweep
roles:
  w:
    resources: {{cpu: 1, memory: 64}}
    command: |
      echo "start $SHOAL_ARRAY_INDEX $SLURM_ARRAY_TASK_ID $$ $(date +%s.%N)" >> {log}
      if [ "$SHOAL_ARRAY_INDEX" -lt {quick} ]; then
        sleep 0.05
        echo "end $SHOAL_ARRAY_INDEX $(date +%s.%N)" >> {log}
      else
        exec sleep 600
      fi
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    home = tmp_path / "shoal-home"
    running = start_cluster(home, nodes=1, cpus=16.0, gpus=0)  # room for 16 elements at once
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


def _intervals(log: Path, stopped_at: float) -> tuple[dict[int, tuple[float, float]], list[int]]:
    """Each element's [start, end] as its task wrote them (end: the stop for those killed), and
    the pids of its shell."""
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    pids: list[int] = []
    for line in log.read_text().splitlines():
        fields = line.split()
        if fields[0] == "start":
            index = int(fields[1])
            assert index not in starts, f"element {index} started twice"
            assert fields[2] == fields[1]  # $SLURM_ARRAY_TASK_ID is the index too
            starts[index] = float(fields[4])
            pids.append(int(fields[3]))
        else:
            ends[int(fields[1])] = float(fields[2])
    return {i: (s, ends.get(i, stopped_at)) for i, s in starts.items()}, pids


def _most_at_once(intervals: dict[int, tuple[float, float]]) -> int:
    edges = sorted(
        [(s, 1) for s, _ in intervals.values()] + [(e, -1) for _, e in intervals.values()]
    )
    most = now = 0
    for _, step in edges:  # an end at the same instant as a start is counted first
        now += step
        most = max(most, now)
    return most


def _under_way(detail: dict[str, Any]) -> int:
    counts = detail["array"]["counts"]
    return int(counts.get("RUNNING", 0)) + int(counts.get("STOPPING", 0))


def test_an_array_of_200_respects_its_cap_and_stops_as_one(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    log = tmp_path / "elements.log"
    api = cluster.client
    (job,) = api.submit(JOB.format(log=log, quick=QUICK), array=f"0-199%{CAP}")
    parent = job["id"]
    assert job["array"]["size"] == 200 and job["array"]["held"] == 200 - CAP
    deadline = time.monotonic() + 120
    while True:  # until the quick ones are done and CAP slow ones run
        detail = api.job(parent)
        assert _under_way(detail) <= CAP, detail["array"]
        counts = detail["array"]["counts"]
        if counts.get("SUCCEEDED", 0) == QUICK and counts.get("RUNNING", 0) == CAP:
            break
        assert time.monotonic() < deadline, detail["array"]
        time.sleep(0.05)
    listed = [j for j in api.jobs() if j["name"] == "sweep"]
    assert [j["id"] for j in listed] == [parent]  # listed once
    cluster.wait_for(lambda: len(log.read_text().splitlines()) == 2 * QUICK + CAP)

    stopped = api.stop(parent)
    stopped_at = time.time()
    assert stopped["array"]["counts"].get("STOPPED", 0) == 200 - QUICK - CAP  # cancelled at once
    final = cluster.wait(parent, timeout_s=60)
    assert final["state"] == "STOPPED"
    assert final["array"]["counts"] == {"SUCCEEDED": QUICK, "STOPPED": 200 - QUICK}
    states = {e["index"]: e["state"] for e in final["elements"]}
    assert all(states[i] == "SUCCEEDED" for i in range(QUICK))
    assert all(states[i] == "STOPPED" for i in range(QUICK, 200))

    intervals, pids = _intervals(log, stopped_at)
    assert sorted(intervals) == list(range(QUICK + CAP))  # in index order, each once
    assert _most_at_once(intervals) <= CAP  # the node had room for 16
    cluster.wait_for(lambda: not any(alive(pid) for pid in pids), timeout_s=15)
    time.sleep(0.5)
    assert len(log.read_text().splitlines()) == 2 * QUICK + CAP  # nothing started after the stop
