"""What an agent may download: the code archive and the data sets of an attempt it was told to
launch. An attempt that is not unfinished, or a data set its task does not read, is a 404: an
agent cannot use this to read other data.

Node identity: agents authenticate with one agent token today, so any agent may ask for any
unfinished attempt; ``may_act_for_node`` is where a per-node credential (agent TLS identities)
restricts it to attempts placed on the caller's own nodes.
"""

from __future__ import annotations

from pathlib import Path

from shoal.core.states import State
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services.datasets import blob_store
from shoal.server.services.images import image_for_role
from shoal.server.services.snapshot import spec_of
from shoal.store.models import Job, Task

UNFINISHED = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)


# What an attempt's own credential stands for (services/attempt_credentials checked it against
# the attempt id asked for): the attempt, wherever it runs.
ATTEMPT = Principal(user="", is_admin=False, kind="attempt")


def may_act_for_node(agent: Principal, node: str) -> bool:
    """Whether ``agent`` may fetch for a task placed on ``node``: a node certificate only for its
    own node; the local agent token (and an admin) for any; an attempt's credential for itself."""
    if agent is ATTEMPT:
        return True
    if agent.node is not None:
        return agent.node == node
    return agent.kind in ("agent", "kubernetes") or agent.is_admin


def _attempt(ctx: ServerContext, agent: Principal, attempt_id: str) -> tuple[Job, Task]:
    task_id, _, attempt = attempt_id.partition(".")
    missing = ApiError(404, "NoAttemptError", f"no unfinished attempt {attempt_id} for this agent")
    if not (task_id.isdigit() and attempt.isdigit()):
        raise missing
    with ctx.db.read() as session:
        task = session.get(Task, int(task_id))
        if task is None or task.attempt != int(attempt) or task.state not in UNFINISHED:
            raise missing
        if not may_act_for_node(agent, task.node):
            raise missing
        job = session.get(Job, task.job_id)
        assert job is not None
        session.expunge(job)
        session.expunge(task)
    return job, task


def code_of_attempt(ctx: ServerContext, agent: Principal, attempt_id: str) -> Path:
    job, _ = _attempt(ctx, agent, attempt_id)
    if job.code_hash is None:
        raise ApiError(404, "NoCodeError", f"job {job.id} has no code archive")
    return _blob(ctx, job.code_hash, f"the code archive of job {job.id}")


def data_of_attempt(ctx: ServerContext, agent: Principal, attempt_id: str, sha256: str) -> Path:
    job, task = _attempt(ctx, agent, attempt_id)
    reads = spec_of(job).data_for(task.role)
    pinned = job.data_sets or {}
    if not any(pinned.get(ref, {}).get("sha256") == sha256 for ref in reads):
        raise ApiError(
            404, "NoDataSetError", f"attempt {attempt_id} reads no data set with sha256 {sha256}"
        )
    return _blob(ctx, sha256, f"data set {sha256[:12]}")


def image_of_attempt(ctx: ServerContext, agent: Principal, attempt_id: str, sha256: str) -> Path:
    """The archive of the image an unfinished container attempt runs (as pushed now)."""
    job, task = _attempt(ctx, agent, attempt_id)
    with ctx.db.read() as session:
        image = image_for_role(session, spec_of(job), task.role)
    if image is None or image.blob_sha256 != sha256:
        raise ApiError(
            404,
            "NoImageError",
            f"attempt {attempt_id} runs no image with archive sha256 {sha256} (it was pushed "
            "again or removed since the task was placed)",
        )
    return _blob(ctx, sha256, f"the archive of image {image.name}")


def legacy_code(ctx: ServerContext, job_id: str) -> Path:
    """``GET code/{job_id}`` (agents of before content-addressed code): the job's archive."""
    with ctx.db.read() as session:
        job = session.get(Job, job_id) if job_id.isdigit() else None
        code_hash = job.code_hash if job is not None else None
    if code_hash is not None:
        return _blob(ctx, code_hash, f"the code archive of job {job_id}")
    path = ctx.settings.code_dir / f"{job_id}.tar.gz"
    if not path.exists():
        raise ApiError(404, "NoCodeError", f"job {job_id} has no code archive")
    return path


def _blob(ctx: ServerContext, sha256: str, what: str) -> Path:
    path = blob_store(ctx).path(sha256)
    if not path.is_file():
        raise ApiError(404, "NoBlobError", f"the server no longer has {what} ({sha256})")
    return path
