"""The ``shoal job`` commands as a user runs them: a real process, exit codes, stdout/stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli.main import app

FORMATS = ["native", "pai", "pai-v1", "maro"]


def real_shoal(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed command in its own process: what a user really runs."""
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def shoal(*args: str) -> Result:
    """The same command in this process (fast); exceptions would surface as a failed test."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Result(result.exit_code, result.stdout, result.stderr)


def test_validate_every_openpai_sample(shared_dir: Path) -> None:
    files = sorted((shared_dir / "compat" / "pai").glob("*.yaml"))
    assert len(files) == 9
    for path in files:
        result = shoal("job", "validate", str(path))
        assert result.returncode == 0, result.stderr
        assert "valid" in result.stdout


MARO_JOBS = [
    "process/process_job_deployment.yml",
    "process/process_schedule_deployment.yml",
    "grass/grass_azure_start_job.yml",
    "grass/grass_azure_start_schedule.yml",
    "grass/grass_local_start_job.yml",
    "grass/grass_local_start_schedule.yml",
    "k8s/k8s_aks_start_job.yml",
    "k8s/k8s_aks_start_schedule.yml",
    "local-v0.3/rl_workflow_job_template.yml",
]


@pytest.mark.parametrize("name", MARO_JOBS)
def test_validate_maro_job_files(shared_dir: Path, name: str) -> None:
    result = shoal("job", "validate", str(shared_dir / "compat" / "maro" / name), "-o", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    assert payload["valid"] is True
    assert payload["format"] == "maro"
    assert payload["jobs"]


def test_validate_rejects_with_field_path_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "protocolVersion: 2\nname: x\ntype: job\n"
        "prerequisites: [{type: dockerimage, name: i, uri: u}]\n"
        "taskRoles:\n  worker:\n    dockerImage: i\n"
        "    resourcePerInstance: {cpu: 1, memoryMB: 100, gpu: -1}\n"
        "    commands: [x]\n"
    )
    result = real_shoal("job", "validate", str(bad))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert (
        "taskRoles.worker.resourcePerInstance.gpu (line 8): must be an integer >= 0, got -1"
        in result.stderr
    )


def test_validate_json_output_on_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"version: 1\nname: \xff\n")
    result = shoal("job", "validate", str(bad), "--output", "json")
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["valid"] is False
    assert payload["errors"][0]["line"] == 2


def test_validate_missing_file_is_one_clear_line(tmp_path: Path) -> None:
    result = shoal("job", "validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 1
    assert "cannot read" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_json_masks_secrets(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("version: 1\nname: s\nsecrets: {key: hunter2}\nroles: {a: {command: x}}\n")
    result = shoal("job", "validate", str(job), "-o", "json")
    assert result.returncode == 0
    assert "hunter2" not in result.stdout
    assert json.loads(result.stdout)["jobs"][0]["secrets"] == {"key": "******"}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("distributed", [False, True])
def test_templates_validate(tmp_path: Path, fmt: str, distributed: bool) -> None:
    args = ["job", "template", "--format", fmt] + (["--distributed"] if distributed else [])
    template = shoal(*args)
    assert template.returncode == 0, template.stderr
    if fmt != "pai-v1":
        assert template.stdout.lstrip().startswith("#"), "templates are commented"
    path = tmp_path / ("job.json" if fmt == "pai-v1" else "job.yaml")
    path.write_text(template.stdout)
    result = shoal("job", "validate", str(path), "-o", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    assert payload["format"] == fmt
    roles = payload["jobs"][0]["roles"]
    assert (len(roles) > 1) is distributed


def test_plan_shows_placements_and_environment(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(shoal("job", "template", "--distributed").stdout)
    result = shoal(
        "job", "plan", str(job), "--nodes", "2", "--cpus", "4", "--gpus", "1",
        "--task", "actor/3", "-o", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (plan,) = json.loads(result.stdout)
    assert plan["admitted"] is True
    assert len(plan["placements"]) == 5
    env = plan["env"]
    assert env["SHOAL_TASK_ROLE"] == "actor"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "3"
    learner = next(p for p in plan["placements"] if p["role"] == "learner")
    assert env["SHOAL_LEARNER_HOSTS"] == f"127.0.0.1:{learner['ports']['http'][0]}"
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_plan_of_a_job_that_never_fits_exits_1(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "version: 1\nname: big\nroles:\n  w:\n    resources: {gpu: 16}\n    command: x\n"
    )
    result = shoal("job", "plan", str(job), "--nodes", "4", "--gpus", "8")
    assert result.returncode == 1
    assert "NeverFits" in result.stderr
    assert "needs 16 GPUs on one node" in result.stderr


def test_plan_rejects_unknown_task(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(shoal("job", "template").stdout)
    result = shoal("job", "plan", str(job), "--task", "ghost/0")
    assert result.returncode == 2
    assert "no role 'ghost'" in result.stderr


def test_version_and_help() -> None:
    assert real_shoal("--version").stdout.startswith("shoal ")
    assert "validate" in real_shoal("job", "--help").stdout
