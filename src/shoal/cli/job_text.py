"""Jobs as text for a person: ``job list`` rows, ``job status``/``describe``/``why``, events.
Pure functions from the API's data to strings (no I/O), so every view is testable and the
watch mode can compare two renderings."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from shoal.cli.columns import Column, table_text

JOB_STATES = ("WAITING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED")
ACTIVE_STATES = ["WAITING", "RUNNING", "STOPPING"]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")

Job = dict[str, Any]
Getter = Callable[[Job], str]


def since_epoch(text: str, now: float) -> float:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` ago, or a date/time (``2024-05-01``,
    ``2024-05-01T10:00``, local time) as epoch seconds; ValueError otherwise."""
    match = _DURATION.match(text.strip().lower())
    if match:
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (30m, 12h, 7d, 2w) nor a date (2024-05-01)"
        ) from None


def when(stamp: float | None, full: bool = False) -> str:
    """Time of day for today, else date and minute (``full``: date and second, always)."""
    if stamp is None:
        return "-"
    local = time.localtime(stamp)
    if full:
        return time.strftime("%Y-%m-%d %H:%M:%S", local)
    same_day = local[:3] == time.localtime()[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", local)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def job_ref(ref: dict[str, Any]) -> str:
    """``ID (user/name, N GPUs)``."""
    gpus = ref.get("gpus", 0)
    return f"{ref['id']} ({ref['user']}/{ref['name']}, {gpus} GPU{'' if gpus == 1 else 's'})"


def refs(ids: Sequence[str] | None, details: Sequence[dict[str, Any]] | None) -> str:
    """Jobs named with their owner and size when the server gives them (bare ids otherwise)."""
    if details:
        return ", ".join(job_ref(d) for d in details)
    return ", ".join(ids or [])


# ---- job list ----


_COUNT_ORDER = (
    ("RUNNING", "running"),
    ("STOPPING", "stopping"),
    ("WAITING", "waiting"),
    ("SUCCEEDED", "succeeded"),
    ("FAILED", "failed"),
    ("STOPPED", "stopped"),
)


def array_counts_text(array: dict[str, Any]) -> str:
    """``1000 elements: 20 running, 30 waiting (900 held), 50 succeeded``."""
    counts = array.get("counts") or {}
    held = int(array.get("held") or 0)
    parts = []
    for state, label in _COUNT_ORDER:
        value = int(counts.get(state, 0))
        if state == "WAITING":
            queued = value - held
            if queued:
                parts.append(f"{queued} waiting")
            if held:
                parts.append(f"{held} held")
        elif value:
            parts.append(f"{value} {label}")
    size = array["size"]
    head = f"{size} element{'' if size == 1 else 's'}"
    return f"{head}: {', '.join(parts)}" if parts else head


def _note(job: Job) -> str:
    if job.get("array"):
        return "array " + array_counts_text(job["array"])
    pending = job.get("pending")
    if pending:
        position = pending.get("position")
        return str(pending["code"]) + (f" (#{position})" if position else "")
    exit_class = job.get("exitClass")
    return str(exit_class) if exit_class and exit_class != job["state"] else ""


def _accounting(key: str, fmt: Callable[[float], str]) -> Getter:
    def get(job: Job) -> str:
        value = (job.get("accounting") or {}).get(key)
        return "-" if value is None else fmt(value)

    return get


def _mib(value: float) -> str:
    return f"{value / 1024:.1f}Gi" if value >= 1024 else f"{value:.0f}Mi"


_LIST: list[tuple[Column, Getter, bool]] = [  # (column, value, only with -o wide)
    (Column("ID"), lambda j: str(j["id"]), False),
    (Column("NAME"), lambda j: str(j["name"]), False),
    (Column("USER", drop=2), lambda j: str(j["user"]), False),
    (Column("VC", drop=5), lambda j: str(j["virtualCluster"]), False),
    (Column("STATE"), lambda j: str(j["state"]), False),
    (Column("PRIORITY"), lambda j: str(j.get("priorityClass", "-")), True),
    (Column("TASKS", drop=6, right=True), lambda j: str(j["taskCount"]), False),
    (Column("GPUS", drop=3, right=True), lambda j: str(j["gpus"]), False),
    (Column("ATTEMPT", right=True), lambda j: str(j.get("attempt", "-")), True),
    (Column("SUBMITTED", drop=4), lambda j: when(j["submittedAt"]), False),
    (Column("ELAPSED", right=True), _accounting("elapsedS", duration), True),
    (Column("GPU-H", right=True), _accounting("gpuHours", lambda v: f"{v:.2f}"), True),
    (Column("PEAK-MEM", right=True), _accounting("peakMemoryMiB", _mib), True),
    (Column("CPU-TIME", right=True), _accounting("cpuSeconds", duration), True),
    (Column("NODES"), lambda j: ",".join(j.get("nodes") or []) or "-", True),
    (Column("NOTE", drop=1), _note, False),
]


def list_text(jobs: Sequence[Job], wide: bool, width: int | None) -> str:
    """The job table; ``-o wide`` shows every column and never leaves one out."""
    if not jobs:
        return "no jobs"
    chosen = [(c, get) for c, get, extra in _LIST if wide or not extra]
    rows = [[get(job) for _, get in chosen] for job in jobs]
    return table_text([c for c, _ in chosen], rows, None if wide else width)


# ---- one job ----


def _task_rows(detail: Job) -> list[list[str]]:
    rows = []
    for t in detail["tasks"]:
        ports = " ".join(f"{k}={','.join(map(str, v))}" for k, v in t["ports"].items())
        exit_text = "" if t["exitCode"] is None else f"{t['exitCode']} {t['exitClass'] or ''}"
        rows.append(
            [
                f"{t['role']}/{t['index']}",
                t["state"],
                t["node"] or "-",
                ",".join(map(str, t["gpus"])) or "-",
                ports or "-",
                exit_text or "-",
                str(t["attempt"]),
                _usage(t, "cpuSeconds", duration),
                _usage(t, "peakMemoryMiB", _mib, fallback="maxRssMiB"),
            ]
        )
    return rows


def _usage(task: Job, key: str, fmt: Callable[[float], str], fallback: str | None = None) -> str:
    """A figure of the task's latest attempt (its cgroup's peak memory, else its largest RSS)."""
    usage = task.get("usage") or {}
    value = usage.get(key, usage.get(fallback) if fallback else None)
    return "-" if value is None else fmt(float(value))


_TASK_COLUMNS = [
    Column("TASK"),
    Column("STATE"),
    Column("NODE"),
    Column("GPUS", drop=2),
    Column("PORTS", drop=3),
    Column("EXIT"),
    Column("ATTEMPT", drop=1, right=True),
    Column("CPU-TIME", drop=5, right=True),
    Column("PEAK-MEM", drop=4, right=True),
]


def tasks_text(detail: Job, width: int | None, indent: str = "") -> str:
    if not detail["tasks"]:
        return f"{indent}no tasks yet (placed when the scheduler starts the job)"
    return table_text(_TASK_COLUMNS, _task_rows(detail), width, indent)


# Reasons that keep a waiting job out of its VC's queue: it has no position there (an array
# element its concurrency cap holds back: core.arrays.ARRAY_CONCURRENCY_LIMIT).
OUT_OF_QUEUE = frozenset({"ImageNotFound", "ArrayConcurrencyLimit"})
# A queued job's position comes from the scheduler's last cycle: none yet right after a restart
# of the server (or a submission), until the next cycle.
NO_POSITION_YET = (
    "position not computed yet: the scheduler has not run since the server restarted or the job "
    "was submitted"
)


def waiting_lines(detail: Job, why: Job | None) -> list[str]:
    lines = []
    pending = detail.get("pending")
    if pending and pending["code"] in OUT_OF_QUEUE:  # its message says what it waits for
        lines.append(f"  waiting: {pending['code']}: {pending['message']}")
    elif pending:
        position, vc = pending.get("position"), detail["virtualCluster"]
        where = f"position {position} in" if position else f"{NO_POSITION_YET}; in"
        lines.append(
            f"  waiting: {pending['code']}: {pending['message']} ({where} virtual cluster {vc})"
        )
    if why is not None:
        lines.extend(_why_details(why))
    return lines


def _why_details(why: Job) -> list[str]:
    lines = [f"  {line}" for line in why.get("pools") or []]  # docs/cloud.md
    if why.get("preempting"):
        preempting = refs(why["preempting"], why.get("preemptingDetails"))
        lines.append(f"  being made room for by preempting: {preempting}")
    if why.get("pools"):
        pass  # a pool grows for it: "would not fit on an idle cluster" is not the story
    elif why.get("blockers") is None and why.get("state") == "WAITING":
        lines.append("  it would not fit even on an idle cluster")
    elif why.get("blockers"):
        blockers = refs(why["blockers"], why.get("blockerDetails"))
        lines.append(f"  it fits once these jobs finish or are preempted: {blockers}")
    return lines


def status_text(detail: Job, why: Job | None, width: int | None) -> str:
    lines = [
        f"job {detail['id']} {detail['name']}: {detail['state']} (user {detail['user']}, "
        f"vc {detail['virtualCluster']}, attempt {detail['attempt']})"
    ]
    if detail.get("arrayJobId") is not None:
        lines.append(f"  element {detail['arrayIndex']} of array {detail['arrayJobId']}")
    lines.extend(waiting_lines(detail, why))
    if detail.get("diagnostics"):
        lines.append(f"  {detail['diagnostics']}")
    if detail.get("array"):
        array = detail["array"]
        cap = array.get("cap")
        at_once = f", at most {cap} at once" if cap is not None else ""
        lines.append(f"  array {array['expression']}{at_once}: {array_counts_text(array)}")
        lines.append(elements_text(detail.get("elements") or [], detail["id"], width))
    else:
        lines.append(tasks_text(detail, width))
        lines.extend(held_lines(detail))
        lines.extend(failed_lines(detail))
    return "\n".join(lines)


HELD = "held for debugging"  # how a held task's diagnostics start (docs/debug-jobs.md)


def held_lines(detail: Job) -> list[str]:
    """The job's tasks held for debugging: until when, and how to free them."""
    return [
        f"  {t['role']}/{t['index']}: {t['diagnostics']}"
        for t in detail.get("tasks") or []
        if t["state"] == "RUNNING" and str(t.get("diagnostics") or "").startswith(HELD)
    ]


FAILED_SHOWN = 5  # failed tasks whose reason `job status` prints; the rest are counted


def failed_lines(detail: Job) -> list[str]:
    """Why the job's failed tasks failed (their diagnostics' first line: a failing runtime
    plugin's step, an OOM...), the first few."""
    failed = [
        t for t in detail.get("tasks") or [] if t["state"] == "FAILED" and t.get("diagnostics")
    ]
    lines = [
        f"  {t['role']}/{t['index']} failed: {str(t['diagnostics']).splitlines()[0]}"
        for t in failed[:FAILED_SHOWN]
    ]
    if len(failed) > FAILED_SHOWN:
        lines.append(f"  ... and {len(failed) - FAILED_SHOWN} more failed tasks (-o json)")
    return lines


_ELEMENT_COLUMNS = [
    Column("ELEMENTS"),
    Column("STATE"),
    Column("NODES", drop=2),
    Column("EXIT", drop=3),
    Column("NOTE", drop=1),
]


def _element_key(element: Job) -> tuple[str, str, str, str]:
    exit_code = element.get("exitCode")
    exit_text = "-" if exit_code is None else f"{exit_code} {element.get('exitClass') or ''}"
    pending = element.get("pending") or {}
    return (
        element["state"],
        ",".join(element.get("nodes") or []) or "-",
        exit_text.strip(),
        str(pending.get("code") or ""),
    )


def _indices(parent: str, first: int, last: int) -> str:
    return f"{parent}_{first}" if first == last else f"{parent}_[{first}-{last}]"


def elements_text(elements: Sequence[Job], parent: str, width: int | None) -> str:
    """The elements, runs of consecutive indices that look the same on one row
    (``42_[50-999]  WAITING  -  -  ArrayConcurrencyLimit``), as ``squeue`` folds pending ones."""
    if not elements:
        return "no elements"
    rows: list[list[str]] = []
    run: list[Job] = []
    for element in [*elements, None]:
        if run and (
            element is None
            or _element_key(element) != _element_key(run[-1])
            or element["index"] != run[-1]["index"] + 1
        ):
            key = _element_key(run[0])
            rows.append([_indices(parent, run[0]["index"], run[-1]["index"]), *key])
            run = []
        if element is not None:
            run.append(element)
    return table_text(_ELEMENT_COLUMNS, rows, width)


def why_text(why: Job) -> str:
    if why["state"] != "WAITING":
        return f"job {why['id']} is {why['state']}, not waiting"
    where = f"position {why['position']} in its queue" if why["position"] else NO_POSITION_YET
    if why["code"] in OUT_OF_QUEUE:
        where = "not in its queue until then"
    lines = [
        f"job {why['id']} waits in virtual cluster {why['virtualCluster']}, {where}",
        f"  {why['code'] or 'Queued'}: {why['message'] or 'not looked at yet'}",
    ]
    lines.extend(_why_details(why))
    return "\n".join(lines)


def event_line(event: Job) -> str:
    at = event["at"]
    stamp = time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at % 1 * 1000):03d}"
    return f"{stamp} {event['kind']:<9} {event['message']}"


def _exit_class(detail: Job) -> str:
    exit_class = detail.get("exitClass")
    return f" ({exit_class})" if exit_class and exit_class != detail["state"] else ""


def describe_text(detail: Job, why: Job | None, events: Sequence[Job], width: int | None) -> str:
    """``kubectl describe`` for a job: fields, why it waits, tasks, events (oldest first)."""
    accounting = detail.get("accounting") or {}
    fields = [
        ("Job", f"{detail['id']} ({detail['user']}~{detail['name']})"),
        ("Virtual cluster", detail["virtualCluster"]),
        ("Priority", detail.get("priorityClass", "-")),
        ("State", detail["state"] + _exit_class(detail)),
        ("Exit code", "-" if detail["exitCode"] is None else str(detail["exitCode"])),
        ("Attempt", str(detail["attempt"])),
        ("Submitted", when(detail["submittedAt"], full=True)),
        ("Launched", when(detail["launchedAt"], full=True)),
        ("Completed", when(detail["completedAt"], full=True)),
        ("Nodes", ", ".join(detail.get("nodes") or []) or "-"),
        ("GPUs", str(detail["gpus"])),
    ]
    if accounting:
        fields.append(("Elapsed", duration(accounting.get("elapsedS"))))
    lines = [f"{name + ':':<17}{value}" for name, value in fields]
    if detail.get("diagnostics"):
        lines.append(f"{'Diagnostics:':<17}{detail['diagnostics']}")
    waiting = waiting_lines(detail, why)
    if waiting:
        lines += ["Waiting:", *waiting]
    if detail.get("array"):
        array = detail["array"]
        lines.append(f"{'Array:':<17}{array['expression']}: {array_counts_text(array)}")
        lines += ["Elements:", elements_text(detail.get("elements") or [], detail["id"], width)]
        lines.append("Events:")
    else:
        lines += ["Tasks:", tasks_text(detail, width, indent="  "), "Events:"]
    lines += [f"  {event_line(e)}" for e in events] or ["  none"]
    return "\n".join(lines)
