"""What every remote command shares: finding the server, one-line errors, JSON output."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar

import typer

from shoal.cli.render import err_console, labelled
from shoal.client import ShoalClient, ShoalError

P = ParamSpec("P")
R = TypeVar("R")


class SchedulerPlace(StrEnum):
    """``shoal server --scheduler``: where scheduling cycles run (docs/architecture.md)."""

    PROCESS = "process"
    THREAD = "thread"


SCHEDULER_OPTION = typer.Option(
    SchedulerPlace.PROCESS,
    "--scheduler",
    help="Where cycles run: a process of their own (never stalls the API) or a thread.",
)


class RuntimeChoice(StrEnum):
    """How a job runs when its file does not say (``--runtime``, docs/containers.md)."""

    PROCESS = "process"
    CONTAINER = "container"


class OutputFormat(StrEnum):
    """Every read command's ``-o``: ``wide`` adds columns where a command has a table (elsewhere
    it is ``text``); ``json`` and ``yaml`` print the API's data as it is."""

    TEXT = "text"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


OUTPUT_OPTION = typer.Option(
    OutputFormat.TEXT, "--output", "-o", help="text, wide (more columns), json or yaml."
)


def client() -> ShoalClient:
    return ShoalClient.from_environment()


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(labelled("error", "bold red", f": {message}"))
    return typer.Exit(code)


def api_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn the server's "no" (or its absence) into one clear line and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except ShoalError as exc:
            details = [
                p.get("message", "") if isinstance(p, dict) else str(p) for p in exc.problems[:10]
            ]
            message = error_text(exc)
            if exc.code == "InvalidJobSpec" and details:
                message = "the job file has errors:\n  " + "\n  ".join(
                    _render_problem(p) for p in exc.problems[:20]
                )
            raise fail(message) from None

    return wrapper


def error_text(exc: ShoalError) -> str:
    """The server's message; a refusal (403) also names its status and code, so "not allowed"
    reads apart from "not there"."""
    if exc.status == 403:
        return f"{exc.message} ({exc.status} {exc.code})"
    return exc.message


def _render_problem(problem: Any) -> str:
    if not isinstance(problem, dict):
        return str(problem)
    where = problem.get("path") or "(file)"
    if problem.get("line"):
        where += f" (line {problem['line']})"
    hint = f"; {problem['hint']}" if problem.get("hint") else ""
    return f"{where}: {problem.get('message')}{hint}"


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def print_yaml(data: Any) -> None:
    import yaml  # only when asked for

    plain = json.loads(json.dumps(data, default=str))  # the same values as -o json shows
    typer.echo(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True), nl=False)


def emit(data: Any, output: OutputFormat) -> bool:
    """Print ``data`` as JSON or YAML if that is the format asked for; False for text/wide."""
    if output is OutputFormat.JSON:
        print_json(data)
    elif output is OutputFormat.YAML:
        print_yaml(data)
    else:
        return False
    return True
