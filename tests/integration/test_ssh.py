"""SSH into tasks with OpenPAI's ssh runtime plugin (docs/ssh.md), on a real local cluster (server
and agent processes, tasks as their own users) with the real OpenSSH server and client: two tasks
of a ``jobssh`` job log in to each other after the ``sshbarrier``, and a user's registered key logs
in to a task as the task's user, checked against the job's published host key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.local.supervisor import stop_local
from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster, local_cli, start_cluster

pytestmark = pytest.mark.skipif(
    shutil.which("ssh") is None or not Path("/usr/sbin/sshd").exists(),
    reason="OpenSSH's client and server are not installed (make system-deps)",
)

JOB = """\
protocolVersion: 2
name: {name}
type: job
taskRoles:
  master:
    instances: 1
    completion: {{minSucceededInstances: 1}}
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 256, gpu: 0}}
    commands:
      - echo "me $(id -u)"
      - echo "peer $(ssh worker-0 id -u)"
      - echo "peer-env $(ssh worker-0 'echo $PAI_CURRENT_TASK_ROLE_NAME')"
  worker:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 256, gpu: 0}}
    commands:
      - echo "worker $(id -u)"
      - sleep 300
prerequisites:
  - {{name: image, type: dockerimage, uri: 'python:3.11'}}
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: ssh
      parameters: {{jobssh: true, sshbarrier: true, sshbarrierTimeout: 2}}
"""

SLEEPER = """\
protocolVersion: 2
name: {name}
type: job
taskRoles:
  box:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 256, gpu: 0}}
    commands:
      - echo "box $(id -u)"
      - sleep 300
prerequisites:
  - {{name: image, type: dockerimage, uri: 'python:3.11'}}
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: ssh
      parameters: {{userssh: {{}}}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    home = tmp_path_factory.mktemp("ssh") / "shoal-home"
    running = start_cluster(home)
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


def line(text: str, prefix: str) -> str:
    found = [row.split(" ", 1)[1] for row in text.splitlines() if row.startswith(prefix + " ")]
    assert found, f"no {prefix!r} line in:\n{text}"
    return found[0]


def test_two_tasks_of_a_jobssh_job_ssh_to_each_other(cluster: LocalCluster) -> None:
    job = cluster.submit(JOB.format(name="pair"), format="pai")
    done = cluster.wait(job, timeout_s=120)
    out = cluster.log(job, "master")
    assert done["state"] == "SUCCEEDED", (done, out, cluster.log(job, "master", stream="stderr"))
    me = line(out, "me")
    assert int(me) >= 2_000_000_000  # the task's own uid (pool mode), never the agent's
    assert line(out, "peer") == me  # the worker's sshd logged the job's user in
    assert line(out, "peer-env") == "worker"  # an ssh session sees the task's variables
    assert "every task of the job answers ssh" in cluster.log(job, "master", stream="stderr")


def test_a_registered_key_logs_in_as_the_tasks_user(cluster: LocalCluster, tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cluster.client.add_ssh_key((tmp_path / "id_ed25519.pub").read_text(), name="laptop")
    job = cluster.submit(SLEEPER.format(name="box"), format="pai")
    cluster.wait_for(lambda: "box " in cluster.output_so_far(job, "box"), timeout_s=60)
    uid = line(cluster.output_so_far(job, "box"), "box")
    info = cluster.client.job_ssh(job)
    (task,) = info["tasks"]
    known = tmp_path / "known_hosts"
    known.write_text(f"{info['host_key_alias']} {info['host_public_key']}\n")
    argv = [
        "ssh", "-i", str(key), "-p", str(task["port"]),
        "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
        "-o", f"HostKeyAlias={info['host_key_alias']}",
        f"{info['login']}@{task['address']}", "id -u; pwd",
    ]  # fmt: skip
    deadline = time.monotonic() + 30
    while True:  # the task prints before its sshd may answer
        ran = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if ran.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert ran.returncode == 0, ran.stderr
    remote_uid, remote_dir = ran.stdout.split()
    assert remote_uid == uid
    assert remote_dir.endswith(f"/box-0/{task['attempt_id']}") or remote_dir  # its directory
    # a key nobody registered is refused
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    refused = subprocess.run(
        [*argv[:2], str(other), *argv[3:]], capture_output=True, text=True, timeout=30, check=False
    )
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
    cluster.client.stop(job)


def test_shoal_job_ssh_reaches_a_task_through_the_server(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cluster.client.add_ssh_key((tmp_path / "id_ed25519.pub").read_text(), name="tunnel")
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    job = cluster.submit(SLEEPER.format(name="tunnelled"), format="pai")
    cluster.wait_for(lambda: "box " in cluster.output_so_far(job, "box"), timeout_s=60)
    uid = line(cluster.output_so_far(job, "box"), "box")
    args = ["job", "ssh", job, "--task", "box/0", "--"]
    args += ["-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "id", "-u"]
    deadline = time.monotonic() + 30
    while True:  # the task prints before its sshd may answer
        ran = local_cli(cluster, *args, timeout=60)
        if ran.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == uid
    # the host key is checked: job's known host key, met on another job's task, is refused
    other = cluster.submit(SLEEPER.format(name="other"), format="pai")
    cluster.wait_for(lambda: "box " in cluster.output_so_far(other, "box"), timeout_s=60)
    info = cluster.client.job_ssh(job)
    known = tmp_path / "known_hosts"
    known.write_text(f"{info['host_key_alias']} {info['host_public_key']}\n")
    proxy = f"{sys.executable} -m shoal --context local job port-forward {other} --stdio ssh"
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_HOME=str(cluster.home), SHOAL_CONFIG=str(cluster.home / "no-config.yaml"))
    argv = [
        "ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-o", f"ProxyCommand={proxy}", "-o", f"HostKeyAlias={info['host_key_alias']}",
        "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
        "-l", info["login"], "task", "id -u",
    ]  # fmt: skip
    refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert refused.returncode == 255, refused.stdout
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stderr, refused.stderr
    cluster.client.stop(job)
    cluster.client.stop(other)
