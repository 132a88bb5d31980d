"""File-level problems: size, encoding, syntax, duplicates, unknown formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.protocol import fill_in
from shoal.spec import units
from shoal.spec.errors import SpecError
from shoal.spec.loader import detect_format, load_job_bytes, load_job_file, load_job_text
from shoal.spec.model import SourceFormat
from shoal.spec.templating import NATIVE_TOKEN, missing_secrets, render, secret_values


def _problems(text: str | bytes) -> list[str]:
    with pytest.raises(SpecError) as caught:
        if isinstance(text, bytes):
            load_job_bytes(text)
        else:
            load_job_text(text)
    return [p.render() for p in caught.value.problems]


def test_yaml_syntax_error_has_line_number() -> None:
    (problem,) = _problems("version: 1\nname: x\nroles:\n  main: [unclosed\n")
    assert problem.startswith("(file) (line ")
    assert "invalid YAML" in problem


def test_json_syntax_error_has_line_and_column() -> None:
    (problem,) = _problems('{\n  "jobName": "x",\n  "taskRoles": [\n}\n')
    assert "invalid JSON" in problem
    assert "(line 4" in problem


def test_non_utf8_is_rejected_with_offset() -> None:
    (problem,) = _problems(b"version: 1\nname: caf\xe9\n")
    assert "not valid UTF-8" in problem
    assert "offset 20" in problem
    assert "(line 2)" in problem


def test_oversized_bytes_are_rejected() -> None:
    (problem,) = _problems(b"#" * (1024 * 1024 + 1))
    assert "over the 1048576-byte limit" in problem


def test_oversized_file_is_rejected_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"# padding\n" * 200_000)
    with pytest.raises(SpecError) as caught:
        load_job_file(path)
    assert "limit" in caught.value.problems[0].message


def test_missing_file() -> None:
    with pytest.raises(SpecError) as caught:
        load_job_file("/nonexistent/job.yaml")
    assert "cannot read" in caught.value.problems[0].message


def test_duplicate_yaml_keys_are_errors_not_silently_merged() -> None:
    text = "version: 1\nname: x\nroles:\n  a: {command: x}\n  a: {command: y}\n"
    (problem,) = _problems(text)
    assert problem.startswith("roles.a (line 5): duplicate key 'a'")


def test_duplicate_json_keys() -> None:
    problems = _problems('{"jobName": "a", "jobName": "b", "taskRoles": []}')
    assert any("duplicate key" in p for p in problems)


def test_multiple_documents_and_empty_and_scalar() -> None:
    assert "invalid YAML" in _problems("version: 1\n---\nversion: 1\n")[0]
    assert "empty" in _problems("# nothing\n")[0]
    assert "must be a mapping" in _problems("- a\n- b\n")[0]


def test_unknown_format_gets_a_hint() -> None:
    with pytest.raises(SpecError) as caught:
        load_job_text("hello: world\n")
    (problem,) = caught.value.problems
    assert "cannot tell which job format" in problem.message
    assert problem.hint is not None and "shoal job template" in problem.hint


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"protocolVersion": 2}, SourceFormat.PAI_V2),
        ({"jobName": "x"}, SourceFormat.PAI_V1),
        ({"mode": "process", "name": "x", "components": {}}, SourceFormat.MARO),
        ({"version": 1, "roles": {}}, SourceFormat.NATIVE),
    ],
)
def test_detect_format(data: dict[str, object], expected: SourceFormat) -> None:
    assert detect_format(data) is expected


def test_explicit_format_overrides_detection() -> None:
    with pytest.raises(SpecError) as caught:
        load_job_text("version: 1\nname: x\nroles: {a: {command: x}}\n", format=SourceFormat.PAI_V2)
    assert any(p.path == "protocolVersion" for p in caught.value.problems)


@pytest.mark.parametrize(
    ("value", "mib"),
    [(512, 512), ("512Mi", 512), ("4Gi", 4096), ("4G", 3815), ("1Ti", 1 << 20), ("100MB", 96)],
)
def test_memory_units(value: object, mib: int) -> None:
    assert units.memory_mib(value) == mib


def test_maro_lowercase_m_is_mib_only_when_asked() -> None:
    assert units.memory_mib("4096m", lowercase_m_is_mib=True) == 4096
    with pytest.raises(ValueError, match="unknown memory unit"):
        units.memory_mib("4096m")


@pytest.mark.parametrize(("value", "millis"), [(2, 2000), (0.5, 500), ("250m", 250), ("1.5", 1500)])
def test_cpu_units(value: object, millis: int) -> None:
    assert units.cpu_millis(value) == millis


@pytest.mark.parametrize(
    ("value", "seconds"), [(90, 90), ("90s", 90), ("2h", 7200), ("1d1m", 86460)]
)
def test_durations(value: object, seconds: int) -> None:
    assert units.duration_seconds(value) == seconds


def test_pai_templating_leaves_unknown_and_secrets() -> None:
    result = render(
        "a=<% $parameters.a %> u=<% $data.uri[1] %> s=<% $secrets.k %> x=<% $nope %>",
        {"parameters": {"a": 1}, "data": {"uri": ["u0", "u1"]}},
    )
    assert result.text == "a=1 u=u1 s=<% $secrets.k %> x=<% $nope %>"
    assert result.unresolved == ["nope"]
    assert result.secret_refs == ["secrets.k"]


def test_native_templating() -> None:
    result = render("{{ params.a }}-{{params.b}}", {"params": {"a": "x"}}, NATIVE_TOKEN)
    assert result.text == "x-{{params.b}}"
    assert result.unresolved == ["params.b"]


def test_secret_values_map_each_reference_as_written_and_fill_in_is_one_pass() -> None:
    command = "a=<%$secrets.k%> b=<% $secrets.docker.password %> c=<% $secrets.nope %> d=$K"
    secrets = {"k": "<% $secrets.k %>", "docker": '{"password": "pw"}'}
    values = secret_values(command, secrets)
    assert values == {"<%$secrets.k%>": "<% $secrets.k %>", "<% $secrets.docker.password %>": "pw"}
    assert fill_in(command, values) == "a=<% $secrets.k %> b=pw c=<% $secrets.nope %> d=$K"
    native = secret_values("x={{ secrets.k }}", {"k": "v"}, NATIVE_TOKEN)
    assert fill_in("x={{ secrets.k }}", native) == "x=v"
    assert fill_in("no refs", {}) == "no refs"
    assert missing_secrets(["secrets.k", "secrets.x.y", "secrets.x.y"], {"k": "v"}) == [
        "secrets.x.y"
    ]
