"""Tasks run in the submitter's environment and directory, with ``--env`` and secrets filled in at
launch (issue 9, defects 3 and 11): real `shoal` CLI processes against a real local cluster."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import shoal
from shoal.client import ShoalError
from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster

PROBE = """version: 1
name: {name}
env: {{FROM_FILE: file, OVERRIDDEN: file}}
roles:
  main:
    command: |
      echo "python=$(python)"
      echo "venv=$VIRTUAL_ENV mine=${{MY_SHELL_VAR:-unset}}"
      echo "file=$FROM_FILE overridden=$OVERRIDDEN world=$WORLD_SIZE"
      echo "path=$PATH"
"""


def shoal_cli(
    cluster: LocalCluster, cwd: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """`shoal ARGS` run from ``cwd`` with ``env`` as its whole environment."""
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))
    sources = str(Path(shoal.__file__).resolve().parents[1])  # this checkout, from any cwd
    env = {**env, "PYTHONPATH": os.pathsep.join([sources, env.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "SHOAL_HOME": str(cluster.home)},
        cwd=cwd,
        check=False,
    )


@pytest.fixture
def user_shell(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A directory with a virtualenv-like ``bin/python`` of the user's (not shoal's), and the
    environment of a shell that activated it and exported a variable of its own."""
    venv = tmp_path / "user-venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\necho user-python\n")
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(
        PATH=f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        VIRTUAL_ENV=str(venv),
        MY_SHELL_VAR="shell-value-7f3a",
    )
    return tmp_path, env


def _run_probe(
    cluster: LocalCluster, shell: tuple[Path, dict[str, str]], name: str, *flags: str
) -> str:
    where, env = shell
    job_file = where / f"{name}.yaml"
    job_file.write_text(PROBE.format(name=name))
    result = shoal_cli(cluster, where, env, "job", "submit", str(job_file), "--wait", *flags)
    assert result.returncode == 0, result.stdout + result.stderr
    return cluster.log(name, "main")


def test_tasks_get_the_submitters_python_and_env_levels(
    cluster: LocalCluster, user_shell: tuple[Path, dict[str, str]]
) -> None:
    venv = user_shell[0] / "user-venv"
    default = _run_probe(cluster, user_shell, "default", "--env", "OVERRIDDEN=cli")
    assert "python=user-python\n" in default
    assert f"venv={venv} mine=unset\n" in default  # not an interpreter variable: not passed
    assert "file=file overridden=cli world=1\n" in default  # --env over the job file's env
    assert f"path={venv / 'bin'}:" in default  # the user's PATH, not shoal's Python first

    whole = _run_probe(cluster, user_shell, "whole", "--env-from-shell", "-e", "WORLD_SIZE=9")
    assert "mine=shell-value-7f3a\n" in whole
    assert "world=1\n" in whole  # the env contract wins over --env

    bare = _run_probe(cluster, user_shell, "bare", "--no-inherit-env")
    shoal_bin = str(Path(sys.executable).parent)
    assert f"path={shoal_bin}:" in bare and "python=user-python" not in bare
    assert "venv= mine=unset\n" in bare

    # the shell's values are stored with the job but never shown
    for name in ("default", "whole", "bare"):
        shown = json.dumps([cluster.client.job(name), cluster.client.events(name)])
        assert "shell-value-7f3a" not in shown and str(venv) not in shown


def test_bad_env_flags_are_one_clear_error(
    cluster: LocalCluster, user_shell: tuple[Path, dict[str, str]]
) -> None:
    where, env = user_shell
    job_file = where / "job.yaml"
    job_file.write_text(PROBE.format(name="bad"))
    bad = shoal_cli(cluster, where, env, "job", "submit", str(job_file), "--env", "1X=2")
    assert bad.returncode != 0 and "--env" in bad.stderr and "'1X=2'" in bad.stderr
    both = shoal_cli(
        cluster, where, env, "job", "submit", str(job_file), "--env-from-shell", "--no-inherit-env"
    )
    assert both.returncode != 0 and "--no-inherit-env" in both.stderr
    assert cluster.client.jobs(None) == []  # nothing was submitted
    with pytest.raises(ShoalError) as caught:
        cluster.client.submit(PROBE.format(name="api"), env={"A-B": "1"})
    assert caught.value.status == 400 and "env: 'A-B'" in caught.value.message


PAI_TRAIN = """protocolVersion: 2
name: pai-train
type: job
prerequisites:
  - {type: dockerimage, name: img, uri: python:3.11}
taskRoles:
  train:
    instances: 1
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 512, gpu: 0}
    commands:
      - python train.py
"""

TRAIN_PY = """import os, pathlib
here = os.getcwd()
hostfile = pathlib.Path(os.environ["SHOAL_WORKDIR"], ".shoal", "hostfile")
print(f"trained in {here}; private dir elsewhere: {os.environ['SHOAL_WORKDIR'] != here}; "
      f"hostfile: {hostfile.exists()}")
"""


def test_openpai_job_without_code_dir_runs_in_the_submit_directory(
    cluster: LocalCluster, user_shell: tuple[Path, dict[str, str]]
) -> None:
    where, env = user_shell
    project = where / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN_PY)
    (project / "job.yaml").write_text(PAI_TRAIN)
    env = {**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}  # a real python
    validated = shoal_cli(cluster, project, env, "job", "validate", "job.yaml")
    assert validated.returncode == 0, validated.stderr
    assert "no code directory" in validated.stderr and str(project) in validated.stderr
    submitted = shoal_cli(cluster, project, env, "job", "submit", "job.yaml", "--wait")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "no code directory" in submitted.stderr and str(project) in submitted.stderr
    assert cluster.log("pai-train", "train") == (
        f"trained in {project}; private dir elsewhere: True; hostfile: True\n"
    )


SECRET = "s3cr3t-value-91c2"
PAI_SECRET = f"""protocolVersion: 2
name: pai-secret
type: job
prerequisites:
  - {{type: dockerimage, name: img, uri: python:3.11}}
secrets: {{token: {SECRET}}}
taskRoles:
  main:
    instances: 1
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0}}
    commands:
      - echo "<% $secrets.token %>" > "OUT/pai-secret.txt"
      - echo done
"""
NATIVE_SECRET = f"""version: 1
name: native-secret
secrets: {{token: {SECRET}}}
roles:
  main:
    command: 'echo "{{{{ secrets.token }}}}" > "OUT/native-secret.txt"'
"""


def test_secrets_are_filled_in_at_launch_and_shown_nowhere(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"  # where the tasks, running as their user, write what they got
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    texts = [text.replace("OUT/", f"{out}/") for text in (PAI_SECRET, NATIVE_SECRET)]
    jobs = [cluster.wait(cluster.submit(text)) for text in texts]
    for job in jobs:
        assert job["state"] == "SUCCEEDED", job
        written = (out / f"{job['name']}.txt").read_text()
        assert written == SECRET + "\n"  # rendered for the shell
    token = (cluster.home / "admin.token").read_text().strip()
    shown = [json.dumps(cluster.client.job(str(j["id"]))) for j in jobs]
    shown += [json.dumps(cluster.client.events(str(j["id"]))) for j in jobs]
    shown += [json.dumps(cluster.client.jobs(None))]
    headers = {"Authorization": f"Bearer {token}"}
    for path in ("/api/v2/jobs/admin~pai-secret/config", "/api/v2/jobs/admin~pai-secret"):
        response = httpx.get(cluster.info.url + path, headers=headers)
        assert response.status_code == 200
        shown.append(response.text)
    assert "<% $secrets.token %>" in shown[-2]  # the config is there, masked
    for text in shown:
        assert SECRET not in text
    for log in ("server.log", "agent.log"):
        assert SECRET not in (cluster.home / log).read_text()
    with sqlite3.connect(cluster.home / "shoal.db") as db:
        commands = [row[0] for row in db.execute("SELECT spec FROM jobs")]
    assert len(commands) == 2 and all(SECRET not in c and "secrets" in c for c in commands)


def test_a_missing_secret_is_refused_at_submit_naming_it(cluster: LocalCluster) -> None:
    with pytest.raises(ShoalError) as caught:
        cluster.submit(PAI_SECRET.replace("$secrets.token", "$secrets.tokn"))
    assert caught.value.status == 400 and "secrets.tokn" in caught.value.message


MARO_TRAIN = """mode: process
name: maro-train
components:
  learner:
    num: 1
    command: python train.py
"""


def test_shoal_run_passes_env_and_starts_maro_jobs_in_the_submit_directory(
    tmp_path: Path, user_shell: tuple[Path, dict[str, str]]
) -> None:
    _, env = user_shell
    project = tmp_path / "maro-project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN_PY + "print('greeting', os.environ['GREETING'])\n")
    (project / "job.yaml").write_text(MARO_TRAIN)
    env = {
        **{k: v for k, v in env.items() if k != "MY_SHELL_VAR"},
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
        "PYTHONPATH": str(Path(shoal.__file__).resolve().parents[1]),
    }
    result = subprocess.run(
        [sys.executable, "-m", "shoal", "run", "job.yaml", "--env", "GREETING=hi"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=project,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"trained in {project}; private dir elsewhere: True; hostfile: True\n" in result.stdout
    assert "greeting hi\n" in result.stdout
