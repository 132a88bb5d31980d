"""A Pod's phase and container states as shoal's reports (pure; docs/kubernetes.md, "Exits").

- ``Pending``: the attempt is known but not running (no report); a container that cannot start
  (image pull errors, a bad config) ends the attempt with a launch error.
- ``Running``: a running report, from the task container's start.
- ``Succeeded`` / ``Failed``: the task container's exit code; ``OOMKilled`` is an OOM; the Pod's
  ``DeadlineExceeded`` a timeout; an eviction or a kubelet that refused the Pod is a platform
  failure (retried).
- Gone (deleted): stopped if shoal asked for it (the Pod carries shoal's stop annotation), else
  lost: someone or something else (a removed node, an admin) ended it.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shoal.kubernetes import options as names
from shoal.protocol import ExitReport, RunningReport

# Waiting reasons that mean the container will not start without someone changing something.
CANNOT_START = {
    "ErrImagePull": "its image could not be pulled",
    "ImagePullBackOff": "its image could not be pulled",
    "InvalidImageName": "its image name is not valid",
    "ErrImageNeverPull": "its image is not on the node and the pull policy is Never",
    "CreateContainerConfigError": "its container's configuration is wrong",
    "CreateContainerError": "its container could not be created",
    "RunContainerError": "its container could not be run",
}
# Pod reasons set by a kubelet that refused or evicted the Pod: the platform's doing.
PLATFORM_REASONS = (
    "Evicted",
    "OutOfcpu",
    "OutOfmemory",
    "NodeAffinity",
    "UnexpectedAdmissionError",
)


@dataclass(frozen=True)
class PodFacts:
    """What the reports need of a Pod."""

    attempt_id: str
    epoch: int
    phase: str
    reason: str | None
    message: str | None
    stop_requested: bool
    deleting: bool
    node: str | None
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    signal: int | None
    terminated_reason: str | None
    waiting_reason: str | None
    waiting_message: str | None
    image: str | None
    helper_failure: str | None = None  # why a helper container (fetch, barrier) failed
    exit_message: str | None = None  # the task container's termination message


def _stamp(value: datetime | None) -> float | None:
    if value is None:
        return None
    return calendar.timegm(value.utctimetuple()) + value.microsecond / 1e6


def _task_status(pod: Any) -> Any:
    for status in (pod.status.container_statuses if pod.status else None) or ():
        if status.name == names.TASK_CONTAINER:
            return status
    return None


HELPERS = {
    names.FETCH_CONTAINER: "the init container that fetches the task's code and data",
    names.BARRIER_CONTAINER: "the start barrier's sidecar",
}


def _helper_failure(pod: Any) -> str | None:
    """Why one of shoal's helper containers will not let the task start (None: it may yet)."""
    for status in (pod.status.init_container_statuses if pod.status else None) or ():
        what = HELPERS.get(status.name)
        if what is None:
            continue
        image = status.image or "its image"
        waiting = status.state.waiting if status.state else None
        if waiting is not None and waiting.reason in CANNOT_START:
            said = f": {waiting.message}" if waiting.message else ""
            return f"{what}, image {image}: {CANNOT_START[waiting.reason]} ({waiting.reason}{said})"
        for state in (status.state, status.last_state):
            ended = state.terminated if state is not None else None
            if ended is not None and ended.exit_code not in (0, None):
                return _helper_ended(what, image, ended)
    return None


def _helper_ended(what: str, image: str, ended: Any) -> str:
    if ended.message and ended.message.strip():  # fetch_script.py says why in its last words
        return f"{what}: {ended.message.strip()}"
    return (
        f"{what} exited with code {ended.exit_code}: it runs python3 in {image}; give the agent "
        "--helper-image with python3 (or, for the barrier, set SHOAL_START_BARRIER=0 in the "
        "job's env; docs/kubernetes.md)"
    )


def has_own_secret(pod: Any) -> bool:
    """Whether the Pod reads a Secret of its own (a command with secrets, or the credential that
    fetches its code and data)."""
    for container in [*(pod.spec.containers or []), *(pod.spec.init_containers or [])]:
        for variable in container.env or []:
            source = variable.value_from
            if source is not None and source.secret_key_ref is not None:
                return True
    return False


def facts(pod: Any) -> PodFacts:
    meta, status = pod.metadata, pod.status
    annotations = meta.annotations or {}
    labels = meta.labels or {}
    container = _task_status(pod)
    state = container.state if container is not None else None
    running = state.running if state is not None else None
    terminated = state.terminated if state is not None else None
    waiting = state.waiting if state is not None else None
    image = pod.spec.containers[0].image if pod.spec and pod.spec.containers else None
    return PodFacts(
        attempt_id=labels.get(names.ATTEMPT, ""),
        epoch=int(annotations.get(names.EPOCH, "0") or 0),
        phase=(status.phase if status else None) or "Pending",
        reason=status.reason if status else None,
        message=status.message if status else None,
        stop_requested=annotations.get(names.STOP) == "true",
        deleting=meta.deletion_timestamp is not None,
        node=pod.spec.node_name if pod.spec else None,
        started_at=_stamp(
            (running.started_at if running else None)
            or (terminated.started_at if terminated else None)
        ),
        finished_at=_stamp(terminated.finished_at) if terminated else None,
        exit_code=terminated.exit_code if terminated else None,
        signal=terminated.signal if terminated else None,
        terminated_reason=terminated.reason if terminated else None,
        waiting_reason=waiting.reason if waiting else None,
        waiting_message=waiting.message if waiting else None,
        image=image,
        helper_failure=_helper_failure(pod),
        exit_message=(terminated.message or None) if terminated else None,
    )


def running_report(pod: PodFacts) -> RunningReport | None:
    """A report for a Pod whose task container runs (None: not started, or ended)."""
    if pod.phase != "Running" or pod.started_at is None or pod.exit_code is not None:
        return None
    return RunningReport(
        attempt_id=pod.attempt_id, pid=0, started_at=pod.started_at, epoch=pod.epoch
    )


def launch_failure(pod: PodFacts) -> str | None:
    """Why the Pod's container will never start (None: it may yet)."""
    if pod.helper_failure is not None and pod.phase in ("Pending", "Failed"):
        return pod.helper_failure  # (a failed init container fails the Pod)
    if pod.phase != "Pending" or pod.waiting_reason not in CANNOT_START:
        return None
    said = f": {pod.waiting_message}" if pod.waiting_message else ""
    return f"image {pod.image}: {CANNOT_START[pod.waiting_reason]} ({pod.waiting_reason}{said})"


def exit_report(pod: PodFacts, now: float) -> ExitReport | None:
    """The end of a finished Pod (None: it has not finished)."""
    base: dict[str, Any] = {
        "attempt_id": pod.attempt_id,
        "epoch": pod.epoch,
        "started_at": pod.started_at,
        "finished_at": pod.finished_at or now,
    }
    failure = launch_failure(pod)
    if failure is not None:
        return ExitReport(exit_code=None, launch_error=failure, **base)
    if pod.phase not in ("Succeeded", "Failed"):
        return None
    if pod.reason == "DeadlineExceeded":
        return ExitReport(exit_code=None, signal=9, timed_out=True, **base)
    if pod.reason in PLATFORM_REASONS or (pod.exit_code is None and pod.phase == "Failed"):
        why = f"Kubernetes: {pod.reason or 'Failed'}" + (f": {pod.message}" if pod.message else "")
        return ExitReport(exit_code=None, lost=True, lost_reason=why, **base)
    code = 0 if pod.phase == "Succeeded" and pod.exit_code is None else pod.exit_code
    return ExitReport(
        exit_code=code,
        signal=pod.signal or None,
        stop_requested=pod.stop_requested,
        oom_killed=pod.terminated_reason == "OOMKilled",
        message=pod.exit_message if pod.exit_code else None,
        **base,
    )


def gone_report(pod: PodFacts, now: float) -> ExitReport:
    """The end of a Pod that was deleted: stopped if shoal asked, else lost."""
    ended = exit_report(pod, now)
    if ended is not None:
        return ended
    base: dict[str, Any] = {
        "attempt_id": pod.attempt_id,
        "epoch": pod.epoch,
        "started_at": pod.started_at,
        "finished_at": now,
    }
    if pod.stop_requested:
        return ExitReport(
            exit_code=pod.exit_code, signal=pod.signal or 15, stop_requested=True, **base
        )
    where = f" on node {pod.node}" if pod.node else ""
    return ExitReport(
        exit_code=None,
        lost=True,
        lost_reason=f"its Pod{where} was deleted outside shoal before it ended",
        **base,
    )
