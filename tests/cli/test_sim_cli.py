"""``shoal sim`` as a user runs it: a real process, the JSON contract, the report files, and
one clear line (exit 1) for every mistake."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sim"


def shoal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal", "sim", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_json_output_has_the_documented_fields(shared_dir: Path) -> None:
    done = shoal(
        "--trace",
        str(shared_dir / "traces" / "philly_pollux_jobs.csv"),
        "--cluster",
        str(EXAMPLES / "philly-44.yaml"),
        "--limit",
        "300",
        "--output",
        "json",
        "--check",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    for key in (
        "jobs",
        "avg_jct_s",
        "p95_jct_s",
        "avg_queue_delay_s",
        "makespan_s",
        "gpu_utilization",
        "preemptions",
        "per_vc",
    ):
        assert key in summary
    assert summary["jobs"] == summary["completed"] == 300
    assert summary["policy"] == "shoal"
    assert sum(vc["jobs"] for vc in summary["per_vc"].values()) == 300


def test_comparison_with_report_directory(tmp_path: Path) -> None:
    report = tmp_path / "report"
    done = shoal(
        "--trace",
        str(EXAMPLES / "two-teams-jobs.yaml"),
        "--cluster",
        str(EXAMPLES / "two-teams.yaml"),
        "--policy",
        "fifo,shoal,las",
        "--report",
        str(report),
    )
    assert done.returncode == 0, done.stderr
    assert "better than fifo by" in done.stdout and "avg queue delay" in done.stdout
    summaries = json.loads((report / "summary.json").read_text())
    assert [s["policy"] for s in summaries] == ["fifo", "shoal", "las"]
    assert "| metric | fifo | shoal | las |" in (report / "report.md").read_text()
    for name in ("jct_cdf.png", "queue_length.png", "utilization.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (report / "jobs-shoal.csv").read_text().splitlines()
    assert rows[0].startswith("job_id,virtual_cluster") and len(rows) == 1 + 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--trace", "missing.csv", "--cluster", str(EXAMPLES / "two-teams.yaml")],
            "no such trace file",
        ),
        (
            ["--trace", str(EXAMPLES / "two-teams-jobs.yaml"), "--cluster", "missing.yaml"],
            "cannot read the cluster file",
        ),
        (
            [
                "--trace",
                str(EXAMPLES / "two-teams-jobs.yaml"),
                "--cluster",
                str(EXAMPLES / "two-teams.yaml"),
                "--policy",
                "sjf",
            ],
            "unknown policy 'sjf'",
        ),
        (
            [
                "--trace",
                str(EXAMPLES / "two-teams.yaml"),
                "--cluster",
                str(EXAMPLES / "two-teams.yaml"),
            ],
            "jobs",
        ),
    ],
)
def test_mistakes_are_one_line_and_exit_1(args: list[str], message: str) -> None:
    done = shoal(*args)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr
