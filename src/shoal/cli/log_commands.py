"""``shoal job logs`` (every task merged, tails, since, timestamps, earlier attempts, follow) and
the live progress of ``shoal job submit --wait``."""

from __future__ import annotations

import heapq
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import typer

from shoal.cli.common import api_errors, client
from shoal.cli.job_commands import job_app
from shoal.cli.render import err_console
from shoal.client import TERMINAL, ShoalClient

POLL_S = 0.3
FAILURE_TAIL = 20


@dataclass(frozen=True)
class Selection:
    """What ``job logs`` reads: one job attempt's streams, of all tasks or one."""

    job: str
    attempt: str | None = None
    previous: bool = False
    role: str | None = None
    index: int | None = None
    stream: str | None = None
    since: str | None = None

    def query(self, **extra: Any) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "previous": self.previous,
            "role": self.role,
            "index": self.index,
            "stream": self.stream,
            "since": self.since,
            **extra,
        }


@dataclass(frozen=True)
class Shown:
    at: float
    label: str
    text: str


def parse_task(task: str | None) -> tuple[str | None, int | None]:
    if task is None:
        return None, None
    role, _, index = task.partition("/")
    if not role or not (index.isdigit() or not index):
        raise typer.BadParameter("use ROLE/INDEX, e.g. worker/0", param_hint="--task")
    return role, int(index or 0)


def _key(stream: dict[str, Any]) -> str:
    return f"{stream['role']}/{stream['index']}/{stream['stream']}"


def _cursor(stream: dict[str, Any]) -> str:
    return f"{_key(stream)}/{stream['taskAttempt']}:{stream['nextOffset']}"


def _shown(stream: dict[str, Any], labelled: bool) -> list[Shown]:
    label = f"[{stream['role']}/{stream['index']}] " if labelled else ""
    return [Shown(line["at"], label, line["text"]) for line in stream["lines"]]


def _write(lines: Iterable[Shown], timestamps: bool) -> None:
    for line in lines:
        stamp = ""
        if timestamps:
            stamp = datetime.fromtimestamp(line.at).astimezone().isoformat("T", "milliseconds")
            stamp += " "
        sys.stdout.write(f"{stamp}{line.label}{line.text}\n")
    sys.stdout.flush()


def _pages(
    api: ShoalClient, sel: Selection, job_attempt: int, stream: dict[str, Any], labelled: bool
) -> Iterator[Shown]:
    """One stream's lines, fetching its next pages (pinned to its attempt) as they are read."""
    while True:
        yield from _shown(stream, labelled)
        if not stream["more"]:
            return
        pinned = Selection(
            sel.job,
            attempt=f"{job_attempt}.{stream['taskAttempt']}",
            role=stream["role"],
            index=stream["index"],
            stream=stream["stream"],
            since=sel.since,
        )
        answer = api.log_lines(sel.job, **pinned.query(cursors=[_cursor(stream)]))
        (stream,) = answer["streams"]


def print_stored(api: ShoalClient, sel: Selection, tail: int | None, timestamps: bool) -> None:
    """What is stored now, merged in time order; with ``tail``, the last lines overall."""
    labelled = sel.role is None
    first = api.log_lines(sel.job, **sel.query(tail=tail))
    if not first["streams"]:
        err_console.print(f"job {first['id']} is {first['state']}: no task has started yet")
        return
    if tail is not None:  # each stream's last `tail` lines hold the last `tail` overall
        merged = sorted(
            (line for s in first["streams"] for line in _shown(s, labelled)),
            key=lambda line: line.at,
        )
        _write(merged[len(merged) - tail :] if tail else [], timestamps)
        return
    pages = [_pages(api, sel, first["jobAttempt"], s, labelled) for s in first["streams"]]
    _write(heapq.merge(*pages, key=lambda line: line.at), timestamps)


def follow(api: ShoalClient, sel: Selection, tail: int | None, timestamps: bool) -> None:
    """Print lines as they arrive (each poll's batch in time order) until the job is final;
    a task retried in place has its earlier try read to the end first, and a job requeued to
    a new attempt is followed there (announced on stderr)."""
    labelled = sel.role is None
    read: dict[str, dict[str, Any]] = {}  # per stream: the last answer (its try and offset)
    followed: int | None = None
    extra: dict[str, Any] = {"tail": tail}
    while True:
        pinned = Selection(
            sel.job,
            sel.attempt or (None if followed is None else str(followed)),
            sel.previous and followed is None,
            *(sel.role, sel.index, sel.stream, sel.since),
        )
        answer = api.log_lines(
            sel.job, **pinned.query(cursors=[_cursor(s) for s in read.values()], **extra)
        )
        extra = {}
        streams = answer["streams"]
        batch: list[Shown] = []
        for stream in streams:
            before = read.get(_key(stream))
            if before is not None and before["taskAttempt"] != stream["taskAttempt"]:
                rest = {**before, "lines": [], "more": True}  # the earlier try's last lines
                batch.extend(_pages(api, sel, answer["jobAttempt"], rest, labelled))
            batch.extend(_shown(stream, labelled))
            read[_key(stream)] = stream
        _write(sorted(batch, key=lambda line: line.at), timestamps)
        if answer["jobAttempt"] in answer["attempts"]:
            followed = answer["jobAttempt"]
        if any(s["more"] for s in streams):
            continue
        drained = all(s["complete"] for s in streams)
        moved_on = answer["currentAttempt"] != answer["jobAttempt"]
        if drained and moved_on and sel.attempt is None and not sel.previous:
            followed, read = None, {}  # the new attempt may have no tasks yet
            now = answer["currentAttempt"]
            err_console.print(f"--- job {answer['id']} attempt {now} ---", markup=False)
            continue
        if drained and (answer["state"] in TERMINAL or moved_on):
            return
        time.sleep(POLL_S)


@job_app.command()
@api_errors
def logs(
    job: str = typer.Argument(..., help="Job id or name."),
    task: str | None = typer.Option(None, "--task", help="Only ROLE/INDEX (no prefix)."),
    stdout: bool = typer.Option(False, "--stdout", help="Only stdout."),
    stderr: bool = typer.Option(False, "--stderr", help="Only stderr."),
    tail: int | None = typer.Option(
        None, "--tail", min=0, max=100000, help="Only the last N lines (of the merged output)."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Only lines shipped after: 10m, 1h, 2s, 1d or an RFC 3339 time."
    ),
    timestamps: bool = typer.Option(
        False, "--timestamps", help="Prefix each line with when it was shipped (within 250 ms)."
    ),
    attempt: str | None = typer.Option(
        None, "--attempt", help="Job attempt N (or N.M: task try M); default: the current."
    ),
    previous: bool = typer.Option(False, "--previous", help="The attempt before the current."),
    follow_: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing until the job is final."
    ),
) -> None:
    """Every task's stdout and stderr, merged in time order, each line prefixed [ROLE/INDEX]."""
    if attempt is not None and previous:
        raise typer.BadParameter("give --attempt or --previous, not both", param_hint="--attempt")
    role, index = parse_task(task)
    stream = "stdout" if stdout and not stderr else "stderr" if stderr and not stdout else None
    sel = Selection(job, attempt, previous, role, index, stream, since)
    api = client()
    try:
        if follow_:
            follow(api, sel, tail, timestamps)
        else:
            print_stored(api, sel, tail, timestamps)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    except BrokenPipeError:  # `| head`: the reader has all it wants
        sys.stderr.close()
        raise typer.Exit(0) from None


# ---- submit --wait ----


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at % 1 * 1000):03d}"


def stream_until_final(api: ShoalClient, job_id: str) -> dict[str, Any]:
    """Print the job's events as they happen, one line each, and return its final detail."""
    seen = 0
    while True:
        job = api.job(job_id)  # read before the events: the last poll then sees every event
        events = api.events(job_id)
        for event in events[seen:]:
            print(f"{_clock(event['at'])} job {job_id} {event['kind']:<8} {event['message']}")
            sys.stdout.flush()
        seen = len(events)
        if job["state"] in TERMINAL:
            return job
        time.sleep(POLL_S)


def failing_task(job: dict[str, Any]) -> dict[str, Any] | None:
    """The task that failed first (by its end), else the first that ended with a non-zero code."""
    failed = [t for t in job["tasks"] if t["state"] == "FAILED"]
    failed = failed or [t for t in job["tasks"] if t["exitCode"] not in (None, 0)]
    return min(failed, key=lambda t: t["finishedAt"] or float("inf"), default=None)


def explain_failure(api: ShoalClient, job: dict[str, Any]) -> None:
    """The failing task's last lines (stdout and stderr merged) and the command to read more."""
    task = failing_task(job)
    if task is None:
        print(f"next: shoal job events {job['id']}")
        return
    name = f"{task['role']}/{task['index']}"
    answer = api.log_lines(job["id"], role=task["role"], index=task["index"], tail=FAILURE_TAIL)
    lines = sorted((line for s in answer["streams"] for line in s["lines"]), key=lambda x: x["at"])
    lines = lines[-FAILURE_TAIL:]
    code = f"exit code {task['exitCode']}" if task["exitCode"] is not None else task["state"]
    print(f"task {name} {code}; its last {len(lines)} lines (stdout and stderr):")
    for line in lines:
        print(f"  {line['text']}")
    print(f"next: shoal job logs {job['id']} --task {name}")
    sys.stdout.flush()
