"""Turn the bytes of a job file into plain data, with line numbers for every field path.

Rejects (with a line number where one exists): files over the size limit, bytes that are not UTF-8,
lone UTF-16 surrogates, YAML/JSON syntax errors, several YAML documents in one file, duplicate keys
(which PyYAML and ``json`` would otherwise resolve silently by keeping the last one), nesting deeper
than any job needs, YAML aliases that expand to more than a job file's worth of nodes (the "billion
laughs") and integers too long for Python to read — each before it can cost more than reading the
file once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shoal.spec.errors import SpecError, SpecProblem, join_path

MAX_JOB_FILE_BYTES = 1024 * 1024
# Real job files nest under 10 levels; the limit keeps every walk of the data far from Python's
# recursion limit (JSON nested 1,000 deep crashed ``json.loads``).
MAX_NESTING = 64
# Nodes YAML aliases may add beyond the file's own: anchors for shared settings stay well under it,
# an alias bomb (9 aliases of 9 aliases of ... of a list) crosses it at once and is never expanded.
MAX_ALIAS_NODES = 10_000
# Python refuses to read longer integers (sys.get_int_max_str_digits); no field takes one.
MAX_INT_DIGITS = 4000
NESTING_HINT = "job files nest a few levels deep: flatten the structure"
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# A JSON string (possessive, and an unterminated one runs to the end: linear on any input), a
# bracket, or an integer longer than Python reads (the look-behind starts each run once).
_JSON_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)|[\[\]{}]|(?<!\d)\d{' + str(MAX_INT_DIGITS + 1) + ",}",
    re.DOTALL,
)


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


def read_settings_file(path: Path) -> str:
    """A settings file's text (cloud file, cluster file, catalog): unreadable, too large or not
    UTF-8 is a :class:`SpecError` naming the file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError([SpecProblem("", f"cannot read {path}: {exc.strerror}")]) from None
    return decode_job_bytes(raw)


def parse_document(text: str) -> LoadedDocument:
    """Parse JSON (when the text starts with ``{``) or YAML, keeping a path-to-line map."""
    _refuse_surrogates(text)
    stripped = text.lstrip()
    document = _parse_json(text) if stripped.startswith("{") else _parse_yaml(text)
    _check_strings(document)
    return document


def _refuse_surrogates(text: str) -> None:
    """A lone UTF-16 surrogate (JSON ``"\\ud800"`` decodes to one) is no text: nothing can store,
    print or run it."""
    found = _SURROGATE.search(text)
    if found is None:
        return
    line = text.count("\n", 0, found.start()) + 1
    column = found.start() - text.rfind("\n", 0, found.start())
    raise SpecError(
        [
            SpecProblem(
                "",
                f"contains a lone UTF-16 surrogate U+{ord(found.group()):04X} at column {column}",
                "surrogates are only valid in pairs (\\ud83d\\ude00); write the character itself",
                line,
            )
        ]
    )


_BAD_CHARACTER = re.compile(r"[\x00\ud800-\udfff]")


def _check_strings(document: LoadedDocument) -> None:
    """Escapes write what the text may not hold: NUL (``\\0`` in YAML, ``\\u0000`` in JSON) and,
    in JSON, lone surrogates (``\\ud800``). No name, command or value can carry either (exec and
    the store refuse them), so each is refused at its field."""
    problems: list[SpecProblem] = []
    stack: list[tuple[object, str]] = [(document.data, "")]
    while stack and len(problems) < 20:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, child in value.items():
                # the key itself may hold one: the path shows it escaped, printable and storable
                shown = _BAD_CHARACTER.sub(lambda m: f"\\u{ord(m.group()):04x}", str(key))
                child_path = join_path(path, shown)
                stack.append((key, child_path))
                stack.append((child, child_path))
        elif isinstance(value, list):
            stack.extend((child, join_path(path, index)) for index, child in enumerate(value))
        elif isinstance(value, str) and (found := _BAD_CHARACTER.search(value)) is not None:
            what = "a NUL character" if found.group() == "\x00" else "a lone UTF-16 surrogate"
            problems.append(
                SpecProblem(
                    path,
                    f"contains {what} (U+{ord(found.group()):04X})",
                    "remove it: no name, command or value can hold one",
                    document.line_of.get(path),
                )
            )
    if problems:
        raise SpecError(sorted(problems, key=lambda p: p.path))


def _check_json_shape(text: str) -> None:
    """Refuse JSON nested deeper than MAX_NESTING or holding an integer too long to read, before
    ``json.loads`` recurses into it (it raises RecursionError, not a decode error)."""
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        kind = token.group()[0]
        if kind == '"':
            continue
        line = text.count("\n", 0, token.start()) + 1
        if kind not in "[]{}":
            raise SpecError(
                [
                    SpecProblem(
                        "",
                        f"has an integer of {len(token.group())} digits",
                        "no field takes a number that long",
                        line,
                    )
                ]
            )
        depth += 1 if kind in "[{" else -1
        if depth > MAX_NESTING:
            raise SpecError(
                [SpecProblem("", f"nests more than {MAX_NESTING} levels deep", NESTING_HINT, line)]
            )


def _parse_json(text: str) -> LoadedDocument:
    _check_json_shape(text)
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
            _walk(node, line_of, [])
    except (yaml.YAMLError, SpecError):  # lines are a nicety; the checks above ran
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
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """Values YAML's resolver accepts but Python cannot build (``2024-13-45``, a date with month
    13) are syntax errors at their line, not a crash."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            what = node.value[:40] if isinstance(node.value, str) else node.tag
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {what!r}: {exc}", node.start_mark
            ) from None


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
        _walk(node, line_of, duplicates)
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
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, most controls)
        line = text.count("\n", 0, exc.position) + 1
        what = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        raise SpecError(
            [SpecProblem("", f"invalid YAML: character {what} is not allowed", None, line)]
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError([SpecProblem("", f"invalid YAML: {exc}")]) from None
    finally:
        loader.dispose()
    return LoadedDocument(data, False, line_of)


def _walk(root: yaml.Node, line_of: dict[str, int], dups: list[SpecProblem]) -> None:
    """Record the line of every field path and the duplicate keys, depth first without recursion.

    Refuses (SpecError) nesting deeper than MAX_NESTING, aliases that add more than
    MAX_ALIAS_NODES nodes (each node an alias repeats is walked again and counted, so a bomb is
    stopped after that many steps, never expanded) and integers longer than MAX_INT_DIGITS."""
    walked: set[int] = set()
    repeats = 0
    # node, its path, its depth, the path of its top-level field, where the alias it is in is used
    stack: list[tuple[yaml.Node, str, int, str, str | None]] = [(root, "", 0, "", None)]
    while stack:
        node, path, depth, top, alias_at = stack.pop()
        if id(node) in walked:
            alias_at = path if alias_at is None else alias_at
            repeats += 1
            if repeats > MAX_ALIAS_NODES:
                raise SpecError([_alias_bomb(alias_at, line_of)])
        walked.add(id(node))
        if depth > MAX_NESTING:
            raise SpecError([_too_deep(top, node)])
        line_of.setdefault(path, node.start_mark.line + 1)
        _check_scalar(node, path)
        children = _children(node, path, line_of, dups)
        for child_node, child_path in reversed(children):
            child_top = child_path if depth < 2 else top
            stack.append((child_node, child_path, depth + 1, child_top, alias_at))


def _children(
    node: yaml.Node, path: str, line_of: dict[str, int], dups: list[SpecProblem]
) -> list[tuple[yaml.Node, str]]:
    if isinstance(node, yaml.SequenceNode):
        return [(item, join_path(path, index)) for index, item in enumerate(node.value)]
    if not isinstance(node, yaml.MappingNode):
        return []
    children: list[tuple[yaml.Node, str]] = []
    seen: set[str] = set()
    for key_node, value_node in node.value:
        key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
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
        children.append((value_node, child))
    return children


def _check_scalar(node: yaml.Node, path: str) -> None:
    if (
        isinstance(node, yaml.ScalarNode)
        and node.tag == "tag:yaml.org,2002:int"
        and len(node.value) > MAX_INT_DIGITS
    ):
        raise SpecError(
            [
                SpecProblem(
                    path,
                    f"is an integer of {len(node.value)} digits",
                    "no field takes a number that long",
                    node.start_mark.line + 1,
                )
            ]
        )


def _too_deep(top: str, node: yaml.Node) -> SpecProblem:
    line = node.start_mark.line + 1
    return SpecProblem(top, f"nests more than {MAX_NESTING} levels deep", NESTING_HINT, line)


def _alias_bomb(alias_at: str, line_of: dict[str, int]) -> SpecProblem:
    return SpecProblem(
        alias_at,
        f"YAML aliases here expand to more than {MAX_ALIAS_NODES} extra values (an alias bomb?)",
        "write the values out, or share fewer and smaller anchors",
        line_of.get(alias_at),
    )
