"""Job arrays in the store (docs/arrays.md): a parent row and one job row per element.

An element is an ordinary job to everyone else (the scheduler, the applier, the agents, the exit
path); what is particular to arrays happens here:

- ``element_rows``: the elements of a new array, the ones past the cap held (``array_held``);
- ``element_admitted`` (the applier, when it admits an element): the parent starts running;
- ``element_ended`` (wherever an element reaches a final state: ``lifecycle`` and ``stopping``):
  the cap lets the next held elements go, and the parent's state follows its elements'.

The scheduler sees a job only if ``Job.array_held`` is false: a parent never, an element once
the cap has released it. The pure rules are in ``shoal.core.arrays``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, select, update
from sqlalchemy.orm import Session

from shoal.core.arrays import (
    ARRAY_CONCURRENCY_LIMIT,
    ElementCounts,
    FirstFailure,
    held_message,
    parent_end,
    parent_events,
    parent_state,
    to_release,
)
from shoal.core.envcontract import EnvArray
from shoal.core.lifecycle import ExitClass
from shoal.core.states import JobEvent, State, advance_job
from shoal.server.context import ApiError
from shoal.server.services.events import record
from shoal.server.services.image_holds import HOLD_CODE, hold_message_of
from shoal.spec.arrays import ArrayRange, parse_array
from shoal.store.models import Job

# An element's seq: negative, so it takes no job id and never comes first in a listing by seq.
SEQ_SCALE = 1_000_000

_COUNTS = (
    select(Job.array_job_id, Job.state, Job.array_held, func.count())
    .where(Job.array_job_id.in_(bindparam("parents", expanding=True)))
    .group_by(Job.array_job_id, Job.state, Job.array_held)
)
_HELD = (
    select(Job.id)
    .where(
        Job.array_job_id == bindparam("parent"),
        Job.state == State.WAITING.value,
        Job.array_held.is_(True),
    )
    .order_by(Job.array_index)
    .limit(bindparam("count"))
)
_FIRST_FAILURE = (
    select(Job.id, Job.array_index, Job.exit_class, Job.exit_code, Job.diagnostics)
    .where(Job.array_job_id == bindparam("parent"), Job.state == State.FAILED.value)
    .order_by(Job.array_index)
    .limit(1)
)
_RUNNING = advance_job(State.WAITING, JobEvent.ADMITTED).value
_PARENT_STARTS = (
    update(Job)
    .where(Job.id == bindparam("parent"), Job.state == State.WAITING.value)
    .values(
        state=_RUNNING,
        version=Job.version + 1,
        launched_at=func.coalesce(Job.launched_at, bindparam("now")),
    )
    .returning(Job.id)
)


# Plain statements (no ORM unit of work): the rows they change are not loaded in the session.
_RELEASE = (
    update(Job)
    .where(Job.id.in_(bindparam("ids", expanding=True)))
    .values(
        array_held=False,
        # an element that needs an image no one has pushed waits for it still (image_holds.py)
        pending_code=case((Job.missing_image.is_not(None), HOLD_CODE), else_=None),
        pending_message=case(
            (Job.missing_image.is_not(None), hold_message_of(Job.missing_image)), else_=None
        ),
        version=Job.version + 1,
    )
)


def element_id(parent_id: str, index: int) -> str:
    return f"{parent_id}_{index}"


def element_rows(
    parent: dict[str, Any], array: ArrayRange, element_spec: dict[str, Any]
) -> list[dict[str, Any]]:
    """The rows of a new array's elements, from the parent's row: every element a copy of the
    job (its spec without ``array``), those past the cap held with the reason why."""
    parent_id, seq, cap = str(parent["id"]), int(parent["seq"]), array.cap
    message = held_message(parent_id, cap) if cap is not None else None
    rows = []
    for position, index in enumerate(array.indices):
        held = position >= array.running_at_once
        rows.append(
            {
                **parent,
                "id": element_id(parent_id, index),
                "seq": -(seq * SEQ_SCALE + index),
                "source_text": "",  # the parent keeps the job file
                "spec": element_spec,
                "array_job_id": parent_id,
                "array_index": index,
                "array_size": None,
                "array_cap": None,
                "array_held": held,
                "pending_code": ARRAY_CONCURRENCY_LIMIT if held else None,
                "pending_message": message if held else None,
            }
        )
    return rows


def element_counts(connection: Connection, parent_ids: Sequence[str]) -> dict[str, ElementCounts]:
    """Each array's elements counted by state (and held), in one query over ``ix_jobs_array``."""
    by_parent: dict[str, dict[State, int]] = {p: {} for p in parent_ids}
    held: dict[str, int] = dict.fromkeys(parent_ids, 0)
    if not parent_ids:
        return {}
    for parent_id, state, is_held, count in connection.execute(
        _COUNTS, {"parents": list(parent_ids)}
    ):
        states = by_parent[str(parent_id)]
        states[State(state)] = states.get(State(state), 0) + count
        if is_held and state == State.WAITING.value:
            held[str(parent_id)] += count
    return {p: ElementCounts(by_parent[p], held[p]) for p in parent_ids}


def element_admitted(session: Session, parent_id: str, now: float) -> None:
    """An element was admitted: its parent runs (once; later admissions change nothing)."""
    params = {"parent": parent_id, "now": now}
    started = session.connection().execute(_PARENT_STARTS, params).first()
    if started is not None:
        record(session, parent_id, now, "running", "its first element was placed")


def element_ended(session: Session, element: Job, now: float) -> None:
    """An element reached a final state: release held elements the cap now allows, and move the
    parent on (to its final state once every element has ended)."""
    if element.array_job_id is None:
        return
    session.flush()  # the counts below read the element's new state
    parent = session.get(Job, element.array_job_id)
    if parent is None:
        return
    counts = element_counts(session.connection(), [parent.id])[parent.id]
    if not parent.stop_requested:
        released = _release(session, parent, to_release(parent.array_cap, counts), now)
        counts = replace(counts, held=counts.held - released)
    settle_parent(session, parent, counts, now)


def _release(session: Session, parent: Job, count: int, now: float) -> int:
    """Let the ``count`` held elements with the lowest indices go to the scheduler."""
    if count <= 0:
        return 0
    connection = session.connection()
    ids = list(connection.execute(_HELD, {"parent": parent.id, "count": count}).scalars())
    if not ids:
        return 0
    connection.execute(_RELEASE, {"ids": ids})
    for job_id in ids:
        record(
            session,
            job_id,
            now,
            "released",
            f"released by array {parent.id}'s cap (%{parent.array_cap}): an element ended; "
            "it is queued",
        )
    return len(ids)


def settle_parent(session: Session, parent: Job, counts: ElementCounts, now: float) -> None:
    """Move the parent to the state its elements give it (``core.arrays.parent_state``)."""
    current = State(parent.state)
    target = parent_state(counts, parent.stop_requested, parent.launched_at is not None)
    if current.is_terminal or target is current:
        return
    for event in parent_events(current, target):
        parent.state = advance_job(State(parent.state), event).value
    parent.version += 1
    if not target.is_terminal:
        return
    failure = _first_failure(session.connection(), parent.id) if target is State.FAILED else None
    end = parent_end(counts, parent.diagnostics if parent.stop_requested else None, failure)
    parent.exit_class = end.exit_class.value
    parent.exit_code = end.exit_code
    parent.diagnostics = end.diagnostics
    parent.completed_at = now
    record(session, parent.id, now, target.value.lower(), end.diagnostics)


def _first_failure(connection: Connection, parent_id: str) -> FirstFailure | None:
    row = connection.execute(_FIRST_FAILURE, {"parent": parent_id}).first()
    if row is None:
        return None
    return FirstFailure(
        row.id,
        row.array_index,
        ExitClass(row.exit_class or ExitClass.USER_FAILURE.value),
        row.exit_code,
        row.diagnostics or "",
    )


def no_logs_of_a_parent(job: Job) -> None:
    """An array's parent has no tasks: a 400 naming an element to read logs of instead."""
    if job.array_size is None:
        return
    first = element_id(job.id, parse_array(str(job.spec.get("array") or "0")).first)
    raise ApiError(
        400,
        "ArrayParentHasNoLogs",
        f"job {job.id} is an array of {job.array_size} elements and runs no task of its own; "
        f"read an element's logs, e.g. `shoal job logs {first}` (`shoal job status {job.id}` "
        "lists them)",
    )


def env_array(element: Job, parent: Job | None) -> EnvArray | None:
    """What an element's tasks are told about their array (None for other jobs)."""
    if element.array_job_id is None or element.array_index is None or parent is None:
        return None
    array = parse_array(str(parent.spec.get("array") or element.array_index))
    return EnvArray(
        parent_id=parent.id,
        index=element.array_index,
        size=parent.array_size or array.size,
        first=array.first,
        last=array.last,
    )
