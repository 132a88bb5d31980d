"""Admin edits and accounting from the CLI against a real local cluster (issue 9, defect 2 and
"Accounting"): `vc update` and `user update` change only the flags given, `--dry-run` writes
nothing, `user delete` with running jobs, and `shoal usage` / per-job accounting numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster


def shoal(home: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_HOME=str(home), COLUMNS="80")
    if token is not None:
        env["SHOAL_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def vcs(home: Path) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in json.loads(ok(shoal(home, "vc", "list", "-o", "json")))}


def test_vc_update_changes_only_the_flags_given(cluster: LocalCluster) -> None:
    home = cluster.home
    (home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    ok(
        shoal(
            home, "vc", "create", "team-a", "--guarantee", "gpu=2,cpu=2,memory=2Gi",
            "--borrow-limit", "gpu=1", "--members", "alice", "--user-gpu-cap", "1",
        )
    )  # fmt: skip
    # main: `--members` alone dropped the guarantee from 2 GPUs to 0
    diff = ok(shoal(home, "vc", "update", "team-a", "--members", "alice,bob"))
    assert "members  alice -> alice,bob" in diff
    team = vcs(home)["team-a"]
    assert team["guarantee"] == {"cpu": 2.0, "memoryMiB": 2048.0, "gpu": 2.0}
    # main: `--guarantee` alone opened the VC to everyone, removed its borrow limit and user cap
    ok(shoal(home, "vc", "update", "team-a", "--guarantee", "gpu=1"))
    team = vcs(home)["team-a"]
    assert team["members"] == ["alice", "bob"] and team["userGpuCap"] == 1
    assert team["borrowLimit"]["gpu"] == 1.0 and team["guarantee"]["gpu"] == 1.0
    dry = ok(shoal(home, "vc", "update", "team-a", "--clear-borrow-limit", "--dry-run"))
    assert "dry run, nothing written" in dry and "borrow limit gpu  1 -> any idle" in dry
    assert vcs(home)["team-a"] == team
    ok(
        shoal(
            home, "vc", "update", "team-a", "--clear-borrow-limit", "--clear-user-cap",
            "--remove-member", "bob", "--strict-fifo",
        )
    )  # fmt: skip
    team = vcs(home)["team-a"]
    assert team["borrowLimit"] is None and team["userGpuCap"] is None
    assert team["members"] == ["alice"] and team["strictFifo"] is True
    nothing = shoal(home, "vc", "update", "team-a")
    assert nothing.returncode == 1 and "nothing to change" in nothing.stderr
    # main: "no virtual cluster 'default'" although `vc list` shows it
    ok(shoal(home, "vc", "update", "default", "--user-gpu-cap", "2"))
    assert vcs(home)["default"]["userGpuCap"] == 2
    fixed = shoal(home, "vc", "update", "default", "--guarantee", "gpu=1")
    assert fixed.returncode == 1 and "other VCs" in fixed.stderr
    # main: a guarantee the VC does not limit was printed as 1.09951e+09
    ok(shoal(home, "vc", "create", "gpu-only", "--guarantee", "gpu=1"))
    table = ok(shoal(home, "vc", "list"))
    assert "e+" not in table and all(len(line) <= 80 for line in table.splitlines())
    assert "1/-/-" in table and "everyone" in table


def test_vc_aging_is_set_shown_changed_and_cleared(cluster: LocalCluster) -> None:
    home = cluster.home
    (home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    ok(shoal(home, "vc", "create", "team-b", "--guarantee", "gpu=1", "--aging", "1,10"))
    assert vcs(home)["team-b"]["aging"] == {
        "policy": "las",
        "thresholds_gpu_hours": [1.0, 10.0],
        "max_preemptions": None,
    }
    table = ok(shoal(home, "vc", "list"))
    assert "las 1,10" in table and all(len(line) <= 80 for line in table.splitlines())
    diff = ok(
        shoal(home, "vc", "update", "team-b", "--aging", "las:2.5", "--aging-max-preemptions", "2")
    )
    assert "aging  las at 1, 10 GPU-h -> las at 2.5 GPU-h, <= 2 preemptions" in diff
    alone = shoal(home, "vc", "update", "team-b", "--aging-max-preemptions", "3")
    assert alone.returncode == 2 and "give the thresholds too" in alone.stderr
    refused = shoal(home, "vc", "update", "team-b", "--aging", "10,1")
    assert refused.returncode == 1 and "aging.thresholds_gpu_hours" in refused.stderr
    assert "must be larger" in refused.stderr
    typo = shoal(home, "vc", "update", "team-b", "--aging", "1h")
    assert typo.returncode == 2 and "--aging" in typo.stderr
    assert vcs(home)["team-b"]["aging"]["thresholds_gpu_hours"] == [2.5]
    cleared = ok(shoal(home, "vc", "update", "team-b", "--clear-aging"))
    assert "las at 2.5 GPU-h, <= 2 preemptions -> off" in cleared
    assert vcs(home)["team-b"]["aging"] is None


def test_user_update_delete_with_running_jobs_and_accounting(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    home = cluster.home
    (home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    alice = json.loads(ok(shoal(home, "user", "create", "alice", "-o", "json")))["token"]
    dry = ok(shoal(home, "user", "update", "alice", "--groups", "g1", "--dry-run"))
    assert "groups  none -> g1" in dry and "dry run" in dry
    ok(shoal(home, "user", "update", "alice", "--add-group", "g2"))
    users = json.loads(ok(shoal(home, "user", "list", "-o", "json")))
    assert [u["groups"] for u in users if u["name"] == "alice"] == [["g2"]]

    long_job = tmp_path / "long.yaml"
    long_job.write_text("version: 1\nname: long\nroles:\n  a:\n    command: sleep 120\n")
    job_id = json.loads(ok(shoal(home, "job", "submit", str(long_job), "-o", "json", token=alice)))
    job_id = job_id["id"] if isinstance(job_id, dict) else job_id[0]["id"]
    cluster.wait_for(lambda: cluster.client.job(job_id)["state"] == "RUNNING")
    refused = shoal(home, "user", "delete", "alice")
    assert refused.returncode == 1
    assert f"{job_id} (long, RUNNING)" in refused.stderr and "--stop-jobs" in refused.stderr
    assert cluster.client.job(job_id)["state"] == "RUNNING"
    deleted = ok(shoal(home, "user", "delete", "alice", "--stop-jobs"))
    assert f"stopped job(s) {job_id}" in deleted
    assert cluster.wait(job_id)["state"] == "STOPPED"
    listed = json.loads(ok(shoal(home, "job", "list", "--all", "-o", "json")))
    assert [(j["id"], j["user"]) for j in listed] == [(job_id, "alice")]
    revoked = shoal(home, "job", "list", token=alice)
    assert revoked.returncode == 1

    # accounting, checked against a real 1-GPU task that burns ~0.3 s of CPU
    burn = (
        "import time\nstart = time.process_time()\n"
        "while time.process_time() - start < 0.3:\n    pass\ntime.sleep(0.7)\n"
    )
    (tmp_path / "burn.py").write_text(burn)
    job_file = tmp_path / "burn.yaml"
    job_file.write_text(
        "version: 1\nname: burn\nroles:\n  a:\n    resources: {gpu: 1}\n"
        f"    command: {sys.executable} {tmp_path / 'burn.py'}\n"
    )
    burn_id = cluster.submit(job_file.read_text())
    assert cluster.wait(burn_id)["state"] == "SUCCEEDED"
    detail = cluster.client.job(burn_id)
    task = detail["tasks"][0]
    ran = task["finishedAt"] - task["startedAt"]
    used = detail["accounting"]
    assert used["cpuSeconds"] >= 0.25
    assert abs(used["gpuHours"] - ran / 3600) <= 2e-6
    assert abs(used["elapsedS"] - ran) <= 2e-3
    assert used["peakMemoryMiB"] > 0
    summary = next(j for j in cluster.client.jobs(limit=10) if j["id"] == burn_id)
    assert summary["accounting"] == used

    by_user = json.loads(ok(shoal(home, "usage", "--by", "user", "--since", "30d", "-o", "json")))
    rows = {r["key"]: r for r in by_user["rows"]}
    assert rows["admin"]["jobs"] == 1 and rows["alice"]["jobs"] == 1
    assert abs(rows["admin"]["gpuHours"] - used["gpuHours"]) <= 1e-6
    text = ok(shoal(home, "usage", "--by", "vc"))
    assert "default" in text and all(len(line) <= 80 for line in text.splitlines())
    bad = shoal(home, "usage", "--since", "a while")
    assert bad.returncode != 0 and "--since" in bad.stderr and "not a duration" in bad.stderr
