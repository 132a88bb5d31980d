"""Container jobs in cluster mode: each namespace host is a machine with its own podman store;
after `shoal image push` on the admin's machine, a 2-role job in the python image runs on two
hosts (each agent fetches the image from the server and loads it) and its actors find the
learner through their host lists."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from shoal.agent.runtimes.container import podman_problem
from tests.agent.limits_helpers import cgroups_refused
from tests.multihost.conftest import MakeRack
from tests.multihost.netns import namespaces_usable
from tests.multihost.rack import Rack

PYTHON = "localhost/shoal-test/python:bookworm"  # made by scripts/containers-setup.sh
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rl-actor-learner"
PROBLEM = namespaces_usable() or podman_problem("podman") or cgroups_refused()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"cannot run this here: {PROBLEM}")

JOB = f"""\
version: 1
name: rl-in-containers
code_dir: {EXAMPLE}
runtime: container
roles:
  learner:
    image: {PYTHON}
    resources: {{cpu: 0.5, memory: 512Mi}}
    command: python learner.py --iterations 8
    completion: {{min_succeeded: 1}}
  actor:
    instances: 2
    image: {PYTHON}
    resources: {{cpu: 0.5, memory: 256Mi}}
    command: python actor.py
    completion: {{min_failed: -1}}
    retries: 2
"""


def _own_podman_store(rack: Rack, node: str) -> dict[str, str]:
    """The agent's environment with a podman store of its own, as on a machine of its own."""
    home = rack.agent_home(node)
    conf = home / "storage.conf"
    conf.write_text(
        "[storage]\n"
        'driver = "overlay"\n'
        f'graphroot = "{home}/podman-storage"\n'
        f'runroot = "{home}/podman-run"\n'
    )
    return {**rack.env, "CONTAINERS_STORAGE_CONF": str(conf)}


def _images_in(env: dict[str, str], scratch: Path) -> str:
    return subprocess.run(
        ["podman", "images", "--no-trunc", "--format", "{{.ID}}"],
        env=env,
        cwd=scratch,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.long  # `make test-long` (the default run has this feature's other tests)
def test_a_container_job_on_two_hosts_after_an_image_push(
    make_rack: MakeRack, tmp_path: Path
) -> None:
    rack = make_rack(nodes=2)
    stores = {}
    for node in ("n1", "n2"):
        rack.kill(rack.agents[node])
        stores[node] = _own_podman_store(rack, node)
        rack.start_agent(node, env=stores[node])
    for node in ("n1", "n2"):
        rack.wait_state(node, "READY", 30)
    pushed = rack.shoal("image", "push", PYTHON, "-o", "json", timeout=600)
    assert pushed.returncode == 0, pushed.stderr
    image_id = json.loads(pushed.stdout)["imageId"]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(JOB)
    submitted = rack.shoal("job", "submit", str(job_file), "-o", "json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = str(json.loads(submitted.stdout)["id"])
    job = rack.admin.wait(job_id, timeout_s=420, poll_s=0.5)
    assert job["state"] == "SUCCEEDED", f"{job}\n{rack.tail_logs()}"
    tasks = rack.admin.job(job_id)["tasks"]
    assert {t["node"] for t in tasks} == {"n1", "n2"}, tasks
    for node in ("n1", "n2"):  # each machine loaded the pushed image into its own store
        assert image_id.removeprefix("sha256:") in _images_in(stores[node], tmp_path)
