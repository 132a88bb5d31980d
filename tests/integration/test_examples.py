"""Every example in examples/ runs to success on a real local cluster."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.cli.code_upload import upload_code
from tests.integration.conftest import LocalCluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def submit_example(cluster: LocalCluster, job_file: Path, **kwargs: object) -> str:
    has_code = "code_dir" in job_file.read_text()
    code_hash = upload_code(cluster.client, job_file.parent, quiet=True) if has_code else None
    return cluster.submit(job_file.read_text(), code_hash=code_hash, **kwargs)


def test_hello(cluster: LocalCluster) -> None:
    job_id = submit_example(cluster, EXAMPLES / "hello" / "job.yaml", params={"greeting": "hi"})
    assert cluster.wait(job_id)["state"] == "SUCCEEDED"
    assert cluster.log(job_id, "main") == "hi from main 0\n"


def test_openpai_v1_json(cluster: LocalCluster) -> None:
    job_id = submit_example(cluster, EXAMPLES / "pai-v1" / "job.json")
    job = cluster.wait(job_id)
    assert job["state"] == "SUCCEEDED", job
    ps = next(t for t in job["tasks"] if t["role"] == "ps")
    expected = f"{ps['address']}:{ps['ports']['grpc'][0]}"
    for index in (0, 1):
        assert cluster.log(job_id, "worker", index) == (
            f"worker {index} of 2 sees ps at {expected}\n"
        )


def test_rl_actor_learner_learns(cluster: LocalCluster) -> None:
    job_id = submit_example(cluster, EXAMPLES / "rl-actor-learner" / "job.yaml")
    job = cluster.wait(job_id, timeout_s=180)
    learner = cluster.log(job_id, "learner")
    assert job["state"] == "SUCCEEDED", learner
    assert "learned" in learner.splitlines()[-1]
    returns = [
        float(line.rsplit(" ", 1)[1])
        for line in learner.splitlines()
        if line.startswith("iteration")
    ]
    assert returns[0] < 0.3  # a random policy rarely reaches the goal...
    assert sum(returns[-3:]) / 3 >= 0.8  # ...the trained one walks straight to it
    assert "actor connected" in learner
    for index in range(3):
        assert "done after" in cluster.log(job_id, "actor", index)


def _torch_available() -> str | None:
    if importlib.util.find_spec("torch") is not None:
        return None
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "torch==2.13.0"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        return f"torch==2.13.0 could not be installed: {result.stderr.strip()[-300:]}"
    return None


def test_pytorch_ddp_workers_agree(cluster: LocalCluster) -> None:
    missing = _torch_available()
    if missing:
        pytest.skip(missing)
    job_id = submit_example(cluster, EXAMPLES / "pytorch-ddp" / "job.yaml")
    job = cluster.wait(job_id, timeout_s=300)
    logs = [cluster.log(job_id, "worker", i) for i in (0, 1)]
    ends = [
        (t["exitClass"], t["exitCode"], t["diagnostics"])
        for t in cluster.client.job(job_id)["tasks"]
    ]
    assert job["state"] == "SUCCEEDED", [*logs, *ends, cluster.log(job_id, "worker", 0, "stderr")]
    finals = [line for text in logs for line in text.splitlines() if "final loss" in line]
    assert len(finals) == 2
    digests = {line.split("sha256 ")[1].split(",")[0] for line in finals}
    assert len(digests) == 1, finals  # identical weights on both replicas
    assert all("replicas agree: True" in line for line in finals)


def test_pytorch_ddp_without_torch_says_how_to_get_it() -> None:
    """Run where torch cannot be imported, a worker names the fix and fails (not a traceback)."""
    without_torch = (
        "import runpy, sys\n"
        "sys.modules['torch'] = None  # as in an environment without PyTorch\n"
        f"sys.argv = [{str(EXAMPLES / 'pytorch-ddp' / 'train.py')!r}]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", without_torch],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    assert "needs PyTorch" in done.stderr and "`pip install torch`" in done.stderr, done.stderr
