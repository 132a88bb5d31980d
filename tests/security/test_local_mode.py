"""Local mode started by root (`shoal up`), as the issue found it: a plain user's job must not read
the admin token, the agent token or the store, nor touch the agent's lease, even though every
directory above the cluster's home can be passed (as a home under /srv or /var/lib would be)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.client import ShoalClient
from shoal.local.supervisor import stop_local
from tests.integration.conftest import LocalCluster, start_cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks switch users only as root")
PROBE = """\
import json, os
home = os.environ["T_HOME"]
for name in ("admin.token", "agent.token", "shoal.db", "agent/lease", "agent/identity"):
    path = os.path.join(home, name)
    try:
        with open(path, "a" if name.endswith("lease") else "rb") as handle:
            said = "DONE"
    except OSError as exc:
        said = f"refused: {exc.strerror}"
    print(json.dumps({"target": name, "outcome": said}), flush=True)
print(json.dumps({"target": "uid", "outcome": os.getuid()}), flush=True)
"""
JOB = """\
version: 1
name: probe
env: {{T_HOME: "{home}"}}
roles:
  main:
    command: /usr/bin/python3 -c "import base64; exec(base64.b64decode('{code}'))"
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    home = tmp_path / "shoal-home"
    running = start_cluster(home, nodes=1)
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


def test_a_plain_users_job_cannot_reach_the_local_clusters_secrets(cluster: LocalCluster) -> None:
    made = cluster.client.create_user("mallory", admin=False, groups=[], password=None)
    mallory = ShoalClient(cluster.info.url, made["token"])
    code = base64.b64encode(PROBE.encode()).decode()
    job = mallory.submit(JOB.format(home=cluster.home, code=code))[0]["id"]
    done = mallory.wait(job, timeout_s=60)
    log = cluster.log(job, "main")
    assert done["state"] == "SUCCEEDED", (done, log)
    outcomes = {r["target"]: r["outcome"] for r in map(json.loads, log.splitlines())}
    assert outcomes["uid"] not in (0, os.geteuid()), outcomes
    for target in ("admin.token", "agent.token", "shoal.db", "agent/lease"):
        assert str(outcomes[target]).startswith("refused"), outcomes
    assert (cluster.home.stat().st_mode & 0o777) == 0o700
    mallory.close()
