"""SSH into a job's tasks (docs/ssh.md): what a client needs to reach them (``GET
/api/v1/jobs/{job}/ssh``): the user to log in as, the job's host key (made with the job,
``services.job_keys``) and each task's address and port labelled ``ssh``."""

from __future__ import annotations

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.services.jobs import find_job
from shoal.server.services.snapshot import spec_of
from shoal.spec import openpai_ssh as plugin
from shoal.spec.model import JobSpec
from shoal.store.models import Job, Task


class TaskSsh(BaseModel):
    role: str
    index: int
    state: str
    node: str
    address: str
    port: int | None  # the task's port labelled ssh (None: it has none)
    attempt_id: str


class JobSsh(BaseModel):
    job_id: str
    name: str
    login: str  # the user name to log in as: the job's user
    host_key_alias: str  # the name the host key is known by (ssh's HostKeyAlias)
    host_public_key: str
    jobssh: bool
    tasks: list[TaskSsh]


HOST_KEY_ALIAS = "shoal-job-host"


def ssh_spec(job: Job) -> JobSpec | None:
    """The job's spec if its tasks run sshd, with the keys the server made (else None)."""
    spec = spec_of(job)
    if not plugin.uses_ssh(spec) or plugin.HOST_PUBLIC_KEY_VAR not in spec.env:
        return None
    return spec


def current_tasks(session: Session, job: Job) -> list[Task]:
    """The tasks of the job's newest attempt, in role and index order."""
    rows = session.scalars(
        select(Task).where(Task.job_id == job.id, Task.job_attempt == job.attempt).order_by(Task.id)
    )
    newest: dict[tuple[str, int], Task] = {}
    for task in rows:
        newest[(task.role, task.index)] = task  # a task's retry comes after it
    order = {role.name: i for i, role in enumerate(spec_of(job).roles)}
    return sorted(newest.values(), key=lambda t: (order.get(t.role, 0), t.index))


def ssh_port(task: Task) -> int | None:
    for label, ports in task.ports:
        if label == plugin.PORT_LABEL and ports:
            return int(ports[0])
    return None


def job_ssh(ctx: ServerContext, principal: Principal, ref: str) -> JobSsh:
    with ctx.db.read() as session:
        job = find_job(session, principal, ref)
        spec = ssh_spec(job)
        if spec is None:
            raise ApiError(
                404,
                "NoJobSshInfoError",
                f"job {job.id} ({job.user}~{job.name}) runs no sshd: add OpenPAI's ssh runtime "
                "plugin to its job file (docs/ssh.md)",
            )
        tasks = [
            TaskSsh(
                role=t.role,
                index=t.index,
                state=t.state,
                node=t.node,
                address=t.address,
                port=ssh_port(t),
                attempt_id=t.attempt_id,
            )
            for t in current_tasks(session, job)
        ]
        return JobSsh(
            job_id=job.id,
            name=job.name,
            login=job.user,
            host_key_alias=HOST_KEY_ALIAS,
            host_public_key=spec.env[plugin.HOST_PUBLIC_KEY_VAR],
            jobssh=any(r.env.get(plugin.JOBSSH_VAR) == "true" for r in plugin.ssh_roles(spec)),
            tasks=tasks,
        )


def job_private_key(ctx: ServerContext, principal: Principal, ref: str) -> str:
    """The job key's private half (OpenPAI's ``privateKeyDirectDownloadLink``): its owner's and
    admins' only."""
    with ctx.db.read() as session:
        job = find_job(session, principal, ref)
        spec = ssh_spec(job)
        key = spec.secrets.get(plugin.JOB_KEY_SECRET) if spec is not None else None
        if key is None:
            raise ApiError(
                404, "NoJobSshInfoError", f"SSH info of job {job.user}~{job.name} is not found."
            )
        return key + "\n"
