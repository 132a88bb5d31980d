"""shoal's jobs and tasks in OpenPAI's v2 shapes (``JobSummary``, ``JobDetail``, ``TaskStatus``).

OpenPAI counts attempts from 0, shoal from 1: OpenPAI's ``attemptId`` n is shoal's attempt
n + 1, for jobs and for tasks alike. Times are epoch milliseconds. ``subState`` is the state of
OpenPAI's framework controller that matches the job's (docs/openpai-compat.md has the table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.states import State
from shoal.server.openpai.exitspec import exit_spec
from shoal.store.models import Job, Task

FINAL = frozenset({State.SUCCEEDED.value, State.FAILED.value, State.STOPPED.value})


def ms(value: float | None) -> int | None:
    return None if value is None else int(value * 1000)


def sub_state(job: Job, tasks: Sequence[Task] = ()) -> str:
    """The framework controller's state for the job's state (and its tasks', when running)."""
    if job.state in FINAL:
        return "Completed"
    if job.state == State.STOPPING.value:
        return "AttemptDeletionPending"
    if job.state == State.RUNNING.value:
        running = all(t.state == State.RUNNING.value for t in latest_task_attempts(tasks))
        return "AttemptRunning" if tasks and running else "AttemptPreparing"
    # waiting: for its first attempt, or for the next one after an attempt ended (a retry)
    return "AttemptCompleted" if job.attempt > 0 else "AttemptCreationPending"


def total_gpus(job: Job) -> int:
    return sum(r["instances"] * r["resources"]["gpu"] for r in job.spec.get("roles", []))


def total_tasks(job: Job) -> int:
    return sum(r["instances"] for r in job.spec.get("roles", []))


def summary(job: Job, tags: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "name": job.name,
        "username": job.user,
        "state": job.state,
        "subState": sub_state(job),
        "executionType": "STOP" if job.stop_requested or job.state in FINAL else "START",
        "tags": list(tags),
        "retries": job.retries_user + job.retries_platform + job.retries_resource,
        "retryDetails": {
            "user": job.retries_user,
            "platform": job.retries_platform,
            "resource": job.retries_resource,
        },
        "retryDelayTime": None,
        "submissionTime": ms(job.submitted_at),
        "createdTime": ms(job.submitted_at),
        "launchedTime": ms(job.launched_at),
        "completedTime": ms(job.completed_at),
        "appExitCode": job.exit_code,
        "virtualCluster": job.virtual_cluster,
        "totalGpuNumber": total_gpus(job),
        "totalTaskNumber": total_tasks(job),
        "totalTaskRoleNumber": len(job.spec.get("roles", [])),
        "debugId": job.id,
    }


def attempt_tasks(session: Session, job: Job, attempt: int) -> Sequence[Task]:
    """Every task attempt of the job's (shoal) ``attempt``, oldest first."""
    query = select(Task).where(Task.job_id == job.id, Task.job_attempt == attempt)
    return session.scalars(query.order_by(Task.id)).all()


def latest_task_attempts(tasks: Sequence[Task]) -> list[Task]:
    """Of each task (role, index), its latest attempt."""
    latest: dict[tuple[str, int], Task] = {}
    for task in tasks:
        key = (task.role, task.index)
        if key not in latest or task.attempt > latest[key].attempt:
            latest[key] = task
    return sorted(latest.values(), key=lambda t: (t.role, t.index))


def container(task: Task, job: Job) -> dict[str, Any]:
    """The fields of one task attempt's container."""
    return {
        "containerId": task.attempt_id,
        "containerIp": task.address,
        "containerNodeName": task.node,
        "containerPorts": {label: ",".join(map(str, ports)) for label, ports in task.ports},
        # OpenPAI's GPU bitmap (bit i: GPU i), as the string the description asks for
        "containerGpus": str(sum(1 << g for g in task.gpu_indices)) if task.gpu_indices else None,
        "containerLog": log_path(task, job),
        "containerExitCode": task.exit_code,
        "containerExitSpec": exit_spec(task.exit_code),
        "containerExitDiagnostics": task.diagnostics or None,
    }


def log_path(task: Task, job: Job) -> str:
    """OpenPAI's log route of this task attempt (it lists stdout and stderr)."""
    return (
        f"/api/v2/jobs/{job.user}~{job.name}/attempts/{task.job_attempt - 1}/taskRoles/"
        f"{task.role}/taskIndex/{task.index}/attempts/{task.attempt - 1}/logs"
    )


def task_status(task: Task, job: Job) -> dict[str, Any]:
    return {
        "taskIndex": task.index,
        "taskUid": task.attempt_id,
        "taskState": task.state,
        "retries": task.attempt - 1,
        "accountableRetries": task.attempt - 1,
        "createdTime": ms(task.created_at),
        "launchedTime": ms(task.started_at),
        "completedTime": ms(task.finished_at),
        "attemptId": task.attempt - 1,
        "attemptState": task.state,
        **container(task, job),
    }


def detail(session: Session, job: Job, attempt: int, tags: Sequence[str]) -> dict[str, Any]:
    """``JobDetail`` of the job's (shoal) ``attempt``; attempt 0 is a job never placed yet."""
    tasks = attempt_tasks(session, job, attempt) if attempt else []
    roles: dict[str, Any] = {}
    for task in latest_task_attempts(tasks):
        role = roles.setdefault(
            task.role, {"taskRoleStatus": {"name": task.role}, "taskStatuses": []}
        )
        role["taskStatuses"].append(task_status(task, job))
    status = {k: v for k, v in summary(job).items() if k not in ("name", "debugId", "tags")}
    latest = attempt == job.attempt
    finished = [t.finished_at for t in tasks if t.finished_at is not None]
    started = [t.started_at for t in tasks if t.started_at is not None]
    status.update(
        subState=sub_state(job, tasks) if latest else "AttemptCompleted",
        attemptId=max(attempt - 1, 0),
        attemptState=job.state if latest else _attempt_state(tasks),
        appId=f"{job.id}-{attempt}" if attempt else None,
        appCreatedTime=ms(min(t.created_at for t in tasks)) if tasks else None,
        appLaunchedTime=ms(min(started)) if started else None,
        appCompletedTime=ms(max(finished)) if finished and not _active(tasks) else None,
        appExitCode=job.exit_code if latest else None,
        appExitSpec=exit_spec(job.exit_code) if latest else None,
        appExitDiagnostics=job.diagnostics if latest else None,
        appExitType=(exit_spec(job.exit_code) or {}).get("type") if latest else None,
    )
    return {
        "name": job.name,
        "tags": list(tags),
        "jobPriority": job.priority_class,
        "debugId": job.id,
        "jobStatus": status,
        "taskRoles": roles,
    }


def _active(tasks: Sequence[Task]) -> bool:
    return any(t.finished_at is None for t in latest_task_attempts(tasks))


def _attempt_state(tasks: Sequence[Task]) -> str:
    """An earlier attempt's outcome: failed if a task of it failed, succeeded if all did, else
    stopped (preempted, or stopped before a restart)."""
    states = {t.state for t in latest_task_attempts(tasks)}
    if State.FAILED.value in states:
        return State.FAILED.value
    return State.SUCCEEDED.value if states == {State.SUCCEEDED.value} else State.STOPPED.value
