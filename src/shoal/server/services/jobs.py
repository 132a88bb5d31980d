"""Job use cases: submit (durable before the answer), stop, look up, list."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import bindparam, func, insert, select
from sqlalchemy.orm import Session

from shoal import archives
from shoal.core.plan import InfeasibleJob
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot
from shoal.core.states import State
from shoal.planning import job_request
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.notify import noted_news
from shoal.server.schemas import SubmitRequest
from shoal.server.services.arrays import element_rows
from shoal.server.services.blobs import Received
from shoal.server.services.datasets import blob_store, resolve_declared
from shoal.server.services.events import record
from shoal.server.services.nodes import load_nodes
from shoal.server.services.stopping import stop_array, stop_job
from shoal.server.services.taskenv import check_variables, inherited, with_cli_env, workdir_warning
from shoal.server.services.vcs import ensure_exists
from shoal.spec.arrays import ArrayError, ArrayRange, parse_array
from shoal.spec.errors import SpecError
from shoal.spec.loader import load_job_text
from shoal.spec.model import JobSpec, SourceFormat
from shoal.spec.patterns import JOB_NAME_RE
from shoal.store.models import Job

ACTIVE = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)
MAX_ARRAY_TASKS = 100_000  # tasks of all the elements of one array
# Statements built once (SQLAlchemy then skips their construction on every submission).
_MAX_SEQ = select(func.max(Job.seq))
_CLASH = (
    select(Job.id)
    .where(Job.user == bindparam("user"), Job.name == bindparam("name"), Job.state.in_(ACTIVE))
    .limit(1)
)
_INSERT_JOB = insert(Job)


def parse_submission(
    request: SubmitRequest,
) -> tuple[SourceFormat, list[JobSpec], list[dict[str, object]]]:
    fmt = None if request.format == "auto" else SourceFormat(request.format)
    try:
        parsed = load_job_text(request.spec, request.params, fmt)
    except SpecError as exc:
        raise ApiError(
            400,
            "InvalidJobSpec",
            "the job file has errors: " + "; ".join(p.render() for p in exc.problems[:5]),
            [p.to_dict() for p in exc.problems],
        ) from None
    jobs = list(parsed.jobs)
    if request.name is not None:
        if not JOB_NAME_RE.match(request.name):
            raise ApiError(
                400,
                "InvalidJobName",
                f"job name {request.name!r} is not valid: use "
                "letters, digits, '_', '.' or '-', starting with a letter or digit",
            )
        if len(jobs) > 1:
            raise ApiError(400, "InvalidJobName", "--name cannot rename the jobs of a schedule")
        jobs = [jobs[0].model_copy(update={"name": request.name})]
    return parsed.format, jobs, [w.to_dict() for w in parsed.warnings]


def _never_fits(ctx: ServerContext, session: Session, spec: JobSpec) -> InfeasibleJob | None:
    nodes = load_nodes(session, include_lost=True)
    if not nodes:
        return None  # no node has joined yet: nothing to judge against
    plan = schedule(ClusterSnapshot(tuple(nodes), (job_request(spec, "check"),)), ctx.clock())
    return plan.infeasible[0] if plan.infeasible else None


def code_hash_of(ctx: ServerContext, request: SubmitRequest) -> str | None:
    """The sha256 of the job's code archive: ``code_hash`` (uploaded before), or the inline
    base64 ``code_archive`` (checked and stored in the blob store like an upload)."""
    if request.code_hash is not None:
        if not blob_store(ctx).is_code(request.code_hash):
            raise ApiError(
                400,
                "NoCodeArchive",
                f"the server has no code archive {request.code_hash}: upload it first "
                "(PUT /api/v1/code/{sha256}; `shoal job submit` does)",
            )
        return request.code_hash
    if request.code_archive is None:
        return None
    try:
        data = base64.b64decode(request.code_archive, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "InvalidCodeArchive", "code_archive is not valid base64") from None
    if len(data) > ctx.settings.max_upload_bytes:
        raise ApiError(
            413,
            "CodeArchiveTooLarge",
            f"the code archive is {len(data)} bytes; the limit is {ctx.settings.max_upload_bytes}",
        )
    return _keep_inline_archive(ctx, data)


def _keep_inline_archive(ctx: ServerContext, data: bytes) -> str:
    store = blob_store(ctx)
    store.tmp.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=store.tmp, prefix="inline-")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            archives.check(path, max_unpacked=ctx.settings.max_upload_bytes * 20)
        except archives.ArchiveError as exc:
            raise ApiError(400, "UnsafeArchive", f"the code archive is refused: {exc}") from None
        sha256 = hashlib.sha256(data).hexdigest()
        store.commit(Received(path, sha256, len(data)))
        store.mark_code(sha256)
    finally:
        path.unlink(missing_ok=True)
    return sha256


@dataclass(frozen=True, slots=True)
class Submitted:
    """What a submission stored (committed): the jobs' ids and names, the warnings, and the
    array each job is the parent of (None for an ordinary job)."""

    ids: list[str]
    names: list[str]
    warnings: list[dict[str, object]]
    array: ArrayRange | None = None


def submit(ctx: ServerContext, principal: Principal, request: SubmitRequest) -> Submitted:
    """Store the job(s), committed before this returns.

    The rows are written with plain inserts (no ORM unit of work): a submission is one short
    transaction of a few statements, then one fsync. An array is its parent and its elements,
    written together in the same transaction (docs/arrays.md)."""
    fmt, specs, warnings = parse_submission(request)
    array = array_of(request, specs)
    if array is not None:
        specs = [specs[0].model_copy(update={"array": array.expression})]
    check_variables(request)
    specs = [with_cli_env(spec, request.env) for spec in specs]
    where = workdir_warning(request)
    if where is not None:
        warnings.append(where)
    code_hash = code_hash_of(ctx, request)
    now = ctx.clock()
    ids: list[str] = []
    with ctx.db.write() as session:
        connection = session.connection()
        for spec in specs:
            vc = request.virtual_cluster or spec.virtual_cluster or "default"
            _check_membership(session, principal, vc)
            _check_conflicts(ctx, session, principal, spec)
            pinned = resolve_declared(session, principal, spec.all_data())
            seq = (connection.execute(_MAX_SEQ).scalar() or 0) + 1
            job_id = str(seq)
            row = _new_job(job_id, seq, spec, principal, vc, fmt, request, now)
            row |= {"code_hash": code_hash, "data_sets": pinned}
            queued = f"submitted by {principal.user} to virtual cluster {vc}"
            if array is None:
                connection.execute(_INSERT_JOB, row)
            else:
                _insert_array(session, row, array, now)
                queued = f"array {array.expression} of {array.size} elements {queued}"
            record(session, job_id, now, "queued", queued)
            ids.append(job_id)
    ctx.wake_scheduler()
    return Submitted(ids, [spec.name for spec in specs], warnings, array)


def array_of(request: SubmitRequest, specs: list[JobSpec]) -> ArrayRange | None:
    """The array to submit the job as: ``array`` of the request (``--array``), else the job
    file's; a 400 ``InvalidArray`` naming the field and the fix if it is not valid."""
    text = request.array if request.array is not None else None
    if text is None and len(specs) == 1:
        text = specs[0].array
    if text is None:
        return None
    if len(specs) > 1:
        raise ApiError(
            400,
            "InvalidArray",
            f"array: the file holds {len(specs)} jobs; an array is made of one job: "
            "submit each as its own file",
        )
    try:
        array = parse_array(text)
    except ArrayError as exc:
        raise ApiError(
            400,
            "InvalidArray",
            f"array {text!r}: {exc.message}; {exc.hint}",
            [{"path": "array", "message": exc.message, "hint": exc.hint}],
        ) from None
    tasks = array.size * specs[0].total_instances
    if tasks > MAX_ARRAY_TASKS:
        raise ApiError(
            400,
            "InvalidArray",
            f"array {array.expression}: {array.size:,} elements of "
            f"{specs[0].total_instances} tasks are {tasks:,} tasks; at most "
            f"{MAX_ARRAY_TASKS:,} per array: split it into smaller arrays",
        )
    return array


def _insert_array(
    session: Session, parent: dict[str, object], array: ArrayRange, now: float
) -> None:
    """The parent (held: never scheduled itself) and its elements, past the cap held too."""
    parent |= {"array_size": array.size, "array_cap": array.cap, "array_held": True}
    spec = parent["spec"]
    assert isinstance(spec, dict)
    elements = element_rows(parent, array, {**spec, "array": None})
    connection = session.connection()
    connection.execute(_INSERT_JOB, parent)
    connection.execute(_INSERT_JOB, elements)
    for element in elements:
        held = " (held by the cap until an earlier element ends)" if element["array_held"] else ""
        record(
            session,
            str(element["id"]),
            now,
            "queued",
            f"element {element['array_index']} of array {parent['id']}{held}",
        )


def _check_membership(session: Session, principal: Principal, vc: str) -> None:
    row = ensure_exists(session, vc)
    members = set(row.members) if row is not None else set()
    allowed = principal.is_admin or not members or principal.user in members
    if row is None or allowed or members & set(principal.groups):
        return
    raise ApiError(
        403,
        "ForbiddenUserError",
        f"you are not a member of virtual cluster {vc}; ask an admin to add you",
    )


def _check_conflicts(
    ctx: ServerContext, session: Session, principal: Principal, spec: JobSpec
) -> None:
    clash = (
        session.connection().execute(_CLASH, {"user": principal.user, "name": spec.name}).scalar()
    )
    if clash is not None:
        raise ApiError(
            409,
            "ConflictJobError",
            f"you already have an active job named {spec.name!r} (id {clash}); "
            "wait for it, stop it, or submit with another --name",
        )
    verdict = _never_fits(ctx, session, spec)
    if verdict is not None:
        raise ApiError(422, "NeverFits", verdict.reason.message)


def _new_job(
    job_id: str,
    seq: int,
    spec: JobSpec,
    principal: Principal,
    vc: str,
    fmt: SourceFormat,
    request: SubmitRequest,
    now: float,
) -> dict[str, object]:
    """The new job's row, for ``_INSERT_JOB``."""
    return {
        "id": job_id,
        "seq": seq,
        "name": spec.name,
        "user": principal.user,
        "virtual_cluster": vc,
        "state": State.WAITING.value,
        "version": 1,
        "priority": spec.priority_class.rank,
        "priority_class": spec.priority_class.value,
        "submitted_at": now,
        "attempt": 0,
        "job_retry_count": spec.job_retry_count,
        "source_format": fmt.value,
        "source_text": request.spec,
        "spec": spec.model_dump(mode="json", exclude={"secrets"}),
        "secrets": dict(spec.secrets),
        "has_code": request.code_archive is not None or request.code_hash is not None,
        "inherited_env": inherited(request),
        "submit_dir": request.workdir,
        "stop_requested": False,
        "diagnostics": "",
    }


def find_job(session: Session, principal: Principal, ref: str) -> Job:
    """A job by id, by ``user~name`` (OpenPAI style), or by name: the caller's newest job of that
    name; for an admin with none, the one user's job of that name (active jobs first). A name
    that several users' jobs share is a 409 listing the ``user~name`` choices. Other users' jobs
    are a 404 for non-admins (their details stay hidden)."""
    job = session.get(Job, ref)
    if job is None:
        user, sep, name = ref.partition("~")
        if sep:
            job = _newest(session, user, name)
        else:
            job = _newest(session, principal.user, ref)
            if job is None and principal.is_admin:
                job = _anyone_named(session, ref)
    if job is None or not (principal.is_admin or job.user == principal.user):
        raise ApiError(404, "NoJobError", f"no job {ref!r}")
    return job


def _newest(session: Session, user: str, name: str) -> Job | None:
    """The user's newest job named ``name`` (an array by its parent, never an element)."""
    return session.scalar(
        select(Job)
        .where(Job.user == user, Job.name == name, Job.array_job_id.is_(None))
        .order_by(Job.seq.desc())
        .limit(1)
    )


def _anyone_named(session: Session, name: str) -> Job | None:
    """The newest job named ``name`` if it is one user's (active jobs win over finished ones)."""
    named = select(Job).where(Job.name == name, Job.array_job_id.is_(None))
    jobs = list(session.scalars(named.order_by(Job.seq.desc())))
    active = [job for job in jobs if job.state in ACTIVE]
    candidates = active or jobs
    users = sorted({job.user for job in candidates})
    if len(users) > 1:
        choices = ", ".join(f"{user}~{name}" for user in users)
        raise ApiError(
            409,
            "AmbiguousJobName",
            f"{len(users)} users have {'active ' if active else ''}jobs named {name!r}; "
            f"name one as USER~NAME: {choices}",
            [{"path": "job", "message": f"{user}~{name}"} for user in users],
        )
    return candidates[0] if candidates else None


def stop(ctx: ServerContext, principal: Principal, ref: str) -> Job:
    """Stop a job; an array's parent stops every element with it (``stopping.stop_array``)."""
    now = ctx.clock()
    with ctx.db.write() as session:
        job = find_job(session, principal, ref)
        if job.array_size is not None:
            stop_array(session, job, principal.user, now)
        else:
            stop_job(session, job, principal.user, now)
    ctx.wake_agents(noted_news(session))
    ctx.wake_scheduler()
    return job
