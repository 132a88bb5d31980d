"""The simulator on real traces: every job completes, nothing is ever over-allocated (checked
after every cycle), the metrics agree with the per-job records, and the policies differ the
way their rules say they must."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.sim.cluster import load_cluster
from shoal.sim.engine import SimConfig, Simulator
from shoal.sim.loading import load_trace
from shoal.sim.metrics import gpu_seconds_used, summarize
from shoal.sim.policies import make_policy
from shoal.sim.records import JobRecord, SimResult
from tests.sim.conftest import EXAMPLES

CHECKED = SimConfig(check_invariants=True)


def replay(
    trace: Path,
    cluster_file: str,
    policy: str,
    limit: int | None = None,
    config: SimConfig = CHECKED,
) -> SimResult:
    cluster = load_cluster(EXAMPLES / cluster_file)
    jobs = load_trace(trace, cluster, limit=limit)
    return Simulator(cluster, jobs, make_policy(policy), config).run()


@pytest.fixture(scope="module")
def tiresias(shared_dir: Path) -> dict[str, SimResult]:
    path = shared_dir / "traces" / "tiresias_60_job.csv"
    return {p: replay(path, "tiresias-4x4.yaml", p) for p in ("fifo", "shoal", "las", "aging")}


@pytest.fixture(scope="module")
def philly(shared_dir: Path) -> dict[str, SimResult]:
    path = shared_dir / "traces" / "philly_pollux_jobs.csv"
    return {p: replay(path, "philly-44.yaml", p, limit=2_000) for p in ("fifo", "shoal")}


def assert_consistent(result: SimResult) -> None:
    records = result.records
    summary = summarize(result)
    assert summary["completed"] == len(records), [
        r.never_reason for r in records if not r.completed
    ][:3]
    assert all(r.first_start_s is not None and r.first_start_s >= r.submit_s for r in records)
    assert all(
        r.end_s is not None and r.end_s >= r.first_start_s + r.duration_s - 1e-6 for r in records
    )
    jcts = [r.jct_s for r in records]
    assert summary["avg_jct_s"] == pytest.approx(sum(jcts) / len(jcts))
    delays = [r.queue_delay_s for r in records]
    assert summary["avg_queue_delay_s"] == pytest.approx(sum(delays) / len(delays))
    assert summary["preemptions"] == sum(r.preemptions for r in records)
    assert summary["makespan_s"] == pytest.approx(
        max(jcts[i] + records[i].submit_s for i in range(len(records)))
        - min(r.submit_s for r in records)
    )
    # GPU-time on the timeline = each job's run time, plus work redone after preemption, plus
    # the time preempted jobs held their GPUs while stopping.
    expected = sum(
        r.gpus * (r.duration_s + r.lost_s + r.preemptions * result.config.stop_s) for r in records
    )
    assert gpu_seconds_used(result.timeline) == pytest.approx(expected, rel=1e-9)
    assert 0 < summary["gpu_utilization"] <= 1


@pytest.mark.parametrize("policy", ["fifo", "shoal", "las", "aging"])
def test_tiresias_every_job_completes_consistently(tiresias, policy: str) -> None:
    assert_consistent(tiresias[policy])


@pytest.mark.parametrize("policy", ["fifo", "shoal"])
def test_philly_slice_every_job_completes_consistently(philly, policy: str) -> None:
    assert_consistent(philly[policy])


def starts_in_submission_order(records: list[JobRecord]) -> bool:
    by_vc: dict[str, list[JobRecord]] = {}
    for record in records:
        by_vc.setdefault(record.virtual_cluster, []).append(record)
    for jobs in by_vc.values():
        jobs.sort(key=lambda r: (r.submit_s, r.job_id))
        starts = [r.first_start_s for r in jobs]
        if starts != sorted(starts):
            return False
    return True


def peak_vc_usage(records: list[JobRecord]) -> dict[str, int]:
    """The most GPUs each VC held at once (jobs never preempted: one run each)."""
    events: list[tuple[float, int, str, int]] = []
    for r in records:
        if r.preemptions == 0 and r.first_start_s is not None and r.end_s is not None:
            events += [
                (r.first_start_s, 1, r.virtual_cluster, r.gpus),
                (r.end_s, 0, r.virtual_cluster, -r.gpus),
            ]
    usage: dict[str, int] = {}
    peak: dict[str, int] = {}
    for _, _, vc, delta in sorted(events):
        usage[vc] = usage.get(vc, 0) + delta
        peak[vc] = max(peak.get(vc, 0), usage[vc])
    return peak


def test_fifo_is_strict_per_vc_and_shoal_backfills(tiresias, philly) -> None:
    """fifo starts each VC's jobs in submission order; shoal lets later jobs that fit start
    around a blocked head (backfill), which is where its shorter queueing delay comes from."""
    for results in (tiresias, philly):
        assert starts_in_submission_order(results["fifo"].records)
        assert not starts_in_submission_order(results["shoal"].records)
    fifo, shoal = summarize(tiresias["fifo"]), summarize(tiresias["shoal"])
    assert shoal["avg_queue_delay_s"] < fifo["avg_queue_delay_s"]


def test_fifo_stays_in_guarantees_and_shoal_borrows(philly) -> None:
    """fifo never lets a VC exceed its guarantee, and never preempts; shoal lends idle GPUs to
    busy VCs, so some VC exceeds its guarantee, and the queueing delay drops."""
    cluster = load_cluster(EXAMPLES / "philly-44.yaml")
    guarantee = {q.name: q.gpus for q in cluster.quotas}
    fifo_peak = peak_vc_usage(philly["fifo"].records)
    assert all(fifo_peak[vc] <= guarantee[vc] for vc in fifo_peak)
    assert summarize(philly["fifo"])["preemptions"] == 0
    shoal_peak = peak_vc_usage(philly["shoal"].records)
    assert any(shoal_peak[vc] > guarantee[vc] for vc in shoal_peak)
    fifo, shoal = summarize(philly["fifo"]), summarize(philly["shoal"])
    assert shoal["avg_queue_delay_s"] < fifo["avg_queue_delay_s"]
    assert shoal["idle_gpus_while_waiting"] < fifo["idle_gpus_while_waiting"]


def test_las_lets_short_jobs_overtake_by_preempting(write) -> None:
    cluster = write("c.yaml", "node_groups: [{count: 1, gpus: 4}]\n")
    jobs = write(
        "j.yaml",
        "jobs:\n  - {id: long, submit: 0, duration: 10000, gpus: 4}\n"
        "  - {id: short, submit: 10, duration: 100, gpus: 4}\n",
    )
    loaded = load_cluster(cluster)
    trace = load_trace(jobs, loaded)
    config = SimConfig(checkpoint_s=600, stop_s=30, check_invariants=True)
    fifo = {
        r.job_id: r for r in Simulator(loaded, trace, make_policy("fifo"), config).run().records
    }
    las = {r.job_id: r for r in Simulator(loaded, trace, make_policy("las"), config).run().records}
    assert fifo["short"].first_start_s == 10_000  # waits for the long job
    # LAS: after 900 s the long job has had 3,600 GPU-seconds, drops a level, and is preempted
    assert las["long"].preemptions == 1
    assert las["short"].first_start_s == 900 + 30  # once the long job has stopped
    # the long job keeps its work up to the last checkpoint (600 s) and redoes 300 s
    assert las["long"].lost_s == 300
    assert las["long"].end_s == 1030 + (10_000 - 600)


def test_periodic_scheduling_starts_jobs_on_the_tick(shared_dir: Path) -> None:
    path = shared_dir / "traces" / "tiresias_60_job.csv"
    result = replay(
        path, "tiresias-4x4.yaml", "shoal", config=SimConfig(interval_s=60, check_invariants=True)
    )
    assert_consistent(result)
    assert all(r.first_start_s is not None and r.first_start_s % 60 == 0 for r in result.records)
