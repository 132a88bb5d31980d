"""shoal's native format: the documented fields mean what docs/job-spec.md says."""

from __future__ import annotations

import pytest

from shoal.spec.errors import SpecError
from shoal.spec.loader import load_job_text
from shoal.spec.model import PriorityClass, SourceFormat

FULL = """
version: 1
name: rl.run-1
description: two roles
vc: team-a
priority: prod
gang: true
retries: 2
max_runtime: 1h30m
code_dir: ./src
env: {SEED: 7, DEBUG: true}
params: {episodes: 10}
secrets: {token: abc}
roles:
  learner:
    instances: 1
    image: python:3.11
    resources: {cpu: 2, memory: 4Gi, gpu: 1, gpu_type: A100, ports: {grpc: 2}, shm: 1Gi}
    command: ["python learner.py --episodes {{ params.episodes }}", echo done]
    completion: {min_succeeded: 1}
  actor:
    instances: 3
    resources: {cpu: "500m", memory: 512}
    command: python actor.py --learner $SHOAL_LEARNER_HOSTS
    env: {ROLE: actor}
    completion: {min_failed: -1}
    retries: 1
"""


def test_full_job_normalises() -> None:
    parsed = load_job_text(FULL)
    assert parsed.format is SourceFormat.NATIVE
    (job,) = parsed.jobs
    assert job.name == "rl.run-1"
    assert job.virtual_cluster == "team-a"
    assert job.priority_class is PriorityClass.PROD
    assert job.job_retry_count == 2
    assert job.max_runtime_s == 5400
    assert job.env == {"SEED": "7", "DEBUG": "true"}
    learner, actor = job.roles
    assert learner.resources.cpu_millis == 2000
    assert learner.resources.memory_mib == 4096
    assert learner.resources.gpu_type == "A100"
    assert learner.resources.ports == {"grpc": 2}
    assert learner.resources.shm_mib == 1024
    assert learner.command == "python learner.py --episodes 10\necho done"
    assert learner.completion.min_succeeded == 1
    assert actor.resources.cpu_millis == 500
    assert actor.resources.memory_mib == 512
    assert actor.completion.min_failed is None
    assert actor.completion.min_succeeded is None  # native default: wait for every task
    assert actor.task_retry_count == 1
    assert "$SHOAL_LEARNER_HOSTS" in actor.command
    assert job.total_instances == 4
    assert [w.path for w in parsed.warnings] == ["roles.learner.image"]  # recorded, not used


def test_param_override_and_undeclared_param_warning() -> None:
    parsed = load_job_text(FULL, params={"episodes": "99", "other": "1"})
    assert "--episodes 99" in parsed.jobs[0].role("learner").command
    assert [w.path for w in parsed.warnings] == ["params.other", "roles.learner.image"]


MINIMAL = "version: 1\nname: x\nroles:\n  main:\n    command: {command}\n{extra}"


def _minimal(command: str = "echo hi", extra: str = "") -> str:
    return MINIMAL.format(command=command, extra=extra)


def test_defaults() -> None:
    job = load_job_text(_minimal()).jobs[0]
    role = job.roles[0]
    assert (role.instances, role.resources.cpu_millis, role.resources.memory_mib) == (1, 1000, 1024)
    assert role.resources.gpu == 0
    assert job.priority_class is PriorityClass.TEST
    assert job.gang is True


BAD = {
    "undefined param": (_minimal("echo {{ params.nope }}"), "roles.main.command", "undefined"),
    "wrong version": (_minimal().replace("version: 1", "version: 2"), "version", "must be one of"),
    "missing roles": ("version: 1\nname: x\n", "roles", "is required"),
    "no roles": ("version: 1\nname: x\nroles: {}\n", "roles", "at least 1 item"),
    "bad memory unit": (
        _minimal(extra="    resources: {memory: 4Gb}\n"),
        "roles.main.resources.memory",
        "unknown memory unit",
    ),
    "negative cpu": (
        _minimal(extra="    resources: {cpu: -1}\n"),
        "roles.main.resources.cpu",
        "must be between",
    ),
    "absurd cpu": (
        _minimal(extra="    resources: {cpu: 5000}\n"),
        "roles.main.resources.cpu",
        "must be between",
    ),
    "bad duration": (
        _minimal().replace("roles:", "max_runtime: soon\nroles:"),
        "max_runtime",
        "must be a duration",
    ),
    "min_failed zero": (
        _minimal(extra="    completion: {min_failed: 0}\n"),
        "roles.main.completion.min_failed",
        "must be -1 or >= 1",
    ),
    "min_succeeded over instances": (
        _minimal(extra="    completion: {min_succeeded: 2}\n"),
        "roles.main.completion.min_succeeded",
        "only 1 instance",
    ),
    "bad env name": (
        _minimal(extra="    env: {1BAD: x}\n"),
        "roles.main.env.1BAD",
        "environment variable name",
    ),
    "bad priority": (
        _minimal().replace("roles:", "priority: urgent\nroles:"),
        "priority",
        "must be one of",
    ),
    "string instances": (
        _minimal(extra="    instances: '3'\n"),
        "roles.main.instances",
        "must be an integer",
    ),
    "union type error is one message": (
        _minimal(extra="    resources: {cpu: [1]}\n"),
        "roles.main.resources.cpu",
        "must be an integer or a number or a string, got a list",
    ),
    "bool gpu": (
        _minimal(extra="    resources: {gpu: true}\n"),
        "roles.main.resources.gpu",
        "must be an integer",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_native_input(case: str) -> None:
    text, path, fragment = BAD[case]
    with pytest.raises(SpecError) as caught:
        load_job_text(text)
    problems = caught.value.problems
    assert any(p.path == path and fragment in p.message for p in problems), [
        p.render() for p in problems
    ]


def test_secret_references_stay_in_the_command_and_undeclared_ones_are_errors() -> None:
    base = "version: 1\nname: s\nsecrets: {token: abc}\nroles:\n  a:\n    command: "
    job = load_job_text(base + "'echo {{ secrets.token }}'").jobs[0]
    assert job.roles[0].command == "echo {{ secrets.token }}" and job.secrets == {"token": "abc"}
    with pytest.raises(SpecError) as caught:
        load_job_text(base + "'echo {{ secrets.nope }}'")
    (problem,) = caught.value.problems
    assert problem.path == "roles.a.command" and "secrets.nope" in problem.message


def test_data_sets_are_declared_for_the_job_and_per_role() -> None:
    text = (
        "version: 1\nname: d\ndata: [corpus, bob/vocab, corpus]\nroles:\n"
        "  a:\n    command: x\n    data: [replays, corpus]\n  b:\n    command: y\n"
    )
    job = load_job_text(text).jobs[0]
    assert job.data == ("corpus", "bob/vocab")
    assert job.data_for("a") == ("corpus", "bob/vocab", "replays")
    assert job.data_for("b") == ("corpus", "bob/vocab")
    assert job.all_data() == ("corpus", "bob/vocab", "replays")


@pytest.mark.parametrize("bad", ["../etc", "a/b/c", "/abs", ".hidden", "x y"])
def test_a_data_set_reference_must_be_a_name_or_owner_slash_name(bad: str) -> None:
    text = f"version: 1\nname: d\ndata: ['{bad}']\nroles:\n  a:\n    command: x\n"
    with pytest.raises(SpecError) as refused:
        load_job_text(text)
    assert any(p.path.startswith("data") for p in refused.value.problems)


def _errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_job_text(text)
    return [p.render() for p in caught.value.problems]


def test_unknown_fields_and_bad_values_come_in_one_report() -> None:
    """The checks after validation (units, durations, templates, thresholds) run on the fields
    pydantic accepted, so fixing the unknown fields does not reveal a second round of errors."""
    errors = _errors(
        "version: 1\nname: x\nretires: 3\nmax_runtime: soon\nroles:\n  main:\n"
        "    command: echo {{ nope }}\n"
        "    resources: {cpu: lots, memory: 4Gb, gpu: -1}\n"
        "    completion: {min_failed: 0}\n"
    )
    expected = [
        "retires (line 3): unknown field; did you mean 'retries'?",
        "roles.main.resources.gpu (line 8): must be an integer >= 0, got -1",
        "max_runtime (line 4): must be a duration",
        "roles.main.resources.cpu (line 8): must be a cpu amount, got 'lots'",
        "roles.main.resources.memory (line 8): has an unknown memory unit 'Gb'",
        "roles.main.command (line 7): {{ nope }} refers to an undefined value",
        "roles.main.completion.min_failed (line 9): must be -1 or >= 1, got 0",
    ]
    for start in expected:
        assert any(e.startswith(start) for e in errors), (start, errors)
    assert len(errors) == len(expected), errors


def test_a_refused_field_causes_no_made_up_errors_elsewhere() -> None:
    # instances refused: min_succeeded is not compared with the default of 1 instead
    errors = _errors(_minimal(extra="    instances: '3'\n    completion: {min_succeeded: 2}\n"))
    assert [e.split(" (")[0] for e in errors] == ["roles.main.instances"], errors
    # a param refused: the command's reference to it is not called undefined
    text = _minimal(command="echo {{ params.n }}").replace("roles:", "params: {n: [1]}\nroles:")
    errors = _errors(text)
    assert [e.split(" (")[0] for e in errors] == ["params.n"], errors
    # a misspelt required field: reported as unknown and missing, the rest still checked
    errors = _errors("version: 1\nname: x\nroles:\n  main:\n    comand: echo\n"
                     "    resources: {memory: 4Gb}\n")  # fmt: skip
    assert [e.split(" (")[0] for e in errors] == [
        "roles.main.command", "roles.main.comand", "roles.main.resources.memory",
    ], errors  # fmt: skip
