"""Send one job file through every door shoal has for it and check the answer is a clean "no" (or
a yes): ``shoal job validate FILE`` (the real CLI, in-process), POST /api/v1/jobs and POST
/api/v2/jobs. Never a 5xx, never a traceback, and every problem names a field path or is about
the whole file (path ``""``, shown as ``(file)``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from shoal.cli.main import app as cli_app
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings


@dataclass(frozen=True)
class Answers:
    """The problems each door named (an empty list: it accepted the file)."""

    cli: list[dict[str, object]]
    v1: list[dict[str, object]]
    v2_status: int
    v2_message: str

    def paths(self) -> set[str]:
        return {str(p["path"]) for p in self.cli} | {str(p["path"]) for p in self.v1}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    home = tmp_path_factory.mktemp("hostile") / "home"
    ctx = prepare(ServerSettings(home=home, scheduler="thread"))
    token = (home / "admin.token").read_text().strip()
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def validate_with_cli(directory: Path, text: str, suffix: str = ".yaml") -> list[dict[str, object]]:
    """``shoal job validate FILE -o json``: its problems, [] if the file is valid."""
    path = directory / f"job{suffix}"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    result = CliRunner().invoke(cli_app, ["job", "validate", str(path), "-o", "json"])
    output = result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert "Traceback" not in output, output
    assert result.exit_code in (0, 1), (result.exit_code, output)
    answer = json.loads(result.stdout)
    assert answer["valid"] is (result.exit_code == 0), answer
    problems: list[dict[str, object]] = answer.get("errors", [])
    return problems


def submit_v1(api: TestClient, text: str) -> list[dict[str, object]]:
    """POST /api/v1/jobs with the text as the spec (JSON-escaped, so lone surrogates travel as
    ``\\ud800``, as a hostile client sends them): its problems, [] if it was accepted."""
    body = json.dumps({"spec": text, "name": None}).encode()
    response = api.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code < 500, response.text
    assert "Traceback" not in response.text
    if response.status_code == 201:
        return []
    answer = response.json()
    assert {"code", "message", "problems"} <= answer.keys(), answer
    if response.status_code == 400 and answer["code"] == "InvalidJobSpec":
        assert answer["problems"], answer
        problems: list[dict[str, object]] = answer["problems"]
        return problems
    return [{"path": "", "message": answer["message"], "code": answer["code"]}]


def submit_v2(api: TestClient, text: str) -> tuple[int, str]:
    """POST /api/v2/jobs with the text as the body (OpenPAI's clients send YAML)."""
    response = api.post(
        "/api/v2/jobs",
        content=text.encode("utf-8", "surrogatepass"),
        headers={"Content-Type": "text/yaml"},
    )
    assert response.status_code < 500, response.text
    assert "Traceback" not in response.text
    if response.status_code == 202:
        return 202, ""
    answer = response.json()
    assert {"code", "message"} <= answer.keys(), answer
    return response.status_code, str(answer["message"])


def every_door(api: TestClient, directory: Path, text: str, suffix: str = ".yaml") -> Answers:
    answers = Answers(validate_with_cli(directory, text, suffix), submit_v1(api, text), 0, "")
    status, message = submit_v2(api, text)
    answers = Answers(answers.cli, answers.v1, status, message)
    for problem in [*answers.cli, *answers.v1]:
        assert isinstance(problem["path"], str), problem
        assert problem["message"], problem
    return answers


def refused_at(answers: Answers, path: str, words: str) -> None:
    """Both the CLI and /api/v1 refused the file naming ``path`` with ``words`` in the message,
    and /api/v2 refused it too."""
    for door, problems in (("cli", answers.cli), ("v1", answers.v1)):
        named = [p for p in problems if p["path"] == path and words in str(p["message"])]
        assert named, (door, path, words, problems)
    assert answers.v2_status == 400, answers
