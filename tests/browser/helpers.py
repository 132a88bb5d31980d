"""Jobs for the browser tests, made and watched through the API (as the admin unless a client
of another user is given)."""

from __future__ import annotations

import time

import httpx


def job_file(
    name: str, command: str = "sleep 600", cpu: float = 1, gpu: int = 0, instances: int = 1
) -> str:
    return f"""\
version: 1
name: {name}
roles:
  main:
    instances: {instances}
    resources: {{cpu: {cpu}, memory: 128Mi, gpu: {gpu}}}
    command: {command!r}
"""


def submit(api: httpx.Client, spec: str) -> str:
    answer = api.post("/api/v1/jobs", json={"spec": spec})
    assert answer.status_code == 201, answer.text
    return str(answer.json()[0]["id"])


def state(api: httpx.Client, job: str) -> str:
    return str(api.get(f"/api/v1/jobs/{job}").json()["state"])


def wait_state(api: httpx.Client, job: str, states: set[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if state(api, job) in states:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job} did not reach {states} in {timeout_s}s")


def stop(api: httpx.Client, *jobs: str) -> None:
    for job in jobs:
        api.post(f"/api/v1/jobs/{job}/stop")
    for job in jobs:
        wait_state(api, job, {"STOPPED", "SUCCEEDED", "FAILED"})
