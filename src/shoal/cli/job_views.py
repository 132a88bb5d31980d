"""``shoal job list|status|describe|why|events``: read-only views of jobs, with ``-w`` (watch),
``-o text|wide|json|yaml``, and tables that never cut a value."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import typer

from shoal.cli.columns import terminal_width
from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.cli.job_commands import job_app
from shoal.cli.job_text import (
    ACTIVE_STATES,
    JOB_STATES,
    describe_text,
    event_line,
    list_text,
    since_epoch,
    status_text,
    why_text,
)
from shoal.client import TERMINAL, ShoalClient

JOB_ARGUMENT = typer.Argument(..., help="Job id, name, or USER~NAME.")
WATCH_OPTION = typer.Option(False, "--watch", "-w", help="Redraw when something changes.")
INTERVAL_OPTION = typer.Option(
    1.0, "--interval", min=0.2, max=60, help="Seconds between polls with --watch."
)

# poll() -> (data for json/yaml, text for a person, done)
Poll = Callable[[], tuple[Any, str, bool]]


def watch(poll: Poll, output: OutputFormat, interval: float) -> None:
    """Poll every ``interval`` s and show what changed: redrawn in place on a terminal, appended
    snapshots when piped (``--- time`` then the text; one JSON line; a YAML document). Ends
    when ``done`` or on Ctrl-C (exit 0)."""
    try:
        if output in (OutputFormat.TEXT, OutputFormat.WIDE) and sys.stdout.isatty():
            _watch_live(poll, interval)
        else:
            _watch_appending(poll, output, interval)
    except KeyboardInterrupt:
        pass


def _watch_live(poll: Poll, interval: float) -> None:
    from rich.live import Live
    from rich.text import Text

    from shoal.cli.render import console

    _, text, done = poll()
    with Live(Text(text), console=console, auto_refresh=False, vertical_overflow="visible") as live:
        while not done:
            time.sleep(interval)
            _, new_text, done = poll()
            if new_text != text:
                text = new_text
                live.update(Text(text), refresh=True)


def _watch_appending(poll: Poll, output: OutputFormat, interval: float) -> None:
    last: str | None = None
    while True:
        data, text, done = poll()
        if output is OutputFormat.JSON:
            shown = json.dumps(data, default=str)
        elif output is OutputFormat.YAML:
            import yaml

            shown = "---\n" + yaml.safe_dump(data, sort_keys=False).rstrip("\n")
        else:
            shown = text
        if shown != last:
            stamp = time.strftime("--- %H:%M:%S\n") if output not in _DATA else ""
            sys.stdout.write(f"{stamp}{shown}\n")
            sys.stdout.flush()
            last = shown
        if done:
            return
        time.sleep(interval)


_DATA = (OutputFormat.JSON, OutputFormat.YAML)


def _states(state: list[str] | None, all_jobs: bool) -> list[str] | None:
    states = [s.upper() for s in state] if state else None
    for s in states or []:
        if s not in JOB_STATES:
            raise fail(f"--state {s}: not a job state; use one of {', '.join(JOB_STATES)}", 2)
    if states is None and not all_jobs:
        return ACTIVE_STATES
    return states


@job_app.command("list")
@api_errors
def list_jobs(
    state: list[str] | None = typer.Option(None, "--state", help="Only jobs in this state."),
    all_jobs: bool = typer.Option(False, "--all", help="Include finished jobs."),
    all_users: bool = typer.Option(
        False, "--all-users", "-A", help="Every user's jobs (others' as summaries)."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Only jobs submitted since: 30m, 12h, 7d, 2w or a date."
    ),
    limit: int = typer.Option(
        100, "--limit", min=1, max=10000, help="Show at most this many jobs (the newest)."
    ),
    watch_it: bool = WATCH_OPTION,
    interval: float = INTERVAL_OPTION,
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Jobs, newest first (unfinished ones unless --all or --state); yours unless -A (admins
    see everyone's). Piped, every value is printed in full."""
    states = _states(state, all_jobs)
    try:
        after = None if since is None else since_epoch(since, time.time())
    except ValueError as exc:
        raise fail(f"--since {exc}", 2) from None
    api = client()

    def poll() -> tuple[Any, str, bool]:
        jobs = api.jobs(states, limit, all_users=all_users, since=after)
        return jobs, list_text(jobs, output is OutputFormat.WIDE, terminal_width()), False

    if watch_it:
        watch(poll, output, interval)
        return
    jobs, text, _ = poll()
    if not emit(jobs, output):
        typer.echo(text)


def _status(api: ShoalClient, job: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    detail = api.job(job)
    why = api.why(detail["id"]) if detail["state"] == "WAITING" else None
    return detail, why


@job_app.command("status")
@api_errors
def job_status(
    job: str = JOB_ARGUMENT,
    watch_it: bool = WATCH_OPTION,
    interval: float = INTERVAL_OPTION,
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """A job's state, its tasks, and why it waits (if it does). With -w, it follows the job
    until it ends (or Ctrl-C)."""
    api = client()

    def poll() -> tuple[Any, str, bool]:
        detail, why = _status(api, job)
        return detail, status_text(detail, why, terminal_width()), detail["state"] in TERMINAL

    if watch_it:
        watch(poll, output, interval)
        return
    detail, text, _ = poll()
    if not emit(detail, output):
        typer.echo(text)


@job_app.command()
@api_errors
def describe(job: str = JOB_ARGUMENT, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Everything about a job on one screen: fields, why it waits, tasks and events."""
    api = client()
    detail, why = _status(api, job)
    events_ = api.events(detail["id"])
    if not emit({"job": detail, "why": why, "events": events_}, output):
        typer.echo(describe_text(detail, why, events_, terminal_width()))


@job_app.command()
@api_errors
def events(job: str = JOB_ARGUMENT, output: OutputFormat = OUTPUT_OPTION) -> None:
    """What happened to a job, in time order."""
    rows = client().events(job)
    if not emit(rows, output):
        for e in rows:
            typer.echo(event_line(e))


@job_app.command()
@api_errors
def why(job: str = JOB_ARGUMENT, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Why is this job pending? Its reason, queue position, and the jobs in its way (with their
    user, name and GPUs)."""
    detail = client().why(job)
    if not emit(detail, output):
        typer.echo(why_text(detail))
