"""The container row of bench/launch.py: submit → task started and submit → job done for a
trivial container job, beside the same job as a process and ``podman run`` measured alone, all
in one run on one machine (so the runtime's own overhead is their difference).

    .venv/bin/python bench/launch.py --container-jobs 20     # part of the launch benchmark

Needs podman and the test images (``make containers``); says so and skips the row otherwise.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from shoal.client import ShoalClient

IMAGE = "localhost/shoal-test/busybox:local"
JOB = (
    "version: 1\nname: {name}\n{runtime}roles:\n  t:\n{image}"
    "    resources: {{cpu: 1, memory: 256Mi}}\n    command: 'true'\n"
)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _job(name: str, container: bool) -> str:
    if not container:
        return JOB.format(name=name, runtime="", image="")
    return JOB.format(name=name, runtime="runtime: container\n", image=f"    image: {IMAGE}\n")


def unavailable() -> str | None:
    podman = shutil.which("podman")
    if podman is None:
        return "podman is not installed (make containers)"
    with tempfile.TemporaryDirectory() as scratch:
        found = subprocess.run(
            [podman, "image", "exists", IMAGE], cwd=scratch, capture_output=True, check=False
        )
    return None if found.returncode == 0 else f"{IMAGE} is not built (make containers)"


def push(client: ShoalClient) -> None:
    """The busybox image into the cluster, as `shoal image push` does it."""
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "image.tar"
        subprocess.run(
            ["podman", "save", "--quiet", "--format", "docker-archive", "-o", str(archive), IMAGE],
            cwd=scratch,
            check=True,
        )
        client.push_image(IMAGE, archive)


def submit_to_done(client: ShoalClient, count: int, container: bool) -> dict[str, list[float]]:
    """Sequential jobs on an idle cluster: submit → task started, submit → job finished."""
    started, done = [], []
    kind = "container" if container else "process"
    for i in range(count):
        submitted = time.time()
        job_id = client.submit(_job(f"bench-{kind}-{i}", container))[0]["id"]
        job = client.wait(job_id, poll_s=0.01, timeout_s=120)
        finished = time.time()
        if job["state"] != "SUCCEEDED":
            raise SystemExit(f"{kind} job {job_id} ended {job['state']}: {job.get('diagnostics')}")
        task = client.job(job_id)["tasks"][0]
        started.append(task["startedAt"] - submitted)
        done.append(finished - submitted)
    return {"started": started, "done": done}


def podman_alone(count: int) -> list[float]:
    """``podman run --rm`` of the same image and command, without shoal."""
    took = []
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(count):
            began = time.time()
            subprocess.run(
                ["podman", "run", "--rm", "--pull", "never", "--network", "host", IMAGE, "true"],
                cwd=scratch,
                check=True,
                capture_output=True,
            )
            took.append(time.time() - began)
    return took


def measure(client: ShoalClient, count: int) -> dict[str, object]:
    """The row's figures, in ms; {"skipped": why} when containers cannot run here."""
    problem = unavailable()
    if problem is not None:
        return {"skipped": problem}
    push(client)
    process = submit_to_done(client, count, container=False)
    container = submit_to_done(client, count, container=True)
    alone = podman_alone(count)

    def ms(values: list[float], q: float) -> float:
        return round(_percentile(values, q) * 1000, 1)

    overhead = statistics.median(container["done"]) - statistics.median(process["done"])
    return {
        "jobs": count,
        "process_started_p50_ms": ms(process["started"], 0.5),
        "process_started_p99_ms": ms(process["started"], 0.99),
        "process_done_p50_ms": ms(process["done"], 0.5),
        "process_done_p99_ms": ms(process["done"], 0.99),
        "container_started_p50_ms": ms(container["started"], 0.5),
        "container_started_p99_ms": ms(container["started"], 0.99),
        "container_done_p50_ms": ms(container["done"], 0.5),
        "container_done_p99_ms": ms(container["done"], 0.99),
        "podman_alone_p50_ms": ms(alone, 0.5),
        "podman_alone_p99_ms": ms(alone, 0.99),
        "container_minus_process_p50_ms": round(overhead * 1000, 1),
    }


def rows(results: dict[str, object]) -> list[tuple[str, str]]:
    if "skipped" in results:
        return [("container row", f"skipped: {results['skipped']}")]
    labels = {
        "process_started": "process job: submit → started",
        "process_done": "process job: submit → done",
        "container_started": "container job: submit → started",
        "container_done": "container job: submit → done",
        "podman_alone": "podman run --rm alone",
    }
    table = [
        (f"{label}, p50 / p99", f"{results[key + '_p50_ms']} / {results[key + '_p99_ms']} ms")
        for key, label in labels.items()
    ]
    overhead = f"{results['container_minus_process_p50_ms']} ms"
    return [*table, ("container − process, submit → done p50", overhead)]
