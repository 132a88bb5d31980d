"""Every command, argument and option of `shoal` says what it is in `--help` (hidden ones aside):
`shoal node token revoke --help` once showed a bare TOKEN_ID and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from shoal.cli.main import app


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """``(path, command)`` for the root and every subcommand under it, depth first."""
    yield " ".join(("shoal", *path)), command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            yield from commands(sub, (*path, name))


def test_every_command_argument_and_option_has_help() -> None:
    root = typer.main.get_command(app)
    walked = list(commands(root))
    assert len(walked) > 80  # the whole tree, groups and their commands
    missing = []
    for path, command in walked:
        if not (command.help or command.short_help or "").strip():
            missing.append(f"{path}: the command")
        for param in command.params:
            if not param.hidden and not (getattr(param, "help", None) or "").strip():
                missing.append(f"{path}: {param.human_readable_name}")
    assert missing == [], "no help text:\n" + "\n".join(missing)
