"""The start barrier's sidecar script (src/shoal/kubernetes/barrier_script.py) as processes on
loopback: not ready while a peer is missing, ready on every side once all answer, its listener
kept after that, and SIGTERM ends it cleanly. The real node runs it in Pods
(test_real_node.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shoal.kubernetes import helpers
from tests.kubernetes.harness import free_port, wait_for


def ready(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code
    except httpx.HTTPError:
        return None


@pytest.fixture
def barriers(tmp_path: Path) -> Iterator[tuple[list[int], Path, list[subprocess.Popen[bytes]]]]:
    ports = [free_port(), free_port(), free_port()]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"127.0.0.1:{p} slots=1\n" for p in ports))
    started: list[subprocess.Popen[bytes]] = []
    yield ports, hostfile, started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def start(port: int, hostfile: Path, started: list[subprocess.Popen[bytes]]) -> None:
    env = {**os.environ, "SHOAL_BARRIER_PORT": str(port), "SHOAL_BARRIER_HOSTFILE": str(hostfile)}
    # as the Pod runs it: the script's text through `python3 -c`
    proc = subprocess.Popen([sys.executable, "-c", helpers.BARRIER_SCRIPT], env=env)
    started.append(proc)
    wait_for(lambda: ready(port) is not None, 15, f"the barrier on {port} listening")


def test_ready_only_once_every_peer_answers_and_the_listener_stays(
    barriers: tuple[list[int], Path, list[subprocess.Popen[bytes]]],
) -> None:
    ports, hostfile, started = barriers
    start(ports[0], hostfile, started)
    start(ports[1], hostfile, started)
    time.sleep(1.5)  # three rounds of probing: a peer is still missing
    assert [ready(p) for p in ports[:2]] == [503, 503]
    start(ports[2], hostfile, started)
    wait_for(lambda: all(ready(p) == 200 for p in ports), 15, "every barrier ready")
    time.sleep(0.5)
    assert all(ready(p) == 200 for p in ports)  # still listening after the barrier opened
    started[0].send_signal(signal.SIGTERM)
    assert started[0].wait(10) == 0
