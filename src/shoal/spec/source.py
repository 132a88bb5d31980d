"""Turn the bytes of a job file into plain data, with line numbers for every field path.

Rejects (with a line number where one exists): files over the size limit, bytes that are not UTF-8,
YAML/JSON syntax errors, several YAML documents in one file, and duplicate keys (which PyYAML and
``json`` would otherwise resolve silently by keeping the last one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from shoal.spec.errors import SpecError, SpecProblem, join_path

MAX_JOB_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LoadedDocument:
    """A parsed job file: its data, whether it was JSON, and the source line of each field path."""

    data: Any
    is_json: bool
    line_of: dict[str, int]


def decode_job_bytes(raw: bytes, max_bytes: int = MAX_JOB_FILE_BYTES) -> str:
    if len(raw) > max_bytes:
        raise SpecError(
            [
                SpecProblem(
                    "",
                    f"file is {len(raw)} bytes, over the {max_bytes}-byte limit for job files",
                    "keep data and code out of the job file (use a code directory or a data "
                    "prerequisite) and reference them",
                )
            ]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(
            [
                SpecProblem(
                    "",
                    f"file is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                    "save the file as UTF-8",
                    line,
                )
            ]
        ) from None
    return text.removeprefix("\ufeff")


def parse_document(text: str) -> LoadedDocument:
    """Parse JSON (when the text starts with ``{``) or YAML, keeping a path-to-line map."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _parse_json(text)
    return _parse_yaml(text)


def _parse_json(text: str) -> LoadedDocument:
    duplicates: list[str] = []

    def reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                duplicates.append(key)
            seen[key] = value
        return seen

    try:
        data = json.loads(text, object_pairs_hook=reject_duplicates)
    except json.JSONDecodeError as exc:
        raise SpecError(
            [
                SpecProblem(
                    "",
                    f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                    None,
                    exc.lineno,
                )
            ]
        ) from None
    line_of: dict[str, int] = {}
    try:  # JSON is (nearly) YAML: reuse the YAML composer just to learn line numbers.
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _walk(node, "", line_of, [])
    except yaml.YAMLError:
        pass
    if duplicates:
        raise SpecError(
            [
                SpecProblem(
                    key, "duplicate key in JSON object", "each name may appear only once", None
                )
                for key in duplicates
            ]
        )
    return LoadedDocument(data, True, line_of)


# libyaml's parser when PyYAML was built with it (the wheels are): about 10x faster.
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse_yaml(text: str) -> LoadedDocument:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError(
                [SpecProblem("", "the file is empty", "start from `shoal job template`")]
            )
        line_of: dict[str, int] = {}
        duplicates: list[SpecProblem] = []
        _walk(node, "", line_of, duplicates)
        if duplicates:
            raise SpecError(duplicates)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        column = f", column {mark.column + 1}" if mark is not None else ""
        what = exc.problem or exc.context or "syntax error"
        raise SpecError(
            [SpecProblem("", f"invalid YAML: {what} (line {line}{column})", None, line)]
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError([SpecProblem("", f"invalid YAML: {exc}")]) from None
    finally:
        loader.dispose()
    return LoadedDocument(data, False, line_of)


def _walk(node: yaml.Node, path: str, line_of: dict[str, int], dups: list[SpecProblem]) -> None:
    line_of.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = join_path(path, key)
            if key in seen:
                dups.append(
                    SpecProblem(
                        child,
                        f"duplicate key {key!r}",
                        "each name may appear only once in a mapping",
                        key_node.start_mark.line + 1,
                    )
                )
            seen.add(key)
            line_of[child] = key_node.start_mark.line + 1
            _walk(value_node, child, line_of, dups)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, join_path(path, index), line_of, dups)
