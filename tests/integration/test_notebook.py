"""`shoal job template jupyter` and `tensorboard` work as written (docs/notebooks.md), with real
server, agent and app processes: each template, as printed, starts its app behind the task
proxy; Jupyter answers through the proxy (its kernels too) and refuses anyone who comes to its
port directly without the task's proxy token; TensorBoard's page and data load under its path
prefix. The browser side (the dashboard's Open link, a cell run): tests/browser/test_notebook.py."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.sync.client import connect

from shoal.local.supervisor import stop_local
from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster, start_cluster

pytestmark = pytest.mark.slow

JUPYTER = all(importlib.util.find_spec(m) for m in ("jupyterlab", "ipykernel"))
TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
NEEDS_JUPYTER = pytest.mark.skipif(
    not JUPYTER, reason="jupyterlab and ipykernel are not installed (make setup: the dev extra)"
)
NEEDS_TENSORBOARD = pytest.mark.skipif(
    not TENSORBOARD, reason="tensorboard is not installed (make setup: the dev extra)"
)
STARTED_S = 120  # an app's start on a busy 2-core machine


def template(kind: str) -> str:
    """The template as `shoal job template KIND` prints it."""
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    printed = subprocess.run(
        [sys.executable, "-m", "shoal", "job", "template", kind],
        capture_output=True, text=True, env=env, check=True, timeout=60,
    )  # fmt: skip
    return printed.stdout


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    home = tmp_path_factory.mktemp("notebook") / "shoal-home"
    running = start_cluster(home, nodes=1)
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


def bearer(local: LocalCluster) -> dict[str, str]:
    return {"Authorization": f"Bearer {(local.home / 'admin.token').read_text().strip()}"}


def proxied(local: LocalCluster, path: str) -> str:
    return f"http://127.0.0.1:{local.client.cluster()['proxyPort']}{path}"


def wait_until_served(local: LocalCluster, job: str, role: str, url: str) -> httpx.Response:
    """The first 200 from ``url`` through the proxy, once the app listens."""
    deadline = time.monotonic() + STARTED_S
    answer: httpx.Response | None = None
    while time.monotonic() < deadline:
        if local.client.job(job)["state"] in ("FAILED", "SUCCEEDED", "STOPPED"):
            break
        try:
            answer = httpx.get(url, headers=bearer(local), timeout=30)
            if answer.status_code == 200:
                return answer
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stderr = (
        local.output_so_far(job, role) + local.client.logs(job, role, 0, stream="stderr")["data"]
    )
    last = f"{answer.status_code} {answer.text[:300]}" if answer is not None else "no answer"
    raise AssertionError(f"{url} was not served ({last}); the task said:\n{stderr[-3000:]}")


@NEEDS_JUPYTER
def test_the_jupyter_template_serves_jupyter_through_the_proxy_only(local: LocalCluster) -> None:
    job = local.submit(template("jupyter"))
    try:
        prefix = f"/proxy/{job}/notebook/0/http/"
        status = wait_until_served(local, job, "notebook", proxied(local, prefix + "api/status"))
        assert "started" in status.json()
        lab = httpx.get(proxied(local, prefix + "lab"), headers=bearer(local), timeout=60)
        assert lab.status_code == 200 and "<title>JupyterLab</title>" in lab.text
        # a kernel, and code run in it over its WebSocket, all through the proxy
        kernel = httpx.post(
            proxied(local, prefix + "api/kernels"), headers=bearer(local),
            json={"name": "python3"}, timeout=60,
        )  # fmt: skip
        assert kernel.status_code == 201, kernel.text
        channels = proxied(local, f"{prefix}api/kernels/{kernel.json()['id']}/channels")
        assert run_code(channels.replace("http://", "ws://"), bearer(local), "1+1") == "2"
        # the app's own port, reached without the proxy (as another user's task on the node
        # could): Jupyter wants the task's proxy token, which only the proxy sends
        task = local.client.job(job)["tasks"][0]
        direct = f"http://127.0.0.1:{task['ports']['http'][0]}{prefix}api/status"
        assert httpx.get(direct, timeout=30).status_code == 403
        assert httpx.get(direct, headers=bearer(local), timeout=30).status_code == 403
    finally:
        local.client.stop(job)


def run_code(url: str, headers: dict[str, str], code: str) -> str:
    """Execute ``code`` over a kernel's channels WebSocket; its result as text/plain."""
    request = {
        "header": {"msg_id": "shoal-test-1", "msg_type": "execute_request", "username": "t",
                   "session": "shoal-test", "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False},
    }  # fmt: skip
    with connect(url, additional_headers=headers, open_timeout=60, max_size=None) as ws:
        ws.send(json.dumps(request))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=120))
            if message.get("parent_header", {}).get("msg_id") != "shoal-test-1":
                continue
            if message["msg_type"] == "execute_result":
                return str(message["content"]["data"]["text/plain"])
            if message["msg_type"] == "error":
                raise AssertionError(f"the kernel failed: {message['content']}")
    raise AssertionError(f"no result for {code!r} within 120 s")


@NEEDS_TENSORBOARD
def test_the_tensorboard_template_serves_its_log_directory_through_the_proxy(
    local: LocalCluster,
) -> None:
    job = local.submit(template("tensorboard"))
    try:
        prefix = f"/proxy/{job}/train/0/tb/"
        page = wait_until_served(local, job, "train", proxied(local, prefix))
        assert "<tf-tensorboard" in page.text or "TensorBoard" in page.text, page.text[:500]
        data = proxied(local, prefix + "data/logdir")
        logdir = httpx.get(data, headers=bearer(local), timeout=60)
        assert logdir.status_code == 200, logdir.text
        assert logdir.json()["logdir"].endswith("/logs")
        anonymous = httpx.get(proxied(local, prefix), timeout=30)
        assert anonymous.status_code == 401
    finally:
        local.client.stop(job)
