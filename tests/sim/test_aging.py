"""Aging in the simulator: per-VC settings in the cluster file (the server's VC setting) under the
`shoal` policy, `las` everywhere, the repricing of only the jobs whose service crossed a threshold
checked against a rescan after every cycle, and what it changes in a replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.core.aging import Aging
from shoal.core.resources import ResourceVector
from shoal.core.snapshot import ClusterSnapshot, JobRequest, RoleRequest
from shoal.sim.cluster import ClusterError, load_cluster
from shoal.sim.engine import SimConfig, Simulator
from shoal.sim.invariants import InvariantViolation, check_priorities
from shoal.sim.loading import load_trace
from shoal.sim.metrics import summarize
from shoal.sim.policies import make_policy
from shoal.sim.records import JobRecord
from tests.sim.test_engine import CHECKED, assert_consistent, replay

TWO_TEAMS = """
node_groups: [{count: 2, gpus: 4}]
virtual_clusters:
  - {name: aging, gpus: 4, aging: {policy: las, thresholds_gpu_hours: [1]}}
  - {name: plain, gpus: 4}
"""
# In each VC: a long job that fills the VC's guarantee, then a short one.
JOBS = """
jobs:
  - {id: a-long, submit: 0, duration: 10000, gpus: 4, virtual_cluster: aging}
  - {id: a-short, submit: 10, duration: 100, gpus: 4, virtual_cluster: aging}
  - {id: p-long, submit: 0, duration: 10000, gpus: 4, virtual_cluster: plain}
  - {id: p-short, submit: 10, duration: 100, gpus: 4, virtual_cluster: plain}
"""


def run(write, policy: str) -> dict[str, JobRecord]:
    cluster = load_cluster(write("c.yaml", TWO_TEAMS))
    trace = load_trace(write("j.yaml", JOBS), cluster)
    config = SimConfig(checkpoint_s=600, stop_s=30, check_invariants=True)
    result = Simulator(cluster, trace, make_policy(policy), config).run()
    return {r.job_id: r for r in result.records}


def test_only_the_vc_that_switched_aging_on_preempts_its_long_job(write) -> None:
    records = run(write, "shoal")
    # aging: after 900 s the long job has had 1 GPU-hour and drops below the short one
    assert records["a-long"].preemptions == 1 and records["a-short"].first_start_s == 930
    # plain: priority then submission; the short job waits (the other VC's GPUs are busy)
    assert records["p-long"].preemptions == 0 and records["p-short"].first_start_s == 10_000
    # las switches it on everywhere; fifo ignores it
    everywhere = run(write, "las")
    assert everywhere["p-long"].preemptions == 1 and everywhere["p-short"].first_start_s == 930
    fifo = run(write, "fifo")
    assert all(r.preemptions == 0 for r in fifo.values())
    # aging: the recommended setting where the file gives none (plain: 1 GPU-hour at 900 s)
    recommended = run(write, "aging")
    assert recommended["p-long"].preemptions == 1 and recommended["p-short"].first_start_s == 930
    assert recommended["a-long"].preemptions == 1


def test_max_preemptions_stops_aging_a_job_preempted_that_often(write) -> None:
    """Without a limit the long job is preempted for each newer job; with max_preemptions 1 it
    keeps its own priority after the first, and the second short job waits for it."""
    cluster = load_cluster(write("c.yaml", "node_groups: [{count: 1, gpus: 4}]\n"))
    trace = load_trace(
        write(
            "j.yaml",
            "jobs:\n  - {id: long, submit: 0, duration: 10000, gpus: 4}\n"
            "  - {id: one, submit: 10, duration: 100, gpus: 4}\n"
            "  - {id: two, submit: 2000, duration: 100, gpus: 4}\n",
        ),
        cluster,
    )
    config = SimConfig(checkpoint_s=600, stop_s=30, check_invariants=True)

    def records(most: int | None) -> dict[str, JobRecord]:
        policy = make_policy("las", las_max_preemptions=most)
        return {r.job_id: r for r in Simulator(cluster, trace, policy, config).run().records}

    unlimited, capped = records(None), records(1)
    assert unlimited["long"].preemptions == 2 and unlimited["two"].first_start_s == 2030
    assert capped["long"].preemptions == 1 and capped["one"].first_start_s == 930
    assert capped["two"].first_start_s == capped["long"].end_s


def test_a_bad_aging_setting_in_a_cluster_file_names_the_vc_and_field(write) -> None:
    path = write("c.yaml", TWO_TEAMS.replace("[1]", "[10, 1]"))
    with pytest.raises(ClusterError, match=r"virtual cluster aging: aging.thresholds_gpu_hours"):
        load_cluster(path)


def test_a_priority_the_rescan_disagrees_with_is_reported() -> None:
    job = JobRequest("j", (RoleRequest("w", 1, ResourceVector(0, 0, 1)),), priority=10)
    snapshot = ClusterSnapshot((), (job,))
    check_priorities(snapshot, {"j": 10}, 0.0)
    with pytest.raises(InvariantViolation, match="job j has priority 10, its service gives 9"):
        check_priorities(snapshot, {"j": 9}, 0.0)


def test_las_on_a_contended_philly_slice_repricing_agrees_with_a_rescan(traces: Path) -> None:
    """2,000 Philly jobs on the 1/8-size layout: every cycle checks every priority against a
    rescan (CHECKED), the records are consistent, and LAS starts jobs sooner than shoal by
    preempting the ones with the most service."""
    path = traces / "philly_pollux_jobs.csv"
    las = replay(path, "philly-44.yaml", "las", limit=2_000, config=CHECKED)
    assert_consistent(las)
    shoal = summarize(replay(path, "philly-44.yaml", "shoal", limit=2_000))
    summary = summarize(las)
    assert summary["preemptions"] > shoal["preemptions"]
    assert summary["avg_queue_delay_s"] < shoal["avg_queue_delay_s"]


def test_las_thresholds_are_checked_like_the_server_setting() -> None:
    with pytest.raises(ValueError, match=r"--las-thresholds \(GPU-seconds\).*larger"):
        make_policy("las", (36_000.0, 3_600.0))
    with pytest.raises(ValueError, match=r"--las-max-preemptions: 0: give a whole number >= 1"):
        make_policy("las", las_max_preemptions=0)
    assert make_policy("las").las == Aging.from_hours((1, 10))
