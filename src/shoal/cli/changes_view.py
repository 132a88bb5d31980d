"""Print what an admin edit changed (or would change): `setting  before -> after` per line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shoal.cli.render import console

Formatter = Callable[[str, Any], str]


def plain(_: str, value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items())) or "none"
    if value == "":
        return '""'
    return str(value)


def print_changes(
    what: str, result: dict[str, Any], label: Callable[[str], str], fmt: Formatter = plain
) -> None:
    """``what``: e.g. "virtual cluster team-a"; ``result``: the API's ``{changes, dryRun}``."""
    changes = result["changes"]
    if not changes:
        console.print(f"{what}: no change (it already has these settings)", markup=False)
        return
    verb = "would change (dry run, nothing written)" if result["dryRun"] else "updated"
    console.print(f"{what} {verb}:", markup=False)
    width = max(len(label(c["field"])) for c in changes)
    for change in changes:
        name = change["field"]
        before, after = fmt(name, change["before"]), fmt(name, change["after"])
        console.print(f"  {label(name):<{width}}  {before} -> {after}", markup=False)
