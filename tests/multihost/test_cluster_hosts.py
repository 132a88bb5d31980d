"""Cluster mode across machines: a server on one namespace host, agents on three others, each
joined over mutual TLS with a token, as docs/cluster.md walks an admin through it.

- a 2-role job spread over 3 hosts talks over TCP through its host lists and succeeds; every
  host's logs are readable from the server, and `job logs -f` follows tasks on every host;
- `kill -9` of the server while tasks run on three hosts: after its restart the job is there and
  its tasks finish, recorded with complete logs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.multihost.conftest import MakeRack
from tests.multihost.netns import namespaces_usable
from tests.multihost.rack import Rack

pytestmark = pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def rack(make_rack: MakeRack) -> Rack:
    return make_rack(nodes=3)


def _submit(rack: Rack, path: Path, *args: str) -> str:
    done = rack.shoal("job", "submit", str(path), "-o", "json", *args)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def test_actor_learner_over_three_hosts_with_every_hosts_logs(rack: Rack) -> None:
    job_id = _submit(rack, EXAMPLES / "rl-actor-learner" / "job.yaml", "--param", "iterations=15")
    follow = subprocess.Popen(
        [sys.executable, "-m", "shoal", "job", "logs", job_id, "-f"],
        env=rack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job = rack.admin.wait(job_id, timeout_s=180, poll_s=0.2)
    followed, errors = follow.communicate(timeout=60)
    assert job["state"] == "SUCCEEDED", f"{job}\n{rack.tail_logs()}"
    tasks = rack.admin.job(job_id)["tasks"]
    hosts = {t["node"] for t in tasks}
    assert hosts == {"n1", "n2", "n3"}, tasks  # 1 cpu per host: learner 1, actors 0.5 each
    for task in tasks:
        name = f"{task['role']}/{task['index']}"
        shown = rack.shoal("job", "logs", job_id, "--task", name)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.strip(), f"no log of {name} on {task['node']}"
        assert f"[{name}]" in followed, f"`job logs -f` did not follow {name}: {errors}"
    learner = rack.shoal("job", "logs", job_id, "--task", "learner/0").stdout
    assert "iteration" in learner.lower() or "return" in learner.lower(), learner[-500:]


LONG_JOB = """\
version: 1
name: three-hosts
roles:
  worker:
    instances: 3
    resources: {cpu: 1, memory: 64Mi}
    command: >-
      for i in $(seq 1 60); do echo "line $i of $SHOAL_TASK_INDEX on $SHOAL_NODE_NAME";
      sleep 0.1; done
"""


def test_kill_9_of_the_server_loses_nothing_and_tasks_finish_with_their_logs(
    make_rack: MakeRack, tmp_path: Path
) -> None:
    # The default --node-timeout (30 s, a lease of about 23 s), as an admin runs it: a restart of
    # the server takes 3-9 s on 2 busy cores, longer than the 8 s timeout's lease of about 4 s, and
    # fencing on a short lease is tested in test_cluster_failover.
    rack = make_rack(nodes=3, node_timeout_s=30.0)
    spec = tmp_path / "three-hosts.yaml"
    spec.write_text(LONG_JOB)
    job_id = _submit(rack, spec)
    rack.wait_for(
        lambda: all(t["state"] == "RUNNING" for t in rack.admin.job(job_id)["tasks"]),
        30,
        "every task running",
    )
    assert rack.server is not None
    rack.kill(rack.server)
    time.sleep(1.0)  # tasks go on writing while no server listens
    rack.start_server()
    rack.admin.close()
    rack._admin = None  # a new connection to the new server
    job = rack.admin.wait(job_id, timeout_s=90, poll_s=0.2)
    assert job["state"] == "SUCCEEDED", f"{job}\n{rack.tail_logs()}"
    tasks = rack.admin.job(job_id)["tasks"]
    assert {t["node"] for t in tasks} == {"n1", "n2", "n3"}
    for task in tasks:
        shown = rack.shoal("job", "logs", job_id, "--task", f"worker/{task['index']}")
        lines = [x for x in shown.stdout.splitlines() if x.startswith("line ")]
        expected = [f"line {i} of {task['index']} on {task['node']}" for i in range(1, 61)]
        assert lines == expected, shown.stdout[-800:]
