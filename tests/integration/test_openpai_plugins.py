"""OpenPAI runtime plugins on a real local cluster (server, agent, tasks as child processes):
``cmd`` pre/post commands run in order around the task's commands, a failing pre-command fails
the task with a reason its diagnostics name, and ``git`` clones before the commands."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.conftest import LocalCluster, local_cli

JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{type: dockerimage, name: img, uri: python:3.11}}
taskRoles:
  worker:
    instances: 1
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 256, gpu: 0}}
    commands: [{command}]
extras:
  com.microsoft.pai.runtimeplugin:
{plugins}"""

CMD = """    - plugin: cmd
      parameters:
        preCommands: [echo pre0, {second}]
        postCommands: [echo post0, echo post1]
"""


def test_cmd_pre_and_post_commands_run_in_order_around_the_commands(
    cluster: LocalCluster,
) -> None:
    text = JOB.format(name="cmd-ok", command="echo main", plugins=CMD.format(second="echo pre1"))
    job = cluster.submit(text)
    assert cluster.wait(job)["state"] == "SUCCEEDED"
    assert cluster.log(job, "worker") == "pre0\npre1\nmain\npost0\npost1\n"


def test_a_failing_pre_command_fails_the_task_naming_it(cluster: LocalCluster) -> None:
    plugins = CMD.format(second="sh -c 'exit 3'")
    job = cluster.submit(JOB.format(name="cmd-fails", command="echo main", plugins=plugins))
    assert cluster.wait(job)["state"] == "FAILED"
    (task,) = cluster.client.job(job)["tasks"]
    assert (task["exitClass"], task["exitCode"]) == ("USER_FAILURE", 3)
    reason = "runtime plugin cmd: preCommands[1] `sh -c 'exit 3'` exited 3"
    assert task["diagnostics"] == reason, task
    assert cluster.log(job, "worker") == "pre0\n"  # neither the commands nor post-commands ran
    assert reason in cluster.log(job, "worker", stream="stderr")
    status = local_cli(cluster, "job", "status", job)  # what the user reads first
    assert f"worker/0 failed: {reason}" in status.stdout, status.stdout


def test_git_clones_the_repository_before_the_commands(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    source, bare = tmp_path / "source", tmp_path / "repo.git"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(source)], check=True)
    (source / "train.py").write_text("print('trained from git')\n")
    subprocess.run([*git, "-C", str(source), "add", "."], check=True)
    subprocess.run([*git, "-C", str(source), "commit", "-qm", "first"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True)
    plugins = f"""    - plugin: git
      parameters:
        repo_uri: file://{bare}
        options: [--quiet, --branch main]
        clone_dir: $SHOAL_WORKDIR/src
"""
    command = 'cd "$SHOAL_WORKDIR/src" && git log --format=%s && cat train.py'
    text = JOB.format(name="git-clone", command=f"'{command}'", plugins=plugins)
    # the repository belongs to this test's user, not the task's: git refuses such a one unless
    # its configuration says it is safe (as for a repository on a shared filesystem)
    config = tmp_path / "gitconfig"
    config.write_text("[safe]\n\tdirectory = *\n")
    config.chmod(0o644)
    job = cluster.submit(text, env={"GIT_CONFIG_GLOBAL": str(config)})
    final = cluster.wait(job)
    assert final["state"] == "SUCCEEDED", (final, cluster.log(job, "worker", stream="stderr"))
    assert cluster.log(job, "worker") == "first\nprint('trained from git')\n"
