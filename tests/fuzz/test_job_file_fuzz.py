"""Hypothesis-made job files: valid files of every format (shoal's templates and examples, and
the OpenPAI and MARO samples in ../shared/compat when they are there) with hostile changes —
wrong types, huge, negative, NaN and infinite numbers, deep nesting, odd unicode (lone
surrogates escaped in JSON, NUL, right-to-left marks), names with ``/``, ``..`` and shell
metacharacters, alias bombs, cut-off text — sent through ``shoal job validate``, POST
/api/v1/jobs and POST /api/v2/jobs (tests/fuzz/jobfiles.py checks each answer).

Every problem must name a field path whose first part is a field of the file (or of a format's
top level, for a required field that is missing) or be about the whole file (``(file)``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st

from shoal.spec.errors import SpecError
from shoal.spec.loader import load_job_text
from tests.conftest import SHARED
from tests.fuzz.conftest import DERANDOMIZE, EXAMPLES
from tests.fuzz.jobfiles import Answers, api, every_door

__all__ = ["api"]

REPO = Path(__file__).resolve().parents[2]
SEED_FILES = [
    *sorted((REPO / "src/shoal/spec/templates").iterdir()),
    REPO / "examples/hello/job.yaml",
    REPO / "examples/pai-v1/job.json",
    REPO / "examples/pytorch-ddp/job.yaml",
    REPO / "examples/rl-actor-learner/job.yaml",
    *sorted((SHARED / "compat/pai").glob("*.yaml")),
    SHARED / "compat/maro/process/process_job_deployment.yml",
    SHARED / "compat/maro/process/process_schedule_deployment.yml",
    SHARED / "compat/maro/local-v0.3/rl_workflow_job_template.yml",
]
# Top-level fields of every format (a problem about a missing required one names it) and the key
# an alias bomb is put under.
FORMAT_FIELDS = frozenset(
    (
        "version",
        "name",
        "description",
        "vc",
        "priority",
        "runtime",
        "gang",
        "retries",
        "max_runtime",
        "code_dir",
        "data",
        "env",
        "params",
        "secrets",
        "roles",
        "array",
        "protocolVersion",
        "type",
        "contributor",
        "prerequisites",
        "parameters",
        "jobRetryCount",
        "taskRoles",
        "deployments",
        "defaults",
        "extras",
        "jobName",
        "image",
        "virtualCluster",
        "retryCount",
        "codeDir",
        "dataDir",
        "outputDir",
        "mode",
        "components",
        "job_names",
        "scenario_path",
        "main",
        "zz",
    )
)
HOSTILE_TEXT = [
    "../../etc/passwd",
    "a/b",
    "..",
    "$(reboot)",
    "`id`",
    "a; rm -rf /",
    "a|b&&c",
    "\x00",
    "a\x00b",
    "\ud800",
    "\udfff",
    "x\ud83d",
    "\u202egnp.exe",
    "\ufeff",
    "💥" * 50,
    "a" * 5000,
    "1e400",
    "inf",
    "-inf",
    "nan",
    "NaN",
    "-1",
    "0",
    "500m",
    "4Gi",
    "9" * 400,
    "",
    " ",
    "\n",
    "{{ params.x }}",
    "<% $secrets.x %>",
    "*a",
    "&a",
    "!!python/object:os.system",
]
HOSTILE_NUMBERS = [0, -1, 1, 10**9, 2**63, -(2**63) - 1, 10**400, 1e400, -1e400, float("nan")]
HOSTILE_VALUE = st.deferred(
    lambda: st.one_of(
        st.sampled_from(HOSTILE_TEXT),
        st.sampled_from(HOSTILE_NUMBERS),
        st.integers(),
        st.floats(),
        st.booleans(),
        st.none(),
        st.text(st.characters(codec=None, exclude_categories=()), max_size=20),
        st.lists(HOSTILE_VALUE, max_size=3),
        st.dictionaries(st.sampled_from([*HOSTILE_TEXT[:12], "k"]), HOSTILE_VALUE, max_size=3),
        st.integers(2, 200).map(_nested),
    )
)
BOMB = (
    "{key}:\n  a: &a [x, x, x, x, x, x, x, x, x]\n  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n  f: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
)


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


def _seeds() -> list[tuple[str, dict[str, Any]]]:
    """Each seed file that validates as it is, parsed."""
    seeds = []
    for path in SEED_FILES:
        if not path.is_file():
            continue  # ../shared is not beside every checkout
        text = path.read_text()
        try:
            load_job_text(text)
        except SpecError:
            continue
        seeds.append((path.name, json.loads(json.dumps(yaml.safe_load(text), default=str))))
    return seeds


SEEDS = _seeds()


def _paths(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            found.extend(_paths(value, (*path, key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found.extend(_paths(value, (*path, index)))
    return found


@st.composite
def mutated_files(draw: st.DrawFn) -> tuple[str, str, set[str]]:
    """A seed with 1-3 hostile changes, as YAML or JSON text; the suffix; the fields it has."""
    _, seed = draw(st.sampled_from(SEEDS))
    data = json.loads(json.dumps(seed))  # a deep copy to change
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        target = draw(st.sampled_from(paths))
        parent = data
        for step in target[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "delete":
            del parent[target[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from([*HOSTILE_TEXT[:12], "extra"]))] = draw(HOSTILE_VALUE)
        else:
            parent[target[-1]] = draw(HOSTILE_VALUE)
    fields = set(data) | set(seed)
    as_json = draw(st.booleans())
    if as_json:
        text = json.dumps(data)  # lone surrogates travel escaped (\ud800), as JSON allows
    else:
        text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    text = draw(_text_change(text))
    return (
        text,
        ".json" if as_json and text.lstrip().startswith("{") else ".yaml",
        fields | _keys(text),
    )


def _keys(text: str) -> set[str]:
    """The top-level keys of the text as it was sent (junk may have renamed one), if it parses."""
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, ValueError, RecursionError):
        return set()
    return {str(key) for key in data} if isinstance(data, dict) else set()


@st.composite
def _text_change(draw: st.DrawFn, text: str) -> str:
    change = draw(st.sampled_from(["none", "none", "none", "bomb", "cut", "junk"]))
    if change == "bomb" and not text.lstrip().startswith("{"):
        return text + BOMB.format(key=draw(st.sampled_from(["zz", "roles", "taskRoles"])))
    if change == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if change == "junk":
        at = draw(st.integers(0, len(text)))
        junk = draw(
            st.sampled_from(["\t", "\x00", "\x07", "&", "*", "!!", "{", "]", "'", "\ud800"])
        )
        return text[:at] + junk + text[at:]
    return text


def _shown(key: str) -> str:
    """A key as problem paths show it: NUL and lone surrogates escaped (shoal/spec/source.py)."""
    return re.sub(r"[\x00\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", key)


def _names_a_field(answers: Answers, fields: set[str]) -> None:
    known = {_shown(str(field)) for field in fields} | FORMAT_FIELDS
    for problem in [*answers.cli, *answers.v1]:
        path = str(problem["path"])
        if not path:
            continue  # the whole file: (file)
        assert any(path == f or path.startswith((f + ".", f + "[")) for f in known), (
            problem,
            sorted(fields),
        )


@pytest.mark.skipif(not SEEDS, reason="no seed job file validates")
def test_mutated_job_files_get_clean_answers(api: TestClient, tmp_path: Path) -> None:
    @hypothesis.settings(
        max_examples=EXAMPLES * 15,
        deadline=None,
        database=None,
        derandomize=DERANDOMIZE,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=mutated_files())
    def run(case: tuple[str, str, set[str]]) -> None:
        text, suffix, fields = case
        _names_a_field(every_door(api, tmp_path, text, suffix), fields)

    run()
