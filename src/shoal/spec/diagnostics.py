"""Translate pydantic validation errors into problems a person can act on.

pydantic does the type and range checking; this module only words its findings in the user's terms:
``taskRoles.worker.resourcePerInstance.gpu: must be an integer >= 0, got -1``.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from types import UnionType
from typing import Any, TypeVar, Union, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from shoal.spec.errors import ProblemCollector, SpecProblem, join_path
from shoal.spec.patterns import (
    ENV_NAME_PATTERN,
    JOB_NAME_PATTERN,
    PAI_JOB_NAME_PATTERN,
    PORT_LABEL_PATTERN,
    ROLE_NAME_PATTERN,
)

PATTERN_WORDS: dict[str, tuple[str, str]] = {
    JOB_NAME_PATTERN: (
        "must be 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit",
        "rename the job, e.g. 'mnist-run_1'",
    ),
    PAI_JOB_NAME_PATTERN: (
        "must be 1-255 letters, digits, '_' or '-' (OpenPAI job names)",
        "rename the job, e.g. 'mnist-run_1'",
    ),
    ROLE_NAME_PATTERN: (
        "must be an identifier (a letter or '_' then letters, digits or '_'), at most 64 chars",
        "role names become parts of environment variable names, e.g. 'worker' or 'param_server'",
    ),
    PORT_LABEL_PATTERN: (
        "must be an identifier (a letter or '_' then letters, digits or '_')",
        "port labels become parts of environment variable names, e.g. 'http' or 'SynPort'",
    ),
    ENV_NAME_PATTERN: (
        "must be a valid environment variable name",
        "use letters, digits and '_', not starting with a digit",
    ),
}

_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
}


def describe(value: Any) -> str:
    """A short, safe rendering of a user's value for an error message."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


Model = TypeVar("Model", bound=BaseModel)


def validate_collecting(
    model: type[Model], data: Any, problems: ProblemCollector, prefix: str = ""
) -> Model | None:
    """Validate, recording problems instead of raising, so every part of a file gets checked."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems.errors.extend(validation_problems(exc, model, prefix))
        return None


def salvage(
    model: type[Model], data: Any, exc: ValidationError, stand_ins: Mapping[str, Any]
) -> tuple[Model, frozenset[str]] | None:
    """What can still be checked after pydantic refused ``data``: a copy with each refused value
    taken out (its default applies; an unknown field goes) and each missing required field given
    its ``stand_ins`` value (by field name), validated again (a few rounds, as taking a value out
    can leave a required one missing). Returns the model and the dotted paths changed, or None
    when it cannot be made valid (a required field with no stand-in, say). The reader then checks
    single values on the rest of the file, so a file's errors come in one report, not two."""
    fixed = copy.deepcopy(data)
    changed: set[str] = set()
    for _ in range(4):
        drops: dict[tuple[int, int | str], tuple[Any, int | str]] = {}  # one per value
        for err in exc.errors(include_url=False):
            loc = [p for p in err["loc"] if not (isinstance(p, str) and _is_internal_loc(p))]
            steps = _steps(fixed, loc)
            missing = err["type"] == "missing" and len(steps) == len(loc) - 1
            if missing:
                holder = steps[-1][2] if steps else fixed
                name = loc[-1]
                if not isinstance(holder, dict) or not isinstance(name, str):
                    return None
                if name not in stand_ins:
                    return None
                holder[name] = copy.deepcopy(stand_ins[name])
                changed.add(_path(loc, ""))
            elif steps:
                container, key, _ = steps[-1]
                drops[(id(container), key)] = (container, key)
                changed.add(_path(loc[: len(steps)], ""))
            else:
                return None  # the document itself: nothing to take out
        # list items last to first, so the indexes still to drop stay right
        ordered = sorted(drops.values(), key=lambda d: -d[1] if isinstance(d[1], int) else 0)
        for container, key in ordered:
            if isinstance(container, dict):
                container.pop(key, None)
            elif isinstance(key, int) and key < len(container):
                del container[key]
        try:
            return model.model_validate(fixed), frozenset(changed)
        except ValidationError as again:
            exc = again
    return None


def _steps(data: Any, loc: Sequence[int | str]) -> list[tuple[Any, int | str, Any]]:
    """``(container, key, value)`` for each step of ``loc`` that exists in ``data``, in order;
    the rest of ``loc`` (a missing field, or a union member's name) is not in the data."""
    steps: list[tuple[Any, int | str, Any]] = []
    current = data
    for part in loc:
        in_mapping = isinstance(current, dict) and part in current
        in_list = isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        if not (in_mapping or in_list):
            break
        steps.append((current, part, current[part]))
        current = current[part]
    return steps


def under(path: str, paths: Iterable[str]) -> bool:
    """Whether ``path`` is one of ``paths`` or inside one of them."""
    return any(path == p or path.startswith((p + ".", p + "[")) for p in paths)


_UNION_MEMBER = re.compile(r"^(str|int|float|bool|list\[.*\]|dict\[.*\]|constrained-\w+)$")
_MEMBER_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true/false"}


def validation_problems(
    exc: ValidationError, model: type[BaseModel], prefix: str = ""
) -> list[SpecProblem]:
    members: dict[tuple[int | str, ...], list[ErrorDetails]] = {}
    plain: list[ErrorDetails] = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        is_type_error = err["type"] in _TYPE_WORDS
        last = loc[-1] if loc else None
        if len(loc) > 1 and is_type_error and isinstance(last, str) and _UNION_MEMBER.match(last):
            members.setdefault(tuple(loc[:-1]), []).append(err)
            continue
        plain.append(err)
    problems = [_problem(err, model, prefix) for err in plain]
    for loc, errs in members.items():
        if len(errs) == 1:
            problems.append(_problem({**errs[0], "loc": loc}, model, prefix))
            continue
        kinds = [_member_word(str(e["loc"][-1])) for e in errs]
        accepted = " or ".join(dict.fromkeys(kinds))
        value = describe(errs[0].get("input"))
        problems.append(SpecProblem(_path(loc, prefix), f"must be {accepted}, got {value}"))
    unique: dict[tuple[str, str], SpecProblem] = {}
    for problem in problems:
        unique.setdefault((problem.path, problem.message), problem)
    return list(unique.values())


def _member_word(tag: str) -> str:
    if tag in _MEMBER_WORDS:
        return _MEMBER_WORDS[tag]
    if tag.startswith("list["):
        return "a list"
    if tag.startswith("dict["):
        return "a mapping"
    return _MEMBER_WORDS.get(tag.removeprefix("constrained-"), tag)


def _path(loc: Sequence[int | str], prefix: str) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, str) and part.startswith(("function-", "union[", "tagged-union[")):
            continue
        path = join_path(path, part)
    return path


def _problem(err: ErrorDetails, model: type[BaseModel], prefix: str) -> SpecProblem:
    kind = err["type"]
    loc = [p for p in err["loc"] if not (isinstance(p, str) and _is_internal_loc(p))]
    path = _path(loc, prefix)
    value = err.get("input")
    ctx = err.get("ctx") or {}
    got = f", got {describe(value)}"
    if kind == "missing":
        return SpecProblem(path, "is required", None)
    if kind == "extra_forbidden":
        known = _known_fields(model, loc[:-1])
        suggestion = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {suggestion[0]!r}?" if suggestion else None
        if hint is None and known:
            hint = "known fields: " + ", ".join(sorted(known))
        return SpecProblem(path, "unknown field", hint)
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {
            "greater_than_equal": ">=",
            "greater_than": ">",
            "less_than_equal": "<=",
            "less_than": "<",
        }[kind]
        bound = next(iter(ctx.values()), "?")
        noun = "an integer" if isinstance(value, int) else "a number"
        return SpecProblem(path, f"must be {noun} {op} {bound}{got}", None)
    if kind == "string_pattern_mismatch":
        words, hint = PATTERN_WORDS.get(
            str(ctx.get("pattern")), (f"must match {ctx.get('pattern')}", "")
        )
        return SpecProblem(path, f"{words}{got}", hint or None)
    if kind in ("literal_error", "enum"):
        return SpecProblem(path, f"must be one of {ctx.get('expected')}{got}", None)
    if kind in ("too_short", "too_long"):
        limit = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        bound = "at least" if kind == "too_short" else "at most"
        noun = "characters" if isinstance(value, str) else "item" if limit == 1 else "items"
        return SpecProblem(path, f"must have {bound} {limit} {noun}", None)
    if kind in ("string_too_short", "string_too_long"):
        limit = ctx.get("min_length", ctx.get("max_length"))
        bound = "at least" if kind == "string_too_short" else "at most"
        return SpecProblem(path, f"must have {bound} {limit} characters", None)
    if kind in _TYPE_WORDS:
        return SpecProblem(path, f"must be {_TYPE_WORDS[kind]}{got}", None)
    if kind in ("value_error", "assertion_error"):
        message = str(ctx.get("error", err["msg"]))
        return SpecProblem(path, message, None)
    return SpecProblem(path, f"{err['msg'].lower()}{got}", None)


def _is_internal_loc(part: str) -> bool:
    return part == "[key]" or part.startswith(
        ("function-", "union[", "tagged-union[", "lax-or-strict")
    )


def _known_fields(model: type[BaseModel], loc: Iterable[int | str]) -> list[str]:
    """Field aliases of the model at ``loc``, following nested models and dict/list values."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    found = _unwrap(current)
    if isinstance(found, type) and issubclass(found, BaseModel):
        return [f.alias or name for name, f in found.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    """Drop ``None`` from ``X | None`` so the interesting type is left."""
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and args:
        return args[0]
    return annotation


def _step(annotation: Any, part: int | str) -> Any:
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
        return None
    origin = get_origin(annotation)
    args: tuple[Any, ...] = getattr(annotation, "__args__", ())
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (list, tuple) and args:
        return args[0]
    return None
