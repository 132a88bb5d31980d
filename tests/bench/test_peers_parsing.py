"""bench/peers: the pure helpers only (numbers, ratios, Markdown, docs region, slurm.conf).

Nothing here installs or starts Slurm, Ray or shoal.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

PEERS = Path(__file__).resolve().parents[2] / "bench" / "peers"


def _load(name: str) -> ModuleType:
    if str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))
    return importlib.import_module(name)


report = _load("peer_report")
slurm = _load("peer_slurm")
proc = _load("peer_proc")


def _raw(latencies: list[float], drain_s: float, ok: int = 10) -> dict:
    return {
        "version": "v",
        "running_means": "m",
        "latencies": latencies,
        "drain_seconds": drain_s,
        "submit_seconds": 1.0,
        "drain_succeeded": ok,
    }


def _data(systems: dict) -> dict:
    return {
        "generated_at": "2026-01-01 00:00 UTC",
        "command": ".venv/bin/python bench/peers/run.py",
        "parameters": {"latency_jobs": 3, "drain_jobs": 10, "slots": 20},
        "machine": {
            "cpu": "CPU",
            "cores": 2,
            "ram_gib": 24.0,
            "os": "Debian",
            "kernel": "6.1",
            "python": "3.11",
        },
        "systems": systems,
    }


def test_percentile_uses_the_rank_of_bench_launch() -> None:
    values = [float(x) for x in range(1, 101)]
    assert report.percentile(values, 0.99) == 99.0
    assert report.percentile(values, 0.0) == 1.0
    assert report.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert report.percentile([float(x) for x in range(50)], 0.99) == 49.0  # n=50: the max
    with pytest.raises(ValueError):
        report.percentile([], 0.5)


def test_parse_only_keeps_run_order_and_rejects_unknown_names() -> None:
    assert report.parse_only("ray, shoal,slurm") == ["slurm", "shoal", "ray"]
    assert report.parse_only("RAY") == ["ray"]
    with pytest.raises(ValueError):
        report.parse_only("slurm,k8s")
    with pytest.raises(ValueError):
        report.parse_only(" , ")


def test_summarize_reports_milliseconds_and_throughput() -> None:
    s = report.summarize(_raw([0.010, 0.030, 0.020], 4.0), drain_jobs=10)
    assert s["p50_ms"] == 20.0
    assert s["p99_ms"] == 30.0
    assert (s["min_ms"], s["max_ms"]) == (10.0, 30.0)
    assert s["jobs_per_second"] == 2.5  # 10 succeeded in 4 s
    assert s["latencies_ms"] == [10.0, 30.0, 20.0]


def test_ratios_are_peer_over_shoal() -> None:
    systems = {
        "shoal": report.summarize(_raw([0.05], 10.0), 10),
        "slurm": report.summarize(_raw([1.0], 5.0), 10),
        "ray": {"error": "boom"},
    }
    assert report.ratios(systems) == {
        "slurm": {"p50_ms": 20.0, "p99_ms": 20.0, "drain_seconds": 0.5}
    }
    assert report.ratios({"slurm": systems["slurm"]}) == {}


@pytest.mark.parametrize(
    ("ratio", "text"),
    [(23.4, "23× faster"), (2.04, "2.0× faster"), (0.5, "2.0× slower"), (1.02, "1.0× (same)")],
)
def test_speedup_text(ratio: float, text: str) -> None:
    assert report.speedup_text(ratio) == text


def test_rows_and_markdown_show_every_system_and_failures() -> None:
    systems = {
        "shoal": report.summarize(_raw([0.05, 0.06, 0.07], 10.0), 10),
        "slurm": report.summarize(_raw([1.0, 1.0, 1.2], 5.0, ok=9), 10),
        "ray": {"error": "RuntimeError: no head"},
    }
    rows = report.rows(systems)
    assert [r[0] for r in rows] == ["shoal local mode", "Slurm", "Ray Jobs"]
    assert rows[1][4] == "5.0 s (9 ok)"
    assert rows[1][5] == "1.8"  # succeeded jobs per second
    assert rows[1][6:8] == ["—", "—"]  # no array drain measured
    assert rows[1][8] == "17× faster"
    assert rows[1][10] == "2.0× slower"
    assert rows[1][11] == "—"
    assert rows[2][2].startswith("failed: RuntimeError")
    assert rows[0][8:] == ["—", "—", "—", "—"]
    text = report.markdown(_data(systems))
    assert "| Slurm | v | 1,000 ms | 1,200 ms | 5.0 s (9 ok) |" in text
    assert "drain 10 jobs, 20 slots, one by one" in text
    assert "- shoal local mode: m." in text
    assert report.rich_table(_data(systems)).row_count == 3
    raw = _raw([1.0], 20.0, ok=9) | {"drain_statuses": {"SUCCEEDED": 9, "FAILED": 1}}
    systems["slurm"] = report.summarize(raw | {"first_failure": "timed out", "tuning": "t"}, 10)
    assert report.rows(systems)[1][10] == "≥ 2.0× faster"  # unfinished: a lower bound
    notes = report.outcome_notes(systems)
    assert notes[0] == "- Slurm tuning: t."
    assert notes[1].startswith("- Slurm drain: 9 of 10 succeeded (SUCCEEDED 9, FAILED 1)")
    assert "timed out" in notes[1]


def _array(seconds: float, ok: int = 10) -> dict:
    return {
        "array_drain_seconds": seconds,
        "array_submit_seconds": 0.01,
        "array_drain_succeeded": ok,
        "array_how": "x",
    }


def test_the_array_drain_is_shown_beside_the_drain_and_compared() -> None:
    systems = {
        "shoal": report.summarize(_raw([0.05], 10.0) | _array(2.0), 10),
        "slurm": report.summarize(_raw([1.0], 20.0) | _array(30.0, ok=9), 10),
        "ray": report.summarize(_raw([3.0], 900.0), 10),
    }
    assert systems["shoal"]["array_jobs_per_second"] == 5.0
    assert report.ratios(systems)["slurm"]["array_drain_seconds"] == 15.0
    shoal, slurm, ray = report.rows(systems)
    assert shoal[6:8] == ["2.0 s", "5.0"]
    assert slurm[6:8] == ["30.0 s (9 ok)", "0.3"]
    assert slurm[11] == "15× faster"
    assert ray[6:8] == ["—", "—"] and ray[11] == "—"  # Ray Jobs has no arrays
    assert "sbatch --array=0-999%20" in report.markdown(_data(systems))


def test_array_tasks_are_counted_from_squeue_ids() -> None:
    listing = "41\n42_0\n42_1\n420_3\n42_[5-9%2]\n"
    assert slurm.count_array_tasks(listing, 42) == 2  # 420_3 is another array; [5-9%2] pending
    assert slurm.count_array_tasks("", 42) == 0


DOC = "# Benchmarks\n\n## Local launch\n\ntext\n\n## Where the time goes\n\nmore\n"


def test_replace_region_adds_the_section_before_the_anchor_once() -> None:
    once = report.replace_region(DOC, "FRAGMENT 1")
    assert once.index(report.SECTION) < once.index("## Where the time goes")
    assert f"{report.BEGIN}\nFRAGMENT 1\n{report.END}" in once
    twice = report.replace_region(once, "FRAGMENT 2\n")
    assert "FRAGMENT 1" not in twice
    assert twice.count(report.SECTION) == 1
    assert twice.replace("FRAGMENT 2", "FRAGMENT 1") == once
    assert twice.endswith("## Where the time goes\n\nmore\n")


def test_replace_region_without_anchor_appends_and_rejects_broken_markers() -> None:
    out = report.replace_region("# B\n", "X")
    assert out.endswith(f"{report.BEGIN}\nX\n{report.END}\n")
    with pytest.raises(ValueError):
        report.replace_region(f"{report.END}\n{report.BEGIN}\n", "X")


def test_slurm_conf_is_config_c_with_the_given_slots() -> None:
    conf = slurm.render_slurm_conf(20, Path("/b"))
    lines = conf.splitlines()
    assert "NodeName=localhost NodeAddr=127.0.0.1 CPUs=20 RealMemory=4000 State=UNKNOWN" in lines
    for line in (
        "DefMemPerCPU=100",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        "SlurmdParameters=config_overrides",
        "SelectTypeParameters=CR_CPU_Memory",
        "StateSaveLocation=/b/state",
        "AuthType=auth/munge",
    ):
        assert line in lines
    assert "CPUs=64 RealMemory=6400 " in slurm.render_slurm_conf(64)


def test_sbatch_parsable_output() -> None:
    assert slurm.parse_job_id("123\n") == 123
    assert slurm.parse_job_id("45;shoalbench\n") == 45


def test_namespace_addresses_stay_in_198_18_0_0_15() -> None:
    proc.check_address("198.18.1.1/32")
    proc.check_address("198.19.255.1/32")
    for bad in ("192.0.2.5/32", "10.0.0.1/32", "198.20.0.1/32", "198.18.0.0/14", "::1/128"):
        with pytest.raises(ValueError):
            proc.check_address(bad)


def test_stamp_command_writes_atomically() -> None:
    assert proc.stamp_command(Path("/s/x")) == "date +%s.%N > /s/x.tmp && mv /s/x.tmp /s/x"
