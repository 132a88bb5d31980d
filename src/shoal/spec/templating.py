"""OpenPAI-style ``<% $parameters.x %>`` / ``<% $data.uri[0] %>`` substitution in commands.

As in OpenPAI, unresolved references are left literally, and ``$secrets`` references are never
rendered into commands here: the agent renders them when it launches the task, so secret values do
not end up in the stored job or in any listing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PAI_TOKEN = re.compile(r"<%\s*\$([A-Za-z_]\w*)((?:\.\w+|\[\d+\])*)\s*%>")
NATIVE_TOKEN = re.compile(r"\{\{\s*([A-Za-z_]\w*)((?:\.\w+|\[\d+\])*)\s*\}\}")
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]")


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
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
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
