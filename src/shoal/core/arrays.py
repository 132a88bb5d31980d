"""Job arrays: the rules that turn the states of an array's elements into the parent's state, and
how many held elements the concurrency cap lets go. Pure: the server's ``services/arrays.py``
reads the counts from the store and applies what these functions decide.

The parent's state (docs/arrays.md):

- while some element is unfinished: ``STOPPING`` if the array was stopped as a whole, else
  ``RUNNING`` once any element has been admitted (or has ended), else ``WAITING``;
- once every element has ended: ``STOPPED`` if the array was stopped as a whole; otherwise the
  worst outcome among its elements: ``FAILED`` if any failed, else ``STOPPED`` if any was
  stopped on its own, else ``SUCCEEDED``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from shoal.core.lifecycle import EXIT_CODES, ExitClass, JobEnd
from shoal.core.states import JOB_TRANSITIONS, JobEvent, State

# The reason code a held element waits with (``job status`` shows it).
ARRAY_CONCURRENCY_LIMIT = "ArrayConcurrencyLimit"
# The back edges of the job state machine: a parent never goes back to the queue.
_BACK = (JobEvent.RETRIED, JobEvent.PREEMPTED, JobEvent.REJECTED, JobEvent.RESTARTED)


@dataclass(frozen=True, slots=True)
class ElementCounts:
    """How many elements of one array are in each state; ``held`` of the waiting ones are held
    back by the concurrency cap (invisible to the scheduler)."""

    by_state: Mapping[State, int]
    held: int = 0

    def count(self, *states: State) -> int:
        return sum(self.by_state.get(state, 0) for state in states)

    @property
    def total(self) -> int:
        return sum(self.by_state.values())

    @property
    def unfinished(self) -> int:
        return self.count(State.WAITING, State.RUNNING, State.STOPPING)

    @property
    def under_way(self) -> int:
        """Released elements that have not ended: the ones the cap counts."""
        return self.unfinished - self.held


def parent_state(counts: ElementCounts, stopped: bool, launched: bool = False) -> State:
    """The parent's state given its elements' (``stopped``: the array was stopped as a whole;
    ``launched``: an element was admitted once, so an element back in the queue after a
    preemption or a retry does not take the parent back to WAITING)."""
    if counts.unfinished:
        if stopped:
            return State.STOPPING
        started = launched or counts.total > counts.count(State.WAITING)
        return State.RUNNING if started else State.WAITING
    if stopped:
        return State.STOPPED
    if counts.count(State.FAILED):
        return State.FAILED
    if counts.count(State.STOPPED):
        return State.STOPPED
    return State.SUCCEEDED


@dataclass(frozen=True, slots=True)
class FirstFailure:
    """The failed element with the lowest index: its exit is the parent's."""

    job_id: str
    index: int
    exit_class: ExitClass
    exit_code: int | None
    diagnostics: str


def parent_end(
    counts: ElementCounts, stop_reason: str | None, failure: FirstFailure | None
) -> JobEnd:
    """How a parent ends once every element has (``stop_reason``: why the array was stopped as a
    whole, None if it was not): its state as ``parent_state`` says, with an exit class, an exit
    code and diagnostics that count the elements."""
    tally = summary(counts)
    state = parent_state(counts, stop_reason is not None)
    if state is State.STOPPED and stop_reason is not None:
        return JobEnd(
            state, ExitClass.STOPPED, EXIT_CODES[ExitClass.STOPPED], f"{stop_reason}; {tally}"
        )
    if state is State.FAILED:
        failed = counts.count(State.FAILED)
        if failure is None:
            return JobEnd(
                state, ExitClass.USER_FAILURE, None, f"{failed} of {counts.total} failed; {tally}"
            )
        first = f"first: element {failure.index} (job {failure.job_id}) {failure.exit_class.value}"
        if failure.diagnostics:
            first += f": {failure.diagnostics}"
        return JobEnd(
            state,
            failure.exit_class,
            failure.exit_code,
            f"{failed} of {counts.total} elements failed ({first}); {tally}",
        )
    if state is State.STOPPED:
        stopped = counts.count(State.STOPPED)
        return JobEnd(
            state,
            ExitClass.STOPPED,
            EXIT_CODES[ExitClass.STOPPED],
            f"{stopped} of {counts.total} elements were stopped; {tally}",
        )
    return JobEnd(State.SUCCEEDED, ExitClass.SUCCEEDED, 0, f"every element succeeded; {tally}")


def parent_events(current: State, target: State) -> tuple[JobEvent, ...]:
    """The job events that take a parent from ``current`` to ``target`` through the job state
    machine (``core.states``), shortest first and never back to the queue; ``()`` when they are
    the same. ``ValueError`` if the machine has no such path (a terminal parent stays as it is)."""
    if current is target:
        return ()
    seen = {current}
    paths: deque[tuple[State, tuple[JobEvent, ...]]] = deque([(current, ())])
    while paths:
        state, events = paths.popleft()
        for (source, event), destination in JOB_TRANSITIONS.items():
            if source is not state or event in _BACK or destination in seen:
                continue
            if destination is target:
                return (*events, event)
            seen.add(destination)
            paths.append((destination, (*events, event)))
    raise ValueError(f"no way from {current.value} to {target.value}")


def to_release(cap: int | None, counts: ElementCounts) -> int:
    """How many held elements may be let go now: the cap minus the elements under way."""
    if counts.held <= 0:
        return 0
    if cap is None:
        return counts.held
    return max(0, min(counts.held, cap - counts.under_way))


def held_at_submission(size: int, cap: int | None) -> int:
    """How many of a new array's elements start held: those past the cap."""
    return 0 if cap is None else max(0, size - cap)


def summary(counts: ElementCounts) -> str:
    """``1000 elements: 20 running, 30 waiting, 900 held, 50 succeeded`` (zero counts left out)."""
    parts = []
    for label, value in (
        ("running", counts.count(State.RUNNING)),
        ("stopping", counts.count(State.STOPPING)),
        ("waiting", counts.count(State.WAITING) - counts.held),
        ("held", counts.held),
        ("succeeded", counts.count(State.SUCCEEDED)),
        ("failed", counts.count(State.FAILED)),
        ("stopped", counts.count(State.STOPPED)),
    ):
        if value:
            parts.append(f"{value} {label}")
    noun = "element" if counts.total == 1 else "elements"
    return f"{counts.total} {noun}: " + ", ".join(parts) if parts else f"{counts.total} {noun}"


def held_message(parent_id: str, cap: int) -> str:
    """The pending message of an element held back by the cap."""
    return (
        f"array {parent_id} runs at most {cap} elements at once (%{cap}); this one starts "
        "when an earlier one ends"
    )
