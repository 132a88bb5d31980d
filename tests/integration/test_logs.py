"""`shoal job logs` and `submit --wait` as a user types them, against a real cluster: failures
show, every task merged in time order, tails, since, timestamps, earlier attempts, follow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster
from tests.integration.test_cli_remote import shoal

# Lines a second apart (four shipping periods): each lands in its own chunk, so their shipped
# times order them across tasks and streams.
TWO_ROLES = """\
version: 1
name: pair
roles:
  a:
    command: echo a1; sleep 2; echo a2 >&2; sleep 1; echo a3
  b:
    command: sleep 1; echo b1; sleep 3; echo b2
"""
IN_ORDER = ["[a/0] a1", "[b/0] b1", "[a/0] a2", "[a/0] a3", "[b/0] b2"]
STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d) (.*)$")


def use_cluster(cluster: LocalCluster, tmp_path: Path, text: str) -> Path:
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    job_file = tmp_path / "job.yaml"
    job_file.write_text(text)
    return job_file


def lines(home: Path, *args: str) -> list[str]:
    result = shoal(home, "job", "logs", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_logs_merge_every_task_and_stream_in_time_order(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    job_file = use_cluster(cluster, tmp_path, TWO_ROLES)
    job_id = cluster.submit(job_file.read_text())
    follow = subprocess.run(  # -f on all tasks from the start: ends by itself when the job ends
        [sys.executable, "-m", "shoal", "job", "logs", job_id, "-f"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if not is_user_setting(k)}}
        | {"SHOAL_HOME": str(cluster.home)},
        check=False,
    )
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout.splitlines() == IN_ORDER
    assert cluster.wait(job_id)["state"] == "SUCCEEDED"
    assert lines(cluster.home, job_id) == IN_ORDER
    assert lines(cluster.home, job_id, "--task", "a/0") == ["a1", "a2", "a3"]
    assert lines(cluster.home, job_id, "--task", "a/0", "--stdout") == ["a1", "a3"]
    assert lines(cluster.home, job_id, "--stderr") == ["[a/0] a2"]
    assert lines(cluster.home, job_id, "--tail", "2") == IN_ORDER[-2:]
    assert lines(cluster.home, job_id, "--task", "b/0", "--tail", "1") == ["b2"]

    stamped = [STAMPED.match(line) for line in lines(cluster.home, job_id, "--timestamps")]
    assert all(stamped), stamped
    assert [m.group(2) for m in stamped if m] == IN_ORDER
    times = [datetime.fromisoformat(m.group(1)).timestamp() for m in stamped if m]
    assert times == sorted(times) and times[-1] - times[0] >= 3  # b2 is written 4 s after a1
    middle = datetime.fromtimestamp((times[1] + times[2]) / 2, tz=UTC).isoformat()
    assert lines(cluster.home, job_id, "--since", middle) == IN_ORDER[2:]
    assert lines(cluster.home, job_id, "--since", "1h") == IN_ORDER
    bad = shoal(cluster.home, "job", "logs", job_id, "--since", "yesterday")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        "error: since (--since): 'yesterday' is not a duration (10m, 1h, 2s, 1d) "
        "or an RFC 3339 time"
    )


def test_a_failed_tasks_stderr_shows_by_default(cluster: LocalCluster, tmp_path: Path) -> None:
    job_file = use_cluster(
        cluster,
        tmp_path,
        "version: 1\nname: broken\nroles:\n  learner:\n"
        "    command: |\n      echo starting; echo 'ModuleNotFoundError: no torch' >&2; exit 2\n",
    )
    job_id = cluster.submit(job_file.read_text())
    assert cluster.wait(job_id)["state"] == "FAILED"
    assert lines(cluster.home, "broken") == [
        "[learner/0] starting",
        "[learner/0] ModuleNotFoundError: no torch",
    ]


def test_earlier_attempts_stay_readable(cluster: LocalCluster, tmp_path: Path) -> None:
    job_file = use_cluster(
        cluster,
        tmp_path,
        "version: 1\nname: again\nretries: 1\nroles:\n  w:\n"
        '    command: echo "try $SHOAL_JOB_ATTEMPT"; echo "err $SHOAL_JOB_ATTEMPT" >&2;'
        ' test "$SHOAL_JOB_ATTEMPT" = 2\n',
    )
    job_id = cluster.submit(job_file.read_text())
    job = cluster.wait(job_id)
    assert job["state"] == "SUCCEEDED" and job["attempt"] == 2
    assert lines(cluster.home, job_id) == ["[w/0] try 2", "[w/0] err 2"]
    assert lines(cluster.home, job_id, "--previous") == ["[w/0] try 1", "[w/0] err 1"]
    assert lines(cluster.home, job_id, "--attempt", "1", "--stderr") == ["[w/0] err 1"]
    assert lines(cluster.home, job_id, "--attempt", "2.1", "--task", "w/0") == ["try 2", "err 2"]
    missing = shoal(cluster.home, "job", "logs", job_id, "--attempt", "3")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"error: job {job_id} has no attempt 3; its attempts: 1, 2 (current)"
    )
    chunks = cluster.client.log_lines(job_id, previous=True, stream="stdout")
    assert chunks["jobAttempt"] == 1 and chunks["attempts"] == [1, 2]
    assert [line["text"] for line in chunks["streams"][0]["lines"]] == ["try 1"]


def test_submit_wait_streams_events_and_explains_a_failure(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    job_file = use_cluster(
        cluster,
        tmp_path,
        "version: 1\nname: doomed\nroles:\n  learner:\n"
        "    command: |\n"
        '      for i in $(seq 1 30); do echo "step $i"; done; sleep 0.6; '
        "echo 'CUDA error: out of memory' >&2; exit 3\n"
        "  actor:\n    command: sleep 30\n",
    )
    result = shoal(cluster.home, "job", "submit", str(job_file), "--wait")
    assert result.returncode == 1, result.stderr
    out = result.stdout.splitlines()
    job_id = out[0].split()[2]
    kinds = [line.split()[3] for line in out if re.match(r"^\d\d:\d\d:\d\d\.\d{3} job ", line)]
    assert kinds[:2] == ["queued", "placed"] and "started" in kinds and "failed" in kinds
    tail_at = out.index("task learner/0 exit code 3; its last 20 lines (stdout and stderr):")
    assert out[tail_at + 1 : tail_at + 21] == [
        *(f"  step {i}" for i in range(12, 31)),
        "  CUDA error: out of memory",
    ]
    assert out[-1] == f"next: shoal job logs {job_id} --task learner/0"
    assert f"job {job_id} FAILED" in out[tail_at - 1]

    machine = shoal(cluster.home, "job", "submit", str(job_file), "--wait", "-o", "json")
    assert machine.returncode == 1
    assert json.loads(machine.stdout)["state"] == "FAILED"  # nothing but the JSON on stdout
