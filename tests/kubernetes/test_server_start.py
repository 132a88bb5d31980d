"""`shoal server start --kubernetes`: the server on the network (HTTPS) with the Kubernetes agent
as its child; the agent ends with the server, however the server ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from shoal.client import ShoalClient
from tests.kubernetes.conftest import NAMESPACE
from tests.kubernetes.harness import ControlPlane, Kwok, fake_node, free_port, wait_for

# one worker runs the whole module: its cluster is started once (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("kubernetes-server-start")


def shoal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def server(
    plane: ControlPlane, kwok: Kwok, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], ShoalClient, Path]]:
    plane.core().create_node(fake_node("kw-start", gpus=2))
    home = tmp_path / "server-home"
    initialised = shoal("server", "init", "--home", str(home), "--host", "127.0.0.1")
    assert initialised.returncode == 0, initialised.stderr
    kubeconfig = plane.service_account_kubeconfig(NAMESPACE, "shoal")
    port = free_port()
    argv = [
        sys.executable, "-m", "shoal", "server", "start", "--home", str(home),
        "--host", "127.0.0.1", "--port", str(port), "--proxy-port", "0", "--kubernetes",
        "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
    ]  # fmt: skip
    with open(tmp_path / "server.out", "ab") as out:
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    client = ShoalClient(
        f"https://127.0.0.1:{port}",
        (home / "admin.token").read_text().strip() if (home / "admin.token").exists() else None,
        ca=str(home / "pki" / "ca.crt"),
    )
    try:

        def answering() -> bool:
            if process.poll() is not None:  # said now, with its output, not after a minute
                output = (tmp_path / "server.out").read_text(errors="replace")
                raise AssertionError(f"the server exited {process.returncode}:\n{output}")
            return (home / "admin.token").exists() and client.health()

        try:
            wait_for(answering, 90, "the server")
        except TimeoutError as exc:
            output = (tmp_path / "server.out").read_text(errors="replace")
            raise AssertionError(f"{exc}; its output:\n{output[-3000:]}") from None
        client = ShoalClient(
            client.url, (home / "admin.token").read_text().strip(), ca=str(home / "pki" / "ca.crt")
        )
        yield process, client, home
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        plane.core().delete_node("kw-start")


def agent_children(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children() if "kubernetes" in " ".join(p.cmdline())]
    except psutil.NoSuchProcess:
        return []


def test_the_server_runs_jobs_as_pods_and_its_agent_ends_with_it(
    server: tuple[subprocess.Popen[bytes], ShoalClient, Path],
) -> None:
    process, client, home = server
    wait_for(lambda: any(n["name"] == "kw-start" for n in client.nodes()), 60, "the Node in shoal")
    assert (home / "kubernetes.token").stat().st_mode & 0o777 == 0o600
    (child,) = agent_children(process.pid)
    text = (
        "version: 1\nname: on-k8s\nroles:\n  w:\n    resources: {gpu: 1}\n    command: sleep 60\n"
    )
    job_id = client.submit(text)[0]["id"]

    def running() -> bool:
        tasks = client.job(job_id)["tasks"]
        return bool(tasks) and tasks[0]["state"] == "RUNNING"

    wait_for(running, 60, "the job's Pod running")
    client.stop(job_id)
    # kill -9 the server: its agent reads the end of its pipe and stops too
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)
    wait_for(
        lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, 20, "agent end"
    )


def test_bad_kubernetes_options_are_refused_before_anything_starts(tmp_path: Path) -> None:
    assert shoal("server", "init", "--home", str(tmp_path), "--host", "127.0.0.1").returncode == 0
    done = shoal(
        "server", "start", "--home", str(tmp_path), "--host", "127.0.0.1", "--kubernetes",
        "--kubeconfig", str(tmp_path / "nope.yaml"), "--image-pull-policy", "Sometimes",
    )  # fmt: skip
    assert done.returncode == 1 and "--image-pull-policy Sometimes" in done.stderr, done.stderr
    done = shoal("up", "--kubernetes", "--kubeconfig", str(tmp_path / "missing"))
    assert done.returncode == 1 and "--kubeconfig" in done.stderr and "no such file" in done.stderr
    done = shoal("up", "--namespace", "x")
    assert done.returncode == 1 and "go with --kubernetes" in done.stderr
