"""OpenPAI v1 (YARN-era JSON) jobs: a realistic sample, the field mapping, and every error class."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shoal.spec.errors import SpecError, SpecProblem
from shoal.spec.loader import ParsedJobs, load_job_file, load_job_text
from shoal.spec.model import Completion, SourceFormat

DATA = Path(__file__).resolve().parent / "data"
SAMPLE = DATA / "pai_v1_mnist.json"

BASE_JOB: dict[str, Any] = {
    "jobName": "mnist-v1",
    "image": "openpai/pai.example.tensorflow:stable",
    "taskRoles": [
        {
            "name": "ps",
            "taskNumber": 1,
            "cpuNumber": 2,
            "memoryMB": 4096,
            "gpuNumber": 0,
            "command": "python ps.py",
        },
        {
            "name": "worker",
            "taskNumber": 2,
            "cpuNumber": 4,
            "memoryMB": 8192,
            "gpuNumber": 1,
            "portList": [{"label": "grpc", "beginAt": 0, "portNumber": 2}],
            "command": "python worker.py",
        },
    ],
}

Change = Callable[[dict[str, Any]], None]


def _job(change: Change | None = None) -> str:
    job = copy.deepcopy(BASE_JOB)
    if change is not None:
        change(job)
    return json.dumps(job, indent=2)


def _load(change: Change | None = None) -> ParsedJobs:
    return load_job_text(_job(change))


def _problems(text: str) -> list[SpecProblem]:
    with pytest.raises(SpecError) as caught:
        load_job_text(text, format=SourceFormat.PAI_V1)  # as with --format: jobName may be missing
    return caught.value.problems


def _find(problems: list[SpecProblem], path: str) -> SpecProblem:
    found = [p for p in problems if p.path == path]
    assert found, f"no problem at {path!r}; got {[p.render() for p in problems]}"
    return found[0]


def _set(path: str, value: Any) -> Change:
    """Set a field by its dotted path; ``taskRoles.1.cpuNumber`` indexes the role list."""

    def change(job: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = job
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _drop(path: str) -> Change:
    def change(job: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = job
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[last]

    return change


def _both(*changes: Change) -> Change:
    def change(job: dict[str, Any]) -> None:
        for one in changes:
            one(job)

    return change


# --- the sample job ---


def test_sample_parses_through_the_loader() -> None:
    parsed = load_job_file(SAMPLE)
    assert parsed.format is SourceFormat.PAI_V1
    (job,) = parsed.jobs
    assert job.name == "tensorflow-distributed-mnist"
    assert job.source_format is SourceFormat.PAI_V1
    assert job.virtual_cluster == "vision"
    assert job.job_retry_count == 1
    assert job.code_dir is None  # on HDFS: not fetched, only exported
    assert job.env == {
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PAI_CODE_DIR": "$PAI_DEFAULT_FS_URI/alice/mnist/code",
        "PAI_DATA_DIR": "hdfs://namenode:9000/alice/mnist/data",
        "PAI_OUTPUT_DIR": "hdfs://namenode:9000/alice/mnist/output",
    }
    ps, worker = job.roles
    assert (ps.name, ps.instances, worker.name, worker.instances) == ("ps", 2, "worker", 4)
    assert ps.resources.model_dump() == {
        "cpu_millis": 2000,
        "memory_mib": 8192,
        "gpu": 0,
        "gpu_type": "K80",
        "ports": {"grpc": 1},
        "shm_mib": 64,
        "pids": None,
    }
    assert worker.resources.model_dump() == {
        "cpu_millis": 4000,
        "memory_mib": 16384,
        "gpu": 1,
        "gpu_type": "K80",
        "ports": {"grpc": 1, "tensorboard": 1},
        "shm_mib": 2048,
        "pids": None,
    }
    assert {ps.image, worker.image} == {"openpai/pai.example.tensorflow:stable"}
    assert ps.completion == Completion(min_failed=1, min_succeeded=None)
    assert worker.completion == Completion(min_failed=1, min_succeeded=4)
    assert "--job_name=worker" in worker.command


def test_sample_warns_about_what_shoal_does_not_do() -> None:
    warnings = {w.path: w for w in load_job_file(SAMPLE).warnings}
    assert set(warnings) == {
        "image",  # recorded, not used: no containers yet
        "codeDir",
        "dataDir",
        "outputDir",
        "taskRoles[1].portList[1].beginAt",
    }
    assert "$PAI_CODE_DIR" in warnings["codeDir"].message
    assert warnings["taskRoles[1].portList[1].beginAt"].line == 37


# --- field mapping ---


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, Completion(min_failed=1, min_succeeded=None)),
        ({"minFailedTaskCount": None}, Completion(min_failed=None, min_succeeded=None)),
        ({"minSucceededTaskCount": None}, Completion(min_failed=1, min_succeeded=None)),
        ({"minFailedTaskCount": 2}, Completion(min_failed=2, min_succeeded=None)),
        ({"minSucceededTaskCount": 1}, Completion(min_failed=1, min_succeeded=1)),
        (
            {"minFailedTaskCount": None, "minSucceededTaskCount": 2},
            Completion(min_failed=None, min_succeeded=2),
        ),
    ],
)
def test_completion_policy(fields: dict[str, Any], expected: Completion) -> None:
    job = _load(lambda job: job["taskRoles"][1].update(fields)).jobs[0]
    assert job.role("worker").completion == expected


@pytest.mark.parametrize(
    ("change", "attribute", "expected"),
    [
        (None, "virtual_cluster", None),
        (_set("virtualCluster", ""), "virtual_cluster", None),
        (_set("virtualCluster", "research"), "virtual_cluster", "research"),
        (None, "job_retry_count", 0),
        (_set("retryCount", 3), "job_retry_count", 3),
        (_set("codeDir", "./src"), "code_dir", "./src"),
        (_set("codeDir", "hdfs://nn:9000/code"), "code_dir", None),
        (_set("jobEnvs", {"LR": 0.1, "DEBUG": True}), "env", {"LR": "0.1", "DEBUG": "true"}),
        (_set("jobEnvs", {"paiAzRDMA": True, "A": "b"}), "env", {"A": "b"}),
        (_set("dataDir", "/data/mnist"), "env", {"PAI_DATA_DIR": "/data/mnist"}),
    ],
)
def test_job_fields(change: Change | None, attribute: str, expected: Any) -> None:
    assert getattr(_load(change).jobs[0], attribute) == expected


@pytest.mark.parametrize(
    ("change", "role", "attribute", "expected"),
    [
        (None, "ps", "image", "openpai/pai.example.tensorflow:stable"),
        (_set("gpuType", "V100"), "ps", "gpu_type", "V100"),
        (_set("gpuType", "V100"), "worker", "gpu_type", "V100"),
        (_set("gpuType", ""), "worker", "gpu_type", None),
        (None, "worker", "ports", {"grpc": 2}),
        (None, "ps", "ports", {}),
        (None, "ps", "shm_mib", 64),
        (_drop("taskRoles.0.cpuNumber"), "ps", "cpu_millis", 1000),  # OpenPAI's defaults
        (_drop("taskRoles.0.memoryMB"), "ps", "memory_mib", 100),
        (_drop("taskRoles.1.gpuNumber"), "worker", "gpu", 0),
        (_drop("taskRoles.1.taskNumber"), "worker", "instances", 1),
    ],
)
def test_role_fields(change: Change | None, role: str, attribute: str, expected: Any) -> None:
    spec = _load(change).jobs[0].role(role)
    source = spec if hasattr(spec, attribute) else spec.resources
    assert getattr(source, attribute) == expected


@pytest.mark.parametrize(
    ("change", "warned"),
    [
        (None, set()),
        (_set("extras", {"submitFrom": "portal"}), {"extras"}),
        (_set("authFile", "hdfs://nn/auth"), {"authFile"}),
        (_set("killAllOnCompletedTaskNumber", 1), {"killAllOnCompletedTaskNumber"}),
        (_set("codeDir", "./src"), set()),
        (_set("codeDir", "hdfs://nn/code"), {"codeDir"}),
        (_set("taskRoles.1.portList.0.beginAt", 5000), {"taskRoles[1].portList[0].beginAt"}),
    ],
)
def test_warnings(change: Change | None, warned: set[str]) -> None:
    assert {w.path for w in _load(change).warnings} == warned | {"image"}  # image: not used


# --- errors ---

W0 = "taskRoles[0]"
W1 = "taskRoles[1]"
ERRORS = [
    # missing required fields
    (_drop("jobName"), "jobName", "is required", None),
    (_drop("image"), "image", "is required", None),
    (_drop("taskRoles.1.command"), f"{W1}.command", "is required", None),
    (_drop("taskRoles.1.name"), f"{W1}.name", "is required", None),
    (_drop("taskRoles.1.portList.0.label"), f"{W1}.portList[0].label", "is required", None),
    # wrong types
    (_set("taskRoles.1.taskNumber", "2"), f"{W1}.taskNumber", "must be an integer", None),
    (_set("taskRoles.1.cpuNumber", 1.5), f"{W1}.cpuNumber", "must be an integer", None),
    (_set("taskRoles.1.command", ["a", "b"]), f"{W1}.command", "must be a string", None),
    (_set("taskRoles", {"ps": {}}), "taskRoles", "must be a list", None),
    (_set("jobEnvs", ["A=1"]), "jobEnvs", "must be a mapping", None),
    (_set("jobEnvs", {"A": [1]}), "jobEnvs.A", "string, number or boolean", None),
    (_set("jobEnvs", {"BAD-NAME": "x"}), "jobEnvs.BAD-NAME", "environment variable", None),
    (_set("retryCount", "1"), "retryCount", "must be an integer", None),
    # negative and out-of-range values
    (_set("taskRoles.1.cpuNumber", -4), f"{W1}.cpuNumber", ">= 1", None),
    (_set("taskRoles.1.gpuNumber", -1), f"{W1}.gpuNumber", ">= 0", None),
    (_set("taskRoles.1.memoryMB", 64), f"{W1}.memoryMB", ">= 100", None),
    (_set("taskRoles.1.shmMB", 0), f"{W1}.shmMB", ">= 1", None),
    (_set("taskRoles.1.shmMB", 9000), f"{W1}.shmMB", "more than the task's memoryMB", None),
    (_set("retryCount", -2), "retryCount", "not supported", "number of times"),
    # absurd resources
    (_set("taskRoles.1.gpuNumber", 1000), f"{W1}.gpuNumber", "<= 64", None),
    (_set("taskRoles.1.cpuNumber", 100000), f"{W1}.cpuNumber", "between", None),
    (_set("taskRoles.1.memoryMB", 10**9), f"{W1}.memoryMB", "between", None),
    (_set("taskRoles.1.portList.0.portNumber", 500), f"{W1}.portList[0].portNumber", "<= ", None),
    # zero instances and empty role list
    (_set("taskRoles.1.taskNumber", 0), f"{W1}.taskNumber", ">= 1", None),
    (_set("taskRoles", []), "taskRoles", "at least 1", None),
    # names
    (_set("jobName", "alice~mnist"), "jobName", "'~'", "OpenPAI v2 job ids"),
    (_set("jobName", "mnist run"), "jobName", "letters, digits", None),
    (_set("taskRoles.1.name", "worker-0"), f"{W1}.name", "identifier", "role names"),
    (_set("taskRoles.1.name", "0worker"), f"{W1}.name", "identifier", None),
    (_set("taskRoles.1.name", "ps"), f"{W1}.name", "duplicate role name 'ps'", "own name"),
    (_set("taskRoles.1.name", "PS"), f"{W1}.name", "clashes with 'ps'", None),
    (_set("taskRoles.1.portList.0.label", "grpc-port"), f"{W1}.portList[0].label", "", None),
    (
        _set("taskRoles.1.portList", [{"label": "a"}, {"label": "a"}]),
        f"{W1}.portList[1].label",
        "duplicate port label",
        None,
    ),
    # empty commands
    (_set("taskRoles.1.command", ""), f"{W1}.command", "command is empty", None),
    (_set("taskRoles.1.command", " \n "), f"{W1}.command", "command is empty", None),
    # unknown fields, with did-you-mean hints
    (_set("taskRoles.1.taskNumer", 2), f"{W1}.taskNumer", "unknown field", "'taskNumber'"),
    (_set("virtualClusters", "a"), "virtualClusters", "unknown field", "'virtualCluster'"),
    (
        _set("taskRoles.1.portList.0.portNum", 1),
        f"{W1}.portList[0].portNum",
        "unknown field",
        "'portNumber'",
    ),
    (_set("protocol", "v1"), "protocol", "unknown field", None),
    # completion policy
    (_set("taskRoles.1.minSucceededTaskCount", 3), f"{W1}.minSucceededTaskCount", "only 2", None),
    (_set("taskRoles.1.minFailedTaskCount", 5), f"{W1}.minFailedTaskCount", "only 2", None),
    (_set("taskRoles.1.minFailedTaskCount", 0), f"{W1}.minFailedTaskCount", "null or", "null"),
    (_set("taskRoles.1.minSucceededTaskCount", -1), f"{W1}.minSucceededTaskCount", "", "null"),
]


@pytest.mark.parametrize(("change", "path", "fragment", "hint"), ERRORS)
def test_errors(change: Change, path: str, fragment: str, hint: str | None) -> None:
    problem = _find(_problems(_job(change)), path)
    assert fragment in problem.message
    if hint is not None:
        assert hint in (problem.hint or "")


def test_all_errors_are_collected_not_only_the_first() -> None:
    change = _both(
        _set("jobName", "a~b"),
        _set("taskRoles.1.name", "ps"),
        _set("taskRoles.1.memoryMB", 10**9),
        _set("taskRoles.0.minSucceededTaskCount", 7),
        _set("taskRoles.0.command", ""),
    )
    assert {p.path for p in _problems(_job(change))} == {
        "jobName",
        f"{W1}.name",
        f"{W1}.memoryMB",
        f"{W0}.minSucceededTaskCount",
        f"{W0}.command",
    }


def test_type_errors_do_not_hide_other_errors() -> None:
    change = _both(
        _set("jobName", "a~b"),
        _set("taskRoles.1.gpuNumber", "one"),  # a type error in one role ...
        _set("taskRoles.0.memoryMB", 10**9),  # ... and a bound checked after parsing in another
        _set("gpuTyp", "K80"),  # ... and an unknown top-level field
    )
    assert {p.path for p in _problems(_job(change))} == {
        "jobName",
        f"{W1}.gpuNumber",
        f"{W0}.memoryMB",
        "gpuTyp",
    }


def test_syntax_error_has_a_line_number() -> None:
    text = '{\n  "jobName": "a",\n  "image": "x",\n  "taskRoles": [\n}\n'
    (problem,) = _problems(text)
    assert "invalid JSON" in problem.message
    assert problem.line == 5


def test_duplicate_key_is_rejected() -> None:
    text = '{"jobName": "a", "jobName": "b", "image": "x", "taskRoles": []}'
    assert "duplicate" in _find(_problems(text), "jobName").message


def test_errors_carry_the_line_of_the_field() -> None:
    text = _job(_set("taskRoles.1.taskNumer", 2))
    expected = 1 + next(i for i, line in enumerate(text.splitlines()) if "taskNumer" in line)
    assert _find(_problems(text), f"{W1}.taskNumer").line == expected
