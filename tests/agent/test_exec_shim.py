"""The exec shim (shoal.agent.exec_shim): it passes its command's end on as its own, and an exec
session never outlives the agent that started it (issue 24: `shoal job exec` used to)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from shoal.agent.exec_relay import SHIM


def _shim(*argv: str) -> list[str]:
    return [*SHIM, "-", "--", *argv]


def test_the_shim_ends_as_its_command_did() -> None:
    assert subprocess.run(_shim("sh", "-c", "exit 3"), check=False).returncode == 3
    killed = subprocess.run(_shim("sh", "-c", "kill -TERM $$"), check=False)
    assert killed.returncode == -signal.SIGTERM
    missing = subprocess.run(_shim("no-such-command-9e1"), capture_output=True, check=False)
    assert missing.returncode == 127 and b"cannot run" in missing.stderr


def _marked(marker: bytes) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as handle:
                    if marker in handle.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
    return found


def test_a_session_ends_when_its_agent_is_killed() -> None:
    marker = f"SHOAL_EXEC_SESSION=t-{uuid.uuid4().hex}"
    command = _shim("env", marker, "sh", "-c", "sleep 300 & setsid sleep 300 & wait")
    agent = subprocess.Popen(  # stands in for the agent: the shim's parent
        [sys.executable, "-c",
         "import subprocess, sys, time\n"
         f"subprocess.Popen({command!r}, start_new_session=True)\n"
         "time.sleep(300)\n"],
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while len(_marked(marker.encode())) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_marked(marker.encode())) >= 3  # sh and its two sleeps (one in a new session)
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _marked(marker.encode()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _marked(marker.encode()) == []
    finally:
        for pid in _marked(marker.encode()):
            os.kill(pid, signal.SIGKILL)
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
