"""Job and task life cycles: one transition table each, with OpenPAI's state names.

``advance(state, event)`` is the only way to change a state; a move the table does not list raises
``InvalidTransition``, so a bug shows up as an error instead of a job stuck in a strange state.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.STOPPED})


class JobEvent(StrEnum):
    ADMITTED = "admitted"  # the whole gang was placed and is being started
    SUCCEEDED = "succeeded"  # the completion policy says the job succeeded
    FAILED = "failed"  # the completion policy (or the platform) says the job failed
    STOP_REQUESTED = "stop_requested"
    STOPPED = "stopped"  # every task of a stopping job has exited
    RETRIED = "retried"  # a failed attempt is retried: back to the queue
    PREEMPTED = "preempted"  # resources were reclaimed: back to the queue, submit time kept
    REJECTED = "rejected"  # can never run (infeasible) and the user asked not to wait
    # The user runs an ended job again as its next attempt (OpenPAI's ``executionType: START``):
    # the one way out of a final state, taken only on that explicit request.
    RESTARTED = "restarted"


class TaskEvent(StrEnum):
    LAUNCHED = "launched"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOP_REQUESTED = "stop_requested"
    STOPPED = "stopped"  # it exited because it was signalled to stop
    RETRIED = "retried"  # the attempt failed and the task runs again in place


class InvalidTransition(Exception):
    def __init__(self, entity: str, state: State, event: str) -> None:
        super().__init__(f"{entity} cannot go from {state.value} on event {str(event)!r}")
        self.state = state
        self.event = event


JOB_TRANSITIONS: dict[tuple[State, JobEvent], State] = {
    (State.WAITING, JobEvent.ADMITTED): State.RUNNING,
    (State.WAITING, JobEvent.STOP_REQUESTED): State.STOPPED,
    (State.WAITING, JobEvent.REJECTED): State.FAILED,
    (State.RUNNING, JobEvent.SUCCEEDED): State.SUCCEEDED,
    (State.RUNNING, JobEvent.FAILED): State.FAILED,
    (State.RUNNING, JobEvent.STOP_REQUESTED): State.STOPPING,
    (State.RUNNING, JobEvent.RETRIED): State.WAITING,
    (State.RUNNING, JobEvent.PREEMPTED): State.WAITING,
    (State.STOPPING, JobEvent.STOPPED): State.STOPPED,
    (State.STOPPING, JobEvent.STOP_REQUESTED): State.STOPPING,
    (State.SUCCEEDED, JobEvent.RESTARTED): State.WAITING,
    (State.FAILED, JobEvent.RESTARTED): State.WAITING,
    (State.STOPPED, JobEvent.RESTARTED): State.WAITING,
}

TASK_TRANSITIONS: dict[tuple[State, TaskEvent], State] = {
    (State.WAITING, TaskEvent.LAUNCHED): State.RUNNING,
    (State.WAITING, TaskEvent.STOP_REQUESTED): State.STOPPED,
    (State.WAITING, TaskEvent.FAILED): State.FAILED,  # could not be launched (platform failure)
    (State.RUNNING, TaskEvent.SUCCEEDED): State.SUCCEEDED,
    (State.RUNNING, TaskEvent.FAILED): State.FAILED,
    (State.RUNNING, TaskEvent.STOP_REQUESTED): State.STOPPING,
    (State.RUNNING, TaskEvent.STOPPED): State.STOPPED,  # stopped by its agent's shutdown
    (State.STOPPING, TaskEvent.STOPPED): State.STOPPED,
    # A task asked to stop that exited on its own before the signal reached it keeps its own
    # outcome: an exit 0 is a success, not a stop.
    (State.STOPPING, TaskEvent.SUCCEEDED): State.SUCCEEDED,
    (State.STOPPING, TaskEvent.FAILED): State.FAILED,
    (State.STOPPING, TaskEvent.STOP_REQUESTED): State.STOPPING,
    (State.RUNNING, TaskEvent.RETRIED): State.WAITING,  # it failed and has retries left
}


def advance_job(state: State, event: JobEvent) -> State:
    try:
        return JOB_TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition("job", state, event) from None


def advance_task(state: State, event: TaskEvent) -> State:
    try:
        return TASK_TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition("task", state, event) from None
