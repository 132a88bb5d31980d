"""Idle interactive jobs are stopped (docs/notebooks.md, "Idle timeout"), on a real local cluster:
a VC with an idle timeout, an interactive job kept busy through the task proxy stays up, then,
left alone, is warned in its events and stopped; a job that is not interactive is never."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import LocalCluster, local_cli, running_cluster

TIMEOUT_S = 8


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("SHOAL_IDLE_SWEEP_S", "0.5")  # the server checks every half second
    with running_cluster(tmp_path / "shoal-home", nodes=1) as running:
        yield running


def _job(name: str, interactive: bool) -> str:
    # the proxy passes its whole path on: the task serves a directory of that name
    serve = f'mkdir -p ".$SHOAL_PROXY_PREFIX" && exec {sys.executable} -m http.server $SHOAL_PORT'

    return (
        f"version: 1\nname: {name}\nvc: lab\ninteractive: {str(interactive).lower()}\n"
        f"roles:\n  web:\n    resources: {{cpu: 1, memory: 256}}\n"
        f"    command: {json.dumps(serve)}\n"
    )


def test_an_idle_interactive_job_is_warned_then_stopped(lab: LocalCluster) -> None:
    made = local_cli(lab, "vc", "create", "lab", "--idle-timeout", f"{TIMEOUT_S}s")
    assert made.returncode == 0, made.stderr
    assert {v["name"]: v.get("idleTimeoutS") for v in lab.client.vcs()}["lab"] == TIMEOUT_S
    listed = local_cli(lab, "vc", "list")
    assert f"idle interactive jobs stopped after: lab {TIMEOUT_S}s" in listed.stdout, listed.stdout
    notebook, batch = lab.submit(_job("nb", True)), lab.submit(_job("batch", False))
    port = lab.client.cluster()["proxyPort"]
    page = f"http://127.0.0.1:{port}/proxy/{notebook}/web/0/http/"
    token = (lab.home / "admin.token").read_text().strip()
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        lab.wait_for(lambda: client.get(page).status_code == 200, 60)
        busy_until = time.monotonic() + TIMEOUT_S * 1.5
        while time.monotonic() < busy_until:  # used more often than its timeout: kept
            assert client.get(page).status_code == 200
            time.sleep(1)
    assert lab.client.job(notebook)["state"] == "RUNNING"
    final = lab.wait(notebook, timeout_s=TIMEOUT_S * 4)  # left alone
    assert final["state"] == "STOPPED", final
    events = {e["kind"]: e["message"] for e in lab.client.events(notebook)}
    assert "stopped in" in events["idle"], events
    assert f"VC lab's idle timeout: {TIMEOUT_S}s" in events["idle-stop"], events
    assert lab.client.job(batch)["state"] == "RUNNING"  # not interactive: never stopped for it
    lab.client.stop(batch)
