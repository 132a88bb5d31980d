"""Job views without a server: tables that never cut a value, -o wide/yaml, --state and --since
checked before any request, templates that parse, and `job plan` falling back to simulated nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest
import yaml

from shoal.cli.columns import Column, table_text
from shoal.cli.job_text import describe_text, list_text, since_epoch, status_text, why_text
from tests.cli.test_job_cli import real_shoal, shoal
from tests.envs import is_user_setting

LONG = "a-long-job-name-that-is-never-cut-at-all"  # 40 characters


def summary(job_id: str, name: str, **extra: object) -> dict[str, object]:
    return {
        "id": job_id,
        "name": name,
        "user": "alice",
        "virtualCluster": "default",
        "state": "WAITING",
        "priorityClass": "prod",
        "submittedAt": time.time(),  # today: shown as one HH:MM:SS word
        "launchedAt": None,
        "completedAt": None,
        "attempt": 0,
        "taskCount": 2,
        "gpus": 2,
        "exitClass": None,
        "exitCode": None,
        "pending": {"code": "InsufficientGPU", "message": "m", "position": 3},
        **extra,
    }


def test_at_80_columns_low_value_columns_go_and_values_stay_whole() -> None:
    text = list_text([summary("12", LONG), summary("13", "short")], wide=False, width=80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert LONG in text and "…" not in text and "InsufficientGPU (#3)" in text
    assert lines[0].split() == ["ID", "NAME", "STATE", "NOTE"]  # TASKS, VC, ... left out


def test_piped_tables_show_every_column_in_full() -> None:
    text = list_text([summary("12", LONG)], wide=False, width=None)
    assert text.splitlines()[0].split() == [
        "ID", "NAME", "USER", "VC", "STATE", "TASKS", "GPUS", "SUBMITTED", "NOTE",
    ]  # fmt: skip
    assert LONG in text and not set(text) & set("│─┃━…")


def test_essential_columns_are_never_cut_even_when_too_wide() -> None:
    text = table_text([Column("NAME"), Column("X", drop=1)], [[LONG * 2, "x"]], width=80)
    assert text.splitlines() == ["NAME", LONG * 2]


def test_wide_adds_accounting_columns_with_a_dash_when_absent() -> None:
    accounted = summary(
        "12",
        "a",
        nodes=["node-0", "node-1"],
        accounting={"elapsedS": 3725, "gpuHours": 2.07, "cpuSeconds": 61, "peakMemoryMiB": 2048},
    )
    lines = list_text([accounted, summary("13", "b")], wide=True, width=80).splitlines()
    header = lines[0].split()
    for column in ("PRIORITY", "ATTEMPT", "NODES", "ELAPSED", "GPU-H", "PEAK-MEM", "CPU-TIME"):
        assert column in header
    row = dict(zip(header, lines[1].split(), strict=False))
    assert (row["ELAPSED"], row["GPU-H"], row["PEAK-MEM"], row["CPU-TIME"]) == (
        "1h02m", "2.07", "2.0Gi", "1m01s",
    )  # fmt: skip
    assert row["NODES"] == "node-0,node-1"
    other = dict(zip(header, lines[2].split(), strict=False))
    assert (other["ELAPSED"], other["GPU-H"], other["PEAK-MEM"], other["CPU-TIME"]) == ("-",) * 4


def test_blockers_are_named_with_user_name_and_gpus() -> None:
    detail = {**summary("9", "mine"), "diagnostics": "", "tasks": []}
    why = {
        "id": "9",
        "state": "WAITING",
        "blockers": ["3"],
        "blockerDetails": [{"id": "3", "user": "bob", "name": "big", "gpus": 4}],
        "preempting": [],
    }
    assert "finish or are preempted: 3 (bob/big, 4 GPUs)" in status_text(detail, why, 80)
    events = [{"at": 1_700_000_000.5, "kind": "queued", "message": "submitted"}]
    described = describe_text(detail, why, events, 80)
    for part in ("Job:", "alice~mine", "Waiting:", "3 (bob/big, 4 GPUs)", "Tasks:", "submitted"):
        assert part in described


def test_since_accepts_durations_and_dates() -> None:
    assert since_epoch("7d", 1_000_000.0) == 1_000_000.0 - 7 * 86400
    assert since_epoch("30m", 1000.0) == 1000.0 - 1800
    assert since_epoch("2024-05-01", 0) > 1.7e9
    with pytest.raises(ValueError, match="neither a duration"):
        since_epoch("yesterday", 0)


def test_bad_state_and_since_are_one_line_and_exit_2() -> None:
    bad = shoal("job", "list", "--state", "TIMEOUT")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: --state TIMEOUT: not a job state; use one of WAITING, RUNNING, STOPPING, "
        "SUCCEEDED, FAILED, STOPPED"
    ]
    since = shoal("job", "list", "--since", "yesterday")
    assert since.returncode == 2 and since.stderr.startswith("error: --since 'yesterday'")


def test_every_template_parses_and_pai_v1_is_pure_json() -> None:
    folder = resources.files("shoal.spec").joinpath("templates")
    for entry in folder.iterdir():
        text = entry.read_text("utf-8")
        assert (json.loads if entry.name.endswith(".json") else yaml.safe_load)(text), entry.name
    merged = subprocess.run(
        [sys.executable, "-m", "shoal", "job", "template", "--format", "pai-v1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(merged.stdout)["jobName"]  # stdout and stderr together: still JSON


def test_template_does_not_offer_auto() -> None:
    refused = shoal("job", "template", "--format", "auto")
    assert refused.returncode == 2
    assert "auto" not in real_shoal("job", "template", "--help").stdout


def test_validate_speaks_yaml(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(shoal("job", "template").stdout)
    result = shoal("job", "validate", str(job), "-o", "yaml")
    assert result.returncode == 0
    assert yaml.safe_load(result.stdout)["valid"] is True


def test_plan_without_a_server_uses_simulated_nodes_and_says_so(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(shoal("job", "template").stdout)
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_URL="http://127.0.0.1:9", SHOAL_HOME=str(tmp_path / "home"))
    result = subprocess.run(
        [sys.executable, "-m", "shoal", "job", "plan", str(job), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "no shoal server answers at http://127.0.0.1:9" in result.stderr
    assert "planned on 1 simulated idle node(s)" in result.stderr
    (plan,) = json.loads(result.stdout)
    assert plan["cluster"] == "simulated" and plan["admitted"] is True


def test_a_position_not_computed_yet_is_said_so_never_shown_as_a_question_mark() -> None:
    known = {**summary("9", "mine"), "diagnostics": "", "tasks": []}
    assert "(position 3 in virtual cluster default)" in status_text(known, None, 80)
    restarted = {**known, "pending": {"code": "InsufficientGPU", "message": "m", "position": None}}
    for text in (
        status_text(restarted, None, 80),
        why_text({"id": "9", "state": "WAITING", "virtualCluster": "default", "position": None,
                  "code": "InsufficientGPU", "message": "m", "blockers": [], "preempting": []}),
    ):  # fmt: skip
        assert "?" not in text, text
        assert (
            "position not computed yet: the scheduler has not run since the server restarted"
            in text
        )
    held = {**known, "pending": {"code": "ArrayConcurrencyLimit", "message": "at most 5 at once"}}
    assert "position" not in status_text(held, None, 80)  # not in the queue: no position at all
