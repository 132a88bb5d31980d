"""OpenPAI's own JS SDK (``@microsoft/openpai-js-sdk``, the library under OpenPAI's VS Code client)
runs an OpenPAI user's daily flow against a real local cluster's ``/api/v2``:
``tests/openpai_sdk/flow.js`` (docs/openpai-compat.md). The SDK is pinned by
``tests/openpai_sdk/package-lock.json`` and installed by ``make setup`` (``npm ci``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shoal.local.supervisor import alive, stop_local
from tests.integration.conftest import start_cluster

SDK_DIR = Path(__file__).resolve().parents[1] / "openpai_sdk"
FLOW = SDK_DIR / "flow.js"
# OpenPAI's hello-world job with commands that run on a CPU-only machine (see the file).
JOB = SDK_DIR / "hello-world-job.yaml"
USER, PASSWORD = "alice", "alice-openpai-1"
# Every step the flow takes, in order; a flow that stops early or skips one fails the test.
STEPS = [
    "info",
    "login",
    "virtual-clusters",
    "token-create",
    "token-list",
    "submit",
    "wait-running",
    "list-username",
    "list-state",
    "list-vc",
    "list-keyword",
    "list-paged",
    "detail",
    "config",
    "job-attempt",
    "job-attempts",
    "task-attempts",
    "events",
    "logs",
    "tag-add",
    "tag-remove",
    "stop",
    "resubmit",
]


def node_with_sdk() -> str:
    """Node, with the SDK installed by ``make setup``; otherwise the test is skipped, saying why."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH: install Node.js (with npm) and run `make setup`")
    installed = SDK_DIR / "node_modules" / "@microsoft" / "openpai-js-sdk" / "package.json"
    if not installed.exists():
        pytest.skip(f"OpenPAI's JS SDK is not installed in {SDK_DIR}: run `make setup` (npm ci)")
    return node


def run_flow(node: str, url: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}  # loopback only
    env.update(PAI_SERVER=url, PAI_USER=USER, PAI_PASSWORD=PASSWORD, PAI_JOB_YAML=str(JOB))
    done = subprocess.run(
        [node, str(FLOW)],
        cwd=SDK_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, lines


def test_openpai_sdk_runs_a_users_daily_flow(tmp_path: Path) -> None:
    node = node_with_sdk()
    home = tmp_path / "shoal-home"
    # One node the size of the hello-world job's task (1 GPU, 1 CPU, 6500 MB) and a little more.
    running = start_cluster(home, nodes=1, cpus=2.0, memory_mib=8192, gpus=1)
    try:
        running.client.create_user(USER, admin=False, groups=[], password=PASSWORD)
        done, lines = run_flow(node, running.info.url)
    finally:
        running.client.close()
        stop_local(home, grace_s=10)
    for pid in (running.info.server_pid, running.info.agent_pid):
        assert not alive(pid), f"process {pid} outlived `shoal down`"

    steps = {line["step"]: line for line in lines if "step" in line}
    failed = [line for line in steps.values() if not line["ok"]]
    shown = "\n".join(json.dumps(line) for line in failed) + "\n" + done.stderr[-2000:]
    assert not failed, f"the SDK flow failed at {failed[0]['step']}:\n{shown}"
    assert list(steps) == STEPS, f"steps run: {list(steps)}\n{done.stderr[-2000:]}"
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert lines[-1] == {"summary": {"passed": len(STEPS), "failed": [], "firstFailure": None}}
    # What the SDK saw is what the job did.
    assert steps["logs"]["fields"]["stdoutHead"].startswith("hello from OpenPAI's hello-world job")
    assert steps["detail"]["fields"]["task"]["containerNodeName"] == "node-0"
    assert steps["resubmit"]["fields"]["attemptId"] > steps["detail"]["fields"]["attemptId"]
