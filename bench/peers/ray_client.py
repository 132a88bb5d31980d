"""The Ray Jobs side of the benchmark: run with the Ray venv's python inside the Ray namespace.

    nsenter --net=/run/netns/shoal-bench-ray bench/peers/.venv-ray/bin/python \
        bench/peers/ray_client.py --address http://127.0.0.1:8265 --scratch DIR ...

Prints one JSON object on stdout: the raw latencies and the drain numbers. Progress goes to stderr.
"Running" here: the entrypoint's first command, ``date +%s.%N``, has written its timestamp.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

from ray.job_submission import JobStatus, JobSubmissionClient

TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}


def stamp_command(path: Path) -> str:  # the same command as peer_proc.stamp_command
    return f"date +%s.%N > {path}.tmp && mv {path}.tmp {path}"


def say(message: str) -> None:
    print(f"[ray-client {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def connect(address: str, timeout_s: float) -> JobSubmissionClient:
    """The dashboard takes a few seconds to come up after ``ray start``."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client = JobSubmissionClient(address)
            client.list_jobs()
            return client
        except Exception as exc:  # not up yet
            last = exc
            time.sleep(0.5)
    raise TimeoutError(f"the Ray dashboard at {address} did not answer: {last}")


def wait_file(path: Path, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return float(text)
        time.sleep(0.002)
    raise TimeoutError(f"{path} did not appear within {timeout_s:.0f}s")


def wait_terminal(client: JobSubmissionClient, job_id: str, timeout_s: float) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.get_job_status(job_id)
        if status in TERMINAL:
            return status
        time.sleep(0.01)
    raise TimeoutError(f"Ray job {job_id} did not finish within {timeout_s:.0f}s")


def submit(client: JobSubmissionClient, entrypoint: str, job_id: str) -> str:
    return client.submit_job(entrypoint=entrypoint, submission_id=job_id, entrypoint_num_cpus=1)


def measure_latency(client: JobSubmissionClient, scratch: Path, count: int, tag: str) -> list:
    """Sequential jobs on an idle head: submit → the entrypoint's first command ran."""
    latencies = []
    run = uuid.uuid4().hex[:8]
    for i in range(count):
        stamp = scratch / f"ray-{tag}-{i}"
        submitted = time.time()
        job_id = submit(client, stamp_command(stamp), f"{tag}-{run}-{i}")
        latencies.append(wait_file(stamp, 300.0) - submitted)
        status = wait_terminal(client, job_id, 300.0)
        if status != JobStatus.SUCCEEDED:
            raise RuntimeError(f"latency job {job_id} ended {status}")
    return latencies


def measure_drain(client: JobSubmissionClient, count: int, timeout_s: float, stall_s: float):
    """Submit ``count`` ``true`` jobs back to back; time until every one is terminal.

    Done-detection walks the jobs in submission order with one cheap ``get_job_status`` per 50 ms
    poll (``list_jobs`` returns every job and would load the dashboard heavily at 1,000 jobs). A
    job RUNNING for over ``stall_s`` (seen hung in "Runtime env is setting up" under load) is
    recorded as stuck and skipped, so one hung job cannot hold the clock until the timeout.
    """
    prefix = f"drain-{uuid.uuid4().hex[:8]}-"
    start = time.time()
    ids = [submit(client, "true", f"{prefix}{i}") for i in range(count)]
    submitted = time.time() - start
    say(f"submitted {count} jobs in {submitted:.1f}s")
    deadline = time.monotonic() + timeout_s
    statuses: dict = {}
    stuck: list[str] = []
    cursor, running_since = 0, None
    while cursor < count and time.monotonic() < deadline:
        status = client.get_job_status(ids[cursor])
        if status == JobStatus.RUNNING:
            running_since = running_since or time.monotonic()
        if status in TERMINAL or (running_since and time.monotonic() - running_since > stall_s):
            statuses[ids[cursor]] = status
            if status not in TERMINAL:
                stuck.append(ids[cursor])
            cursor, running_since = cursor + 1, None
            if cursor % 100 == 0:
                say(f"{cursor} of {count} finished after {time.time() - start:.0f}s")
            continue
        time.sleep(0.05)
    elapsed = time.time() - start  # unfinished jobs go with the head, which is stopped next
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[str(status.value)] = counts.get(str(status.value), 0) + 1
    counts["UNSEEN"] = count - len(statuses)  # not reached before the timeout
    failed = next((i for i, s in statuses.items() if s == JobStatus.FAILED), None)
    return {
        "drain_seconds": elapsed,
        "submit_seconds": submitted,
        "drain_succeeded": counts.get("SUCCEEDED", 0),
        "drain_statuses": counts,
        "drain_stuck": stuck,
        "first_failure": client.get_job_info(failed).message if failed else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", default="http://127.0.0.1:8265")
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--latency-jobs", type=int, default=50)
    parser.add_argument("--drain-jobs", type=int, default=1000)
    parser.add_argument("--drain-timeout", type=float, default=1800.0)
    parser.add_argument("--stall", type=float, default=600.0)
    args = parser.parse_args()
    client = connect(args.address, 120.0)
    say(f"connected; warm-up job, then {args.latency_jobs} latency jobs")
    measure_latency(client, args.scratch, 1, "warmup")
    latencies = measure_latency(client, args.scratch, args.latency_jobs, "lat")
    say(f"draining {args.drain_jobs} jobs")
    result = measure_drain(client, args.drain_jobs, args.drain_timeout, args.stall)
    result["latencies"] = latencies
    print(json.dumps(result))


if __name__ == "__main__":
    main()
