"""OpenPAI-style ``<% $parameters.x %>`` / ``<% $data.uri[0] %>`` substitution in commands.

As in OpenPAI, unresolved references are left literally, and ``$secrets`` references are never
rendered into commands here: the agent renders them when it launches the task, so secret values do
not end up in the stored job or in any listing. ``secret_values`` maps each secret reference of a
stored command, exactly as written, to its value (the server sends that map with the launch order);
``shoal.protocol.fill_in`` substitutes them (the agent, just before it starts the task).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PAI_TOKEN = re.compile(r"<%\s*\$([A-Za-z_]\w*)((?:\.\w+|\[\d+\])*)\s*%>")
NATIVE_TOKEN = re.compile(r"\{\{\s*([A-Za-z_]\w*)((?:\.\w+|\[\d+\])*)\s*\}\}")
_STEP = re.compile(r"\.(\w+)|\[(\d{1,9})\]")  # at most 9 digits: int() of 5,000 fails


@dataclass(slots=True)
class RenderResult:
    text: str
    unresolved: list[str] = field(default_factory=list)
    secret_refs: list[str] = field(default_factory=list)


def render(
    text: str, context: Mapping[str, Any], token: re.Pattern[str] = PAI_TOKEN
) -> RenderResult:
    """Replace every ``<% $name.path %>`` (or native ``{{ name.path }}``) found in ``context``."""
    result = RenderResult(text)

    def substitute(match: re.Match[str]) -> str:
        root, rest = match.group(1), match.group(2)
        if root == "secrets":
            result.secret_refs.append(f"{root}{rest}")
            return match.group(0)
        found, value = _lookup(context.get(root), rest) if root in context else (False, None)
        if not found or isinstance(value, (dict, list)):
            result.unresolved.append(f"{root}{rest}")
            return match.group(0)
        return _scalar_text(value)

    result.text = token.sub(substitute, text)
    return result


def _lookup(value: Any, rest: str) -> tuple[bool, Any]:
    for step in _STEP.finditer(rest):
        key, index = step.group(1), step.group(2)
        if key is not None:
            if isinstance(value, Mapping) and key in value:
                value = value[key]
            elif (
                isinstance(value, list)
                and key.isdecimal()
                and len(key) <= 9
                and int(key) < len(value)
            ):
                value = value[int(key)]
            else:
                return False, None
        else:
            position = int(index)
            if isinstance(value, list) and position < len(value):
                value = value[position]
            else:
                return False, None
    return True, value


def _scalar_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def secret_names(refs: list[str]) -> list[str]:
    """The top-level secret names of references such as ``secrets.token`` or ``secrets.a.b``."""
    names = []
    for ref in refs:
        step = _STEP.match(ref, len("secrets"))
        names.append(step.group(1) or step.group(2) if step is not None else "")
    return names


def missing_secrets(refs: list[str], secrets: Mapping[str, str]) -> list[str]:
    """The references (``secrets.x``) that name no declared secret, in order, without repeats."""
    missing: list[str] = []
    for ref, name in zip(refs, secret_names(refs), strict=True):
        if name not in secrets and ref not in missing:
            missing.append(ref)
    return missing


def secret_values(
    text: str, secrets: Mapping[str, str], token: re.Pattern[str] = PAI_TOKEN
) -> dict[str, str]:
    """Each secret reference in ``text``, exactly as written, mapped to its value. A secret whose
    value is a JSON object or list can be indexed (``<% $secrets.docker.password %>``)."""
    structured = {name: _maybe_json(value) for name, value in secrets.items()}
    values: dict[str, str] = {}
    for match in token.finditer(text):
        if match.group(1) != "secrets":
            continue
        found, value = _lookup(structured, match.group(2))
        if found and not isinstance(value, (dict, list)):
            values[match.group(0)] = _scalar_text(value)
    return values


def _maybe_json(value: str) -> Any:
    if value.startswith(("{", "[")):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
