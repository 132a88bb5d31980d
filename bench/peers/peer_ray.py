"""Ray Jobs (``ray[default]`` in its own venv): a head node with ``--num-cpus SLOTS`` in a netns
with no route out (Ray probes 8.8.8.8:53 to find its address), driven by JobSubmissionClient from
inside the same namespace (``ray_client.py``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from peer_proc import Netns, log, run, spawn, stop_group

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-ray"
PYTHON = VENV / "bin" / "python"
TEMP_DIR = Path("/tmp/shoal-bench-ray")  # Ray's session dir; short, for its unix sockets
DASHBOARD = "http://127.0.0.1:8265"


def installed() -> bool:
    if not PYTHON.exists():
        return False
    probe = [str(PYTHON), "-c", "import ray.job_submission"]
    return run(probe, check=False, timeout=120).returncode == 0


def install() -> None:
    """python3 -m venv bench/peers/.venv-ray && pip install 'ray[default]', unless it works."""
    if installed():
        log(f"ray: {VENV} has ray[default]")
        return
    log(f"ray: creating {VENV} and installing ray[default] (a few hundred MB)")
    run([sys.executable, "-m", "venv", "--clear", str(VENV)], timeout=300)
    run([str(PYTHON), "-m", "pip", "install", "--quiet", "ray[default]"], timeout=1800)


def version() -> str:
    probe = [str(PYTHON), "-c", "import ray; print(ray.__version__)"]
    return "Ray " + run(probe, timeout=120).stdout.strip()


def ray_env(start_timeout_s: float | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{VENV / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    if start_timeout_s is not None:  # Ray fails a job still queued after 900 s by default
        env["RAY_JOB_START_TIMEOUT_SECONDS"] = str(int(start_timeout_s))
    return env


def head_command(slots: int) -> list[str]:
    return [
        str(VENV / "bin" / "ray"),
        "start",
        "--head",
        "--block",
        "--num-cpus",
        str(slots),
        "--node-ip-address",
        "127.0.0.1",
        "--port",
        "6379",
        "--include-dashboard",
        "true",
        "--dashboard-host",
        "127.0.0.1",
        "--dashboard-port",
        "8265",
        "--object-store-memory",
        str(256 << 20),
        "--temp-dir",
        str(TEMP_DIR),
        "--disable-usage-stats",
    ]


def client_command(args, scratch: Path) -> list[str]:
    return [
        str(PYTHON),
        str(HERE / "ray_client.py"),
        "--address",
        DASHBOARD,
        "--scratch",
        str(scratch),
        "--latency-jobs",
        str(args.latency_jobs),
        "--drain-jobs",
        str(args.drain_jobs),
        "--drain-timeout",
        str(args.drain_timeout),
    ]


def measure(args, scratch: Path) -> dict:
    """Start the head in its namespace, run the client there, stop everything, delete the netns."""
    netns = Netns("shoal-bench-ray", "198.18.2.1/32")
    head = None
    budget = 180 + 330 * (args.latency_jobs + 1) + args.drain_timeout + 120
    try:
        shutil.rmtree(TEMP_DIR, ignore_errors=True)
        netns.create()
        head_env = ray_env(start_timeout_s=args.drain_timeout + 600)
        head = spawn(
            [*netns.prefix(), *head_command(args.slots)], scratch / "ray-head.log", head_env
        )
        log(f"ray: head starting ({version()}), --num-cpus {args.slots}")
        client = subprocess.run(
            [*netns.prefix(), *client_command(args, scratch)],
            stdout=subprocess.PIPE,
            text=True,
            timeout=budget,
            check=False,
            env=ray_env(),
            stdin=subprocess.DEVNULL,
        )
        if client.returncode != 0:
            raise RuntimeError(f"ray_client.py exited {client.returncode}; see the output above")
        result = json.loads(client.stdout.strip().splitlines()[-1])
    finally:
        if head is not None:
            stop_group(head, grace_s=20.0)
        leftovers = netns.kill_all()
        if leftovers:
            log(f"ray: stopped {leftovers} leftover processes in the namespace")
        netns.delete()
        shutil.rmtree(TEMP_DIR, ignore_errors=True)
    result["version"] = version()
    result["running_means"] = "the entrypoint's first command (`date +%s.%N`) wrote its timestamp"
    result["tuning"] = (
        "RAY_JOB_START_TIMEOUT_SECONDS raised from 900 to the drain timeout + 600 s: with the "
        "default, jobs still queued after 15 min fail instead of running"
    )
    return result
