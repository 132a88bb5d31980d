"""Container jobs through the whole product (server, scheduler, agent, podman, real cgroups):
the actor/learner example in the python image, after `shoal image push`, succeeds with its host
lists; a stopped container job leaves no container, cgroup or process behind; a task over its
memory in a container is OOM with the diagnostic."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from shoal.agent.limits import instance_name
from shoal.agent.runtimes.container import podman_problem
from tests.agent.limits_helpers import cgroups_refused
from tests.integration.conftest import LocalCluster
from tests.integration.conftest import local_cli as shoal
from tests.integration.test_local_mode import native

PYTHON = "localhost/shoal-test/python:bookworm"  # made by scripts/containers-setup.sh
BUSYBOX = "localhost/shoal-test/busybox:local"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rl-actor-learner" / "container.yaml"
PROBLEM = podman_problem(shutil.which("podman")) or cgroups_refused()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no containers here: {PROBLEM}")


def _push(cluster: LocalCluster, image: str) -> None:
    pushed = shoal(cluster, "image", "push", image)
    assert pushed.returncode == 0, pushed.stderr


def test_the_actor_learner_example_runs_in_containers_after_an_image_push(
    local: LocalCluster,
) -> None:
    _push(local, PYTHON)
    submitted = shoal(
        local, "job", "submit", str(EXAMPLE), "--param", "iterations=10", "-o", "json"
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    job = local.wait(job_id, timeout_s=240)
    assert job["state"] == "SUCCEEDED", (job, local.log(job_id, "learner", 0, "stderr"))
    tasks = local.client.job(job_id)["tasks"]
    assert {t["role"] for t in tasks} == {"learner", "actor"} and len(tasks) == 4
    learner_log = local.log(job_id, "learner")
    assert "actor" in learner_log.lower() or learner_log.strip(), learner_log
    for task in tasks:
        assert task["usage"].get("memoryLimitMiB") in (512, 256)


def _cgroup_dirs(agent_home: Path) -> list[Path]:
    group = instance_name(agent_home)
    return [p for p in Path("/sys/fs/cgroup").glob(f"**/{group}/*") if p.is_dir()]


def test_stopping_a_container_job_leaves_no_container_cgroup_or_process(
    local: LocalCluster, tmp_path: Path
) -> None:
    _push(local, BUSYBOX)
    roles = (
        f"w:\n  image: {BUSYBOX}\n  resources: {{cpu: 0.5, memory: 128Mi}}\n  command: sleep 300\n"
    )
    job_id = local.submit(native("sleeper", roles, "runtime: container\n"))
    local.wait_for(lambda: local.output_so_far(job_id, "w") == "" and _running(local, job_id), 120)
    pids = _container_pids(local, job_id, tmp_path)
    assert pids, "no container runs the task"
    assert local.client.stop(job_id)
    job = local.wait(job_id, timeout_s=60)
    assert job["state"] == "STOPPED"
    assert not _containers(local, job_id, tmp_path)
    assert not _cgroup_dirs(local.home / "agent")
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} outlived the stop"
        time.sleep(0.1)


def test_a_container_task_over_its_memory_is_oom(local: LocalCluster) -> None:
    _push(local, PYTHON)
    command = "python -c 'b = bytearray(500 << 20)'"
    roles = (
        f"hog:\n  image: {PYTHON}\n  resources: {{cpu: 1, memory: 192Mi}}\n  command: {command}\n"
    )
    job_id = local.submit(native("hog", roles, "runtime: container\n"))
    assert local.wait(job_id, timeout_s=120)["state"] == "FAILED"
    task = local.client.job(job_id)["tasks"][0]
    assert task["exitClass"] == "OOM" and task["exitCode"] == -1200
    assert "killed by its memory limit of 192 MiB" in task["diagnostics"]


def _running(cluster: LocalCluster, job_id: str) -> bool:
    tasks = cluster.client.job(job_id)["tasks"]
    return bool(tasks) and all(t["state"] == "RUNNING" for t in tasks)


def _containers(cluster: LocalCluster, job_id: str, scratch: Path) -> list[str]:
    """The containers of ``job_id`` of this cluster's agent (job ids repeat across clusters)."""
    agent = instance_name(cluster.home / "agent")
    filters = ["--filter", f"label=shoal.job={job_id}", "--filter", f"label=shoal.agent={agent}"]
    listed = subprocess.run(
        ["podman", "ps", "--all", "--quiet", *filters],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def _container_pids(cluster: LocalCluster, job_id: str, scratch: Path) -> list[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for container in _containers(cluster, job_id, scratch):
            inspected = subprocess.run(
                ["podman", "inspect", "--format", "{{.State.Pid}}", container],
                cwd=scratch,
                capture_output=True,
                text=True,
                check=False,
            )
            pid = int(inspected.stdout.strip() or 0)
            if pid > 0:
                return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
        time.sleep(0.2)
    return []
