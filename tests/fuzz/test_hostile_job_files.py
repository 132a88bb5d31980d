"""Hostile job files, one test each: each is refused through the CLI, /api/v1 and /api/v2 with a
4xx that names the field (or the whole file) and how to fix it; none crashes, none is expanded.

Several of these answered 500 on main before (issue #15): JSON nested 1,000 deep, lone UTF-16
surrogates, ``cpu: .inf``, ``cpu: "1e400"``, a 400-digit memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fuzz.jobfiles import api, every_door, refused_at, submit_v1

__all__ = ["api"]  # the fixture, shared with the Hypothesis fuzzer

NATIVE = "version: 1\nname: hostile\nroles:\n  w:\n    command: echo hi\n"
PAI = (
    "protocolVersion: 2\nname: hostile\ntype: job\nprerequisites:\n  - name: img\n"
    "    type: dockerimage\n    uri: python:3.11\ntaskRoles:\n  worker:\n    instances: 1\n"
    "    dockerImage: img\n    resourcePerInstance: {cpu: 1, memoryMB: 1024, gpu: 0}\n"
    "    commands:\n      - echo hi\n"
)
MARO = "mode: process\nname: hostile\ncomponents:\n  main:\n    num: 1\n    command: echo hi\n"


def laughs(levels: int, indent: str = "") -> str:
    """The billion laughs: each level a list of 9 aliases of the level before (9**levels)."""
    lines = [f"{indent}l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"{indent}l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_at_the_top_level_is_refused_unexpanded(
    api: TestClient, tmp_path: Path
) -> None:
    # 9**9 = 387 million strings if expanded; the walk stops after 10,000 repeated nodes
    answers = every_door(api, tmp_path, laughs(9))
    assert any("alias" in str(p["message"]) for p in answers.cli), answers.cli
    assert any("alias" in str(p["message"]) for p in answers.v1), answers.v1


def test_billion_laughs_inside_roles_is_refused_unexpanded(api: TestClient, tmp_path: Path) -> None:
    text = "version: 1\nname: bomb\nroles:\n" + laughs(9, indent="  ")
    answers = every_door(api, tmp_path, text)
    for problems in (answers.cli, answers.v1):
        bomb = [p for p in problems if "alias" in str(p["message"])]
        assert bomb and str(bomb[0]["path"]).startswith("roles.l"), problems
        assert bomb[0]["hint"], bomb


def test_billion_laughs_inside_an_openpai_task_role(api: TestClient, tmp_path: Path) -> None:
    bomb = laughs(9, indent="      ")
    text = PAI.replace("    commands:\n", "    extras:\n" + bomb + "    commands:\n")
    answers = every_door(api, tmp_path, text)
    assert any(str(p["path"]).startswith("taskRoles.worker.extras") for p in answers.v1), answers
    assert "alias" in answers.v2_message


def test_a_recursive_alias_is_refused(api: TestClient, tmp_path: Path) -> None:
    text = "version: 1\nname: loop\nroles: &r\n  w: *r\n"
    answers = every_door(api, tmp_path, text)
    assert any("nests more than" in str(p["message"]) for p in answers.v1), answers.v1


@pytest.mark.parametrize("depth", [100, 1_000, 10_000])
def test_yaml_flow_nesting(api: TestClient, tmp_path: Path, depth: int) -> None:
    text = NATIVE + "    env: {A: " + "[" * depth + "]" * depth + "}\n"
    answers = every_door(api, tmp_path, text)
    for problems in (answers.cli, answers.v1):
        assert problems and "nest" in str(problems[0]["message"]), problems


@pytest.mark.parametrize("depth", [200, 1_000])
def test_yaml_block_nesting(api: TestClient, tmp_path: Path, depth: int) -> None:
    nested = "".join(" " * (level + 1) + f"k{level}:\n" for level in range(depth))
    answers = every_door(api, tmp_path, "version: 1\nname: deep\nroles:\n" + nested)
    if depth < 1_000:  # shoal's own limit, at the field; libyaml stops at 1,000 by itself
        refused_at(answers, "roles.k0", "nests more than 64 levels")
    else:
        refused_at(answers, "", "nesting depth")


@pytest.mark.parametrize("depth", [1_000, 10_000])
def test_json_nesting(api: TestClient, tmp_path: Path, depth: int) -> None:
    text = '{"version": 1, "name": "deep", "roles": ' + "[" * depth + "]" * depth + "}"
    answers = every_door(api, tmp_path, text, suffix=".json")
    refused_at(answers, "", "nests more than 64 levels")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (
            '{"version": 1, "name": "x", "roles": {"w": {"command": "echo \\ud800"}}}',
            "roles.w.command",
        ),
        ('{"version": 1, "name": "\\udfff", "roles": {"w": {"command": "echo"}}}', "name"),
        (
            '{"version": 1, "name": "x", "roles": {"w\\ud800": {"command": "echo"}}}',
            "roles.w\\ud800",
        ),
    ],
)
def test_lone_surrogates_escaped_in_json(
    api: TestClient, tmp_path: Path, text: str, path: str
) -> None:
    answers = every_door(api, tmp_path, text, suffix=".json")
    refused_at(answers, path, "lone UTF-16 surrogate")


def test_a_lone_surrogate_in_the_spec_text_itself(api: TestClient) -> None:
    # the request body's JSON escape decodes to a surrogate in the spec: the whole text is refused
    problems = submit_v1(api, NATIVE.replace("echo hi", "echo \ud800"))
    assert problems[0]["path"] == "" and "surrogate" in str(problems[0]["message"]), problems
    assert problems[0]["line"] == 5


def test_a_lone_surrogate_in_parameters_of_a_submission(api: TestClient) -> None:
    body = json.dumps({"spec": NATIVE, "params": {"p": "\ud800"}}).encode()
    response = api.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert "params" in response.json()["message"]


@pytest.mark.parametrize(
    "text",
    [
        '{"version": 1, "name": "x", "roles": {"w": {"command": "a\\u0000b"}}}',
        NATIVE.replace("echo hi", '"echo \\0 hi"'),
    ],
)
def test_nul_in_a_command(api: TestClient, tmp_path: Path, text: str) -> None:
    answers = every_door(api, tmp_path, text, suffix=".json" if text.startswith("{") else ".yaml")
    refused_at(answers, "roles.w.command", "NUL character")


@pytest.mark.parametrize(
    ("cpu", "words"),
    [
        (".inf", "finite number of cores"),
        ("-.inf", "finite number of cores"),
        (".nan", "finite number of cores"),
        ('"1e400"', "finite number of cores"),
        ("1.0e+400", "finite number of cores"),
        ('"inf"', "finite number of cores"),
        ("-1", "must be between"),
        ("0", "must be between"),
        ("9" * 400, "must be between"),
        ("9" * 5000, "integer of 5000 digits"),
        ("[1, 2]", "must be"),
    ],
)
def test_cpu_that_is_no_amount_of_cores(
    api: TestClient, tmp_path: Path, cpu: str, words: str
) -> None:
    answers = every_door(api, tmp_path, NATIVE + f"    resources:\n      cpu: {cpu}\n")
    refused_at(answers, "roles.w.resources.cpu", words)


@pytest.mark.parametrize(
    ("memory", "words"),
    [
        ("9" * 400, "must be between"),
        (f'"{"9" * 400}Gi"', "must be a memory size"),
        ('"1e400Gi"', "must be a memory size"),
        (".inf", "must be"),
        ("-1", "must be between"),
    ],
)
def test_memory_that_is_no_size(api: TestClient, tmp_path: Path, memory: str, words: str) -> None:
    answers = every_door(api, tmp_path, NATIVE + f"    resources:\n      memory: {memory}\n")
    refused_at(answers, "roles.w.resources.memory", words)
    assert all(len(str(p["message"])) < 300 for p in answers.v1), answers.v1  # no 400 digits


def test_an_openpai_cpu_of_infinity(api: TestClient, tmp_path: Path) -> None:
    text = PAI.replace("cpu: 1,", "cpu: .inf,")
    answers = every_door(api, tmp_path, text)
    refused_at(answers, "taskRoles.worker.resourcePerInstance.cpu", "")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (NATIVE.replace("  w:\n", "  w:\n    instances: 1000000000\n"), "roles.w.instances"),
        (PAI.replace("instances: 1", "instances: 1000000000"), "taskRoles.worker.instances"),
        (MARO.replace("num: 1", "num: 1000000000"), "components.main.num"),
    ],
)
def test_a_billion_instances(api: TestClient, tmp_path: Path, text: str, path: str) -> None:
    refused_at(every_door(api, tmp_path, text), path, "")


@pytest.mark.parametrize(
    "name",
    ["a/b", "../etc", "..", "$(reboot)", "a;rm -rf /", "`id`", "a|b", "a b", "-rf", "x" * 300],
)
def test_job_names_with_slashes_dots_or_shell_metacharacters(
    api: TestClient, tmp_path: Path, name: str
) -> None:
    native = NATIVE.replace("name: hostile", f"name: {json.dumps(name)}")
    refused_at(every_door(api, tmp_path, native), "name", "must be 1-128")
    if name != "-rf":  # OpenPAI's own name pattern allows a leading '-' (its files keep working)
        pai = PAI.replace("name: hostile", f"name: {json.dumps(name)}")
        refused_at(every_door(api, tmp_path, pai), "name", "must be 1-255")


@pytest.mark.parametrize("role", ["a/b", "..", "$(id)", "a;b", "w\\u0000"])
def test_role_names_with_slashes_dots_nul_or_shell_metacharacters(
    api: TestClient, tmp_path: Path, role: str
) -> None:
    text = json.dumps({"version": 1, "name": "x", "roles": {"@": {"command": "echo"}}})
    text = text.replace('"@"', f'"{role}"')
    answers = every_door(api, tmp_path, text, suffix=".json")
    assert answers.cli and answers.v1, answers
    for problem in [*answers.cli, *answers.v1]:
        assert str(problem["path"]).startswith("roles."), problem


def test_a_nul_in_the_job_name(api: TestClient, tmp_path: Path) -> None:
    answers = every_door(api, tmp_path, NATIVE.replace("name: hostile", 'name: "a\\0b"'))
    refused_at(answers, "name", "NUL character")


def test_an_integer_too_long_to_read(api: TestClient, tmp_path: Path) -> None:
    answers = every_door(
        api, tmp_path, NATIVE.replace("  w:\n", "  w:\n    retries: " + "7" * 5000 + "\n")
    )
    refused_at(answers, "roles.w.retries", "integer of 5000 digits")
    text = (
        '{"version": 1, "name": "x", "roles": {"w": {"command": "x", "retries": '
        + "7" * 5000
        + "}}}"
    )
    refused_at(every_door(api, tmp_path, text, suffix=".json"), "", "integer of 5000 digits")


def test_a_date_yaml_reads_but_python_cannot_build(api: TestClient, tmp_path: Path) -> None:
    answers = every_door(api, tmp_path, NATIVE.replace("name: hostile", "name: 2024-13-45"))
    refused_at(answers, "", "month must be in 1..12")


@pytest.mark.parametrize(
    ("text", "suffix", "where"),
    [
        (laughs(9), ".yaml", "alias"),
        (
            '{"version": 1, "name": "x", "roles": {"w": {"command": "echo \\ud800"}}}',
            ".json",
            "roles.w.command",
        ),
        (NATIVE + "    resources:\n      cpu: .inf\n", ".yaml", "roles.w.resources.cpu"),
    ],
)
def test_the_real_cli_in_a_subprocess(tmp_path: Path, text: str, suffix: str, where: str) -> None:
    path = tmp_path / f"job{suffix}"
    path.write_text(text)
    shoal = Path(sys.executable).with_name("shoal")
    result = subprocess.run(
        [str(shoal), "job", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr + result.stdout
    assert where in result.stderr, result.stderr
