"""``--array`` on the command line and arrays as text: a mistyped expression is named before
anything is sent (exit 2), the parent's list row counts its elements, and ``job status`` folds
runs of elements that look alike into one row."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.cli.job_text import array_counts_text, elements_text, list_text, status_text
from tests.cli.test_job_cli import shoal
from tests.cli.test_job_views import summary

JOB = "version: 1\nname: sweep\nroles:\n  w:\n    command: 'true'\n"


@pytest.mark.parametrize(
    ("array", "said", "fix"),
    [
        ("0-", "'0-' is not an index", "e.g. 0-999%50"),
        ("9-5", "runs backwards", "write 5-9"),
        ("0-99999", "at most 10,000", "split it into several arrays"),
    ],
)
def test_a_bad_array_is_named_before_any_server_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, array: str, said: str, fix: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    monkeypatch.setenv("SHOAL_URL", "http://127.0.0.1:9")  # nothing listens: never reached
    result = shoal("job", "submit", str(job), "--array", array)
    assert result.returncode == 2
    assert "--array" in result.stderr and said in result.stderr
    assert fix in result.stderr
    assert "no shoal server" not in result.stderr


ARRAY = {"expression": "0-999%50", "size": 1000, "cap": 50, "held": 900}


def test_the_parent_row_counts_its_elements() -> None:
    counts = {"RUNNING": 20, "WAITING": 930, "SUCCEEDED": 50}
    assert array_counts_text({**ARRAY, "counts": counts}) == (
        "1000 elements: 20 running, 30 waiting, 900 held, 50 succeeded"
    )
    row = summary("7", "sweep", state="RUNNING", array={**ARRAY, "counts": counts})
    assert "array 1000 elements: 20 running" in list_text([row], wide=True, width=None)


def element(index: int, state: str, **extra: object) -> dict[str, object]:
    return {
        "id": f"7_{index}",
        "index": index,
        "state": state,
        "pending": None,
        "launchedAt": None,
        "completedAt": None,
        "exitClass": None,
        "exitCode": None,
        "nodes": [],
        **extra,
    }


def test_status_folds_runs_of_elements_that_look_alike() -> None:
    held = {"code": "ArrayConcurrencyLimit", "message": "m"}
    elements = [
        element(0, "SUCCEEDED", exitCode=0, exitClass="SUCCEEDED"),
        element(1, "SUCCEEDED", exitCode=0, exitClass="SUCCEEDED"),
        element(2, "FAILED", exitCode=3, exitClass="USER_FAILURE"),
        element(3, "RUNNING", nodes=["node-0"]),
        element(4, "RUNNING", nodes=["node-0"]),
        *(element(i, "WAITING", pending=held) for i in range(5, 1000)),
    ]
    text = elements_text(elements, "7", width=None)
    lines = text.splitlines()
    assert len(lines) == 5  # a header and four runs
    assert lines[1].split() == ["7_[0-1]", "SUCCEEDED", "-", "0", "SUCCEEDED"]
    assert lines[2].split() == ["7_2", "FAILED", "-", "3", "USER_FAILURE"]
    assert lines[3].split()[:3] == ["7_[3-4]", "RUNNING", "node-0"]
    assert lines[4].split() == ["7_[5-999]", "WAITING", "-", "-", "ArrayConcurrencyLimit"]
    detail = {
        **summary("7", "sweep", state="RUNNING", array={**ARRAY, "counts": {}}),
        "diagnostics": "",
        "tasks": [],
        "elements": elements,
    }
    status = status_text(detail, None, width=None)
    assert "array 0-999%50, at most 50 at once" in status and "7_[5-999]" in status


def test_an_element_says_which_array_it_belongs_to() -> None:
    detail = {
        **summary("7_3", "sweep", arrayJobId="7", arrayIndex=3, pending=None),
        "diagnostics": "",
        "tasks": [],
    }
    assert "element 3 of array 7" in status_text(detail, None, width=None)
