"""``shoal sim`` with scaling pools: the machines ``core.autoscale.plan_scaling`` launches boot
after the pool's delay, idle ones are drained and terminated after the idle timeout, node-hours
and cost are billed from launch to termination, and the fixed-size cluster is replayed beside
it. Every replay here checks the engine's invariants after every cycle (``--check``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.sim.cluster import ClusterError, SimCluster, load_cluster
from shoal.sim.engine import SimConfig, Simulator
from shoal.sim.loading import load_trace
from shoal.sim.metrics import summarize
from shoal.sim.policies import make_policy
from shoal.sim.records import SimResult
from shoal.sim.runner import SimRequest, cluster_forms, run_simulations
from tests.sim.conftest import EXAMPLES
from tests.sim.test_engine import assert_consistent

CHECKED = SimConfig(check_invariants=True, autoscale_interval_s=10.0)
POOL = """
name: cloud
pools:
  - {name: gpu, gpus: 8, cpus: 32, memory: 256Gi, price_per_hour: 36, min: %(min)d, max: 3,
     boot_delay: 60, idle_timeout: 5m, join_timeout: 10m}
virtual_clusters:
  - {name: a, nodes: 2}
  - {name: b, nodes: 1}
"""


def pool_cluster(write, minimum: int = 0) -> SimCluster:
    return load_cluster(write("cloud.yaml", POOL % {"min": minimum}))


def replay(
    cluster: SimCluster, write, jobs: str, policy: str = "shoal", variant: str = ""
) -> SimResult:
    trace = load_trace(write("jobs.yaml", jobs), cluster)
    result = Simulator(cluster, trace, make_policy(policy), CHECKED).run()
    result.variant = variant
    return result


GANG = "jobs:\n  - {id: gang, submit: 0, duration: 100, virtual_cluster: a, gpus: 16}\n"


def test_a_two_node_gang_grows_an_empty_pool_by_two_which_leave_after_the_idle_timeout(
    write,
) -> None:
    result = replay(pool_cluster(write), write, GANG)
    (record,) = result.records
    # launched at 0, joined after the 60 s boot, ran 100 s; idle from 160, drained at the
    # pass 5 min later (460), terminated at the next pass (470)
    assert (record.first_start_s, record.end_s) == (60.0, 160.0)
    (usage,) = result.pools
    assert (usage.launches, usage.terminations, usage.peak_nodes) == (2, 2, 2)
    assert usage.node_seconds == pytest.approx(2 * 470.0)
    assert usage.cost == pytest.approx(2 * 470.0 / 3600 * 36)
    summary = summarize(result)
    assert summary["node_hours"] == pytest.approx(2 * 470 / 3600)
    assert summary["avg_queue_delay_s"] == 60.0
    # 16 GPUs busy for 100 s of the 940 paid machine-seconds of 8 GPUs
    assert summary["paid_gpu_utilization"] == pytest.approx(1600 / (940 * 8))


def test_the_fixed_form_has_every_machine_always_on(write) -> None:
    cluster = pool_cluster(write)
    result = replay(cluster.fixed(), write, GANG)
    (record,) = result.records
    assert (record.first_start_s, record.end_s) == (0.0, 100.0)
    (usage,) = result.pools
    assert (usage.node_seconds, usage.peak_nodes) == (3 * 100.0, 3)  # the makespan, 3 machines
    assert summarize(result)["cost"] == pytest.approx(300 / 3600 * 36)


def test_a_second_job_uses_the_machines_already_launching(write) -> None:
    jobs = GANG + "  - {id: late, submit: 30, duration: 50, virtual_cluster: b, gpus: 8}\n"
    result = replay(pool_cluster(write), write, jobs)
    by_id = {r.job_id: r for r in result.records}
    (usage,) = result.pools
    assert usage.launches == 3  # 2 for the gang at 0, 1 more at 30 (the gang holds the two)
    assert by_id["late"].first_start_s == 90.0  # launched at the pass at 30, booted at 90


def test_a_job_beyond_its_quota_grows_nothing(write) -> None:
    jobs = "jobs: [{id: big, submit: 0, duration: 100, virtual_cluster: b, gpus: 16}]\n"
    result = replay(pool_cluster(write), write, jobs, policy="fifo")
    (record,) = result.records
    assert not record.completed and "ExceedsVirtualClusterLimit" in (record.never_reason or "")
    assert result.pools[0].launches == 0


def test_a_job_larger_than_the_pool_can_grow_is_never_served(write) -> None:
    cluster = load_cluster(write("c.yaml", (POOL % {"min": 0}).split("virtual_clusters")[0]))
    jobs = "jobs: [{id: huge, submit: 0, duration: 100, gpus: 32}]\n"  # 4 machines; max is 3
    result = replay(cluster, write, jobs)
    (record,) = result.records
    assert not record.completed and "NeverFits" in (record.never_reason or "")
    assert result.pools[0].launches == 0


def test_the_minimum_is_launched_at_the_start_and_billed_to_the_end(write) -> None:
    result = replay(pool_cluster(write, minimum=1), write, GANG)
    (usage,) = result.pools
    assert usage.launches == 2 and usage.terminations == 1  # the gang's second machine only
    (record,) = result.records
    assert record.first_start_s == 60.0  # the floor machine was booting too
    # the floor machine from 0 to the end of the replay (470), the other from 0 to 470
    assert usage.node_seconds == pytest.approx(2 * 470.0)


def test_cluster_forms_compare_idle_timeouts_against_the_fixed_cluster(write) -> None:
    cluster = pool_cluster(write)
    forms = cluster_forms(cluster, (0.0, 900.0))
    assert [label for label, _ in forms] == ["fixed", "idle-0s", "idle-15m"]
    assert [f.pools[0].template.idle_timeout_s for _, f in forms[1:]] == [0.0, 900.0]
    assert forms[0][1].pools == () and len(forms[0][1].nodes) == 3
    assert [label for label, _ in cluster_forms(cluster, ())] == ["fixed", "idle-5m"]


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ("{name: p, price_per_hour: 1, min: 3, max: 2}", "min .3. must not exceed max"),
        ("{name: p, price_per_hour: 1, max: 2, boot_delay: soon}", r"pools\.0\.boot_delay"),
        ("{name: p, max: 2}", r"pools\.0\.price_per_hour"),
        ("{name: p, price_per_hour: 1, max: 2, size: 3}", r"pools\.0\.size"),
        ("{name: P, price_per_hour: 1, max: 2}", r"pools\.0\.name"),
    ],
)
def test_pool_errors_name_the_field(write, pool: str, message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        load_cluster(write("c.yaml", f"pools: [{pool}]\n"))


def test_philly_pool_example_has_the_layout_of_philly_352() -> None:
    pools = load_cluster(EXAMPLES / "philly-pools.yaml")
    fixed = load_cluster(EXAMPLES / "philly-352.yaml")
    assert pools.total_gpus == fixed.total_gpus == 2816
    assert pools.quotas == fixed.quotas
    assert pools.nodes == () and pools.pools[0].template.max_nodes == 352


@pytest.fixture(scope="module")
def philly_forms(shared_dir: Path) -> list[SimResult]:
    request = SimRequest(
        shared_dir / "traces" / "philly_pollux_jobs.csv",
        EXAMPLES / "philly-pools.yaml",
        limit=400,
        config=CHECKED,
        idle_timeouts=(0.0, 3600.0),
    )
    return run_simulations(request).results


def test_philly_slice_scaling_costs_less_and_waits_about_the_boot_delay(philly_forms) -> None:
    fixed, idle_0, idle_1h = philly_forms
    for result in philly_forms:
        assert_consistent(result)
    cost = {r.variant: summarize(r)["cost"] for r in philly_forms}
    assert cost["idle-0s"] < cost["fixed"] / 10
    assert cost["idle-0s"] <= cost["idle-1h"]
    delays = {r.variant: summarize(r)["avg_queue_delay_s"] for r in philly_forms}
    assert delays["fixed"] == 0.0  # 352 machines: nothing waits
    assert 0 < delays["idle-1h"] <= delays["idle-0s"] <= 180 + 10  # at most one boot + a pass
    assert idle_1h.pools[0].launches <= idle_0.pools[0].launches
    assert fixed.pools[0].peak_nodes == 352 > idle_0.pools[0].peak_nodes


def test_cli_sweeps_idle_timeouts_and_reports_cost(shared_dir: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "shoal",
            "sim",
            "--trace",
            str(shared_dir / "traces" / "philly_pollux_jobs.csv"),
            "--cluster",
            str(EXAMPLES / "philly-pools.yaml"),
            "--limit",
            "200",
            "--idle-timeout",
            "0,15m",
            "--output",
            "json",
            "--check",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)
    assert [r["run"] for r in runs] == ["shoal fixed", "shoal idle-0s", "shoal idle-15m"]
    for run in runs:
        assert set(run["pools"]["v100"]) >= {"node_hours", "cost", "launches", "peak_nodes"}
        assert run["cost"] == pytest.approx(run["node_hours"] * 24.48)
    args = ["--trace", "x", "--cluster", "y", "--idle-timeout", "soon"]
    bad = subprocess.run(
        [sys.executable, "-m", "shoal", "sim", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode != 0 and "--idle-timeout" in bad.stderr
