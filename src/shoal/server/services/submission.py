"""Submitting jobs: read and check the job file, then store the job (or the array) durably.

Two steps, so the server can commit several submissions in one transaction:

1. ``prepare``: everything that needs no store (the job file, ``array``, variables, the code
   archive); a 4xx here stores nothing.
2. ``store``: inside a write transaction, every check that reads the store (virtual cluster,
   name clash, data sets, "never fits") first, then the inserts. A "no" is raised before this
   submission writes anything, so the transaction stays good for the others in it.

``submit_grouped`` runs both through ``server.group_commit``, which commits the submissions
waiting at the same moment together (one fsync) and answers none of them before that commit
(docs/benchmarks.md, "API").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from sqlalchemy import bindparam, func, insert, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from shoal.core.quota import beyond_reach
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot
from shoal.core.states import State
from shoal.planning import job_request
from shoal.server.auth import Principal
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import SubmitRequest
from shoal.server.services.arrays import element_rows
from shoal.server.services.datasets import resolve_declared
from shoal.server.services.events import record
from shoal.server.services.image_holds import (
    HOLD_CODE,
    hold_fields,
    hold_message,
    images_of,
    missing_images,
    note_job_images,
)
from shoal.server.services.inline_code import code_hash_of
from shoal.server.services.job_keys import with_job_keys
from shoal.server.services.nodes import load_nodes
from shoal.server.services.runtimes import fallback_runtime, resolve
from shoal.server.services.taskenv import check_variables, inherited, with_cli_env, workdir_warning
from shoal.server.services.vc_loading import reach_of
from shoal.server.services.vcs import ensure_exists
from shoal.server.storage import require_room
from shoal.spec.arrays import ArrayError, ArrayRange, parse_array
from shoal.spec.errors import SpecError
from shoal.spec.loader import ParsedJobs, load_job_text
from shoal.spec.model import JobSpec, Runtime, SourceFormat
from shoal.spec.patterns import JOB_NAME_RE
from shoal.store.models import Job, VirtualClusterRow

ACTIVE = (State.WAITING.value, State.RUNNING.value, State.STOPPING.value)
MAX_ARRAY_TASKS = 100_000  # tasks of all the elements of one array
INLINE_READ_LIMIT = 16 * 1024  # job files up to this size are read on the event loop
FITS_TTL_S = 10.0  # how long "this shape fits the cluster's nodes" is believed without a look
# Statements built once (SQLAlchemy then skips their construction on every submission).
_MAX_SEQ = select(func.max(Job.seq))
_CLASH = (
    select(Job.id)
    .where(Job.user == bindparam("user"), Job.name == bindparam("name"), Job.state.in_(ACTIVE))
    .limit(1)
)
# OpenPAI's rule (``/api/v2``): a user's job name is taken for good, even once the job ended
_NAME_USED = (
    select(Job.id)
    .where(Job.user == bindparam("user"), Job.name == bindparam("name"), Job.array_index.is_(None))
    .limit(1)
)
_INSERT_JOB = insert(Job)
_SEQ_KEY = "shoal.next_seq"


@dataclass(frozen=True, slots=True)
class Prepared:
    """A submission checked as far as it can be without the store."""

    request: SubmitRequest
    fmt: SourceFormat
    specs: list[JobSpec]
    warnings: list[dict[str, object]]
    array: ArrayRange | None
    code_hash: str | None


@dataclass(frozen=True, slots=True)
class Submitted:
    """What a submission stored (committed): the jobs' ids and names, the warnings, and the
    array each job is the parent of (None for an ordinary job)."""

    ids: list[str]
    names: list[str]
    warnings: list[dict[str, object]]
    array: ArrayRange | None = None


def prepare(ctx: ServerContext, request: SubmitRequest) -> Prepared:
    """Read the job file and the request; a 4xx names what is wrong. Touches no table (a code
    archive sent inline is checked and kept in the blob store)."""
    fallback = fallback_runtime(ctx, request)
    fmt, specs, warnings = parse_submission(request, fallback)
    specs = resolve(fallback, request, fmt, specs, warnings)
    array = array_of(request, specs)
    if array is not None:
        specs = [specs[0].model_copy(update={"array": array.expression})]
    check_variables(request)
    specs = [with_cli_env(spec, request.env) for spec in specs]
    where = workdir_warning(request)
    if where is not None:
        warnings.append(where)
    return Prepared(request, fmt, specs, warnings, array, code_hash_of(ctx, request))


async def submit_grouped(
    ctx: ServerContext, principal: Principal, request: SubmitRequest, names_for_good: bool = False
) -> Submitted:
    """Store the job(s) through the group commit (``server.group_commit``): answered once the
    transaction holding them has committed. A small job file is read on the event loop (a
    fraction of a millisecond, less than the hand-off to a worker thread); a large one, or one
    with an inline code archive (file writes), in a worker thread. ``names_for_good``: a name
    any earlier job of the user had is refused too (OpenPAI's rule), not only an active one's."""
    require_room(ctx.settings)  # 507 before anything is read or written (docs/disk.md)
    if request.code_archive is None and len(request.spec) <= INLINE_READ_LIMIT:
        prepared = prepare(ctx, request)
    else:
        prepared = await run_in_threadpool(prepare, ctx, request)
    return await ctx.commits.run(
        lambda session: store(ctx, session, principal, prepared, ctx.clock(), names_for_good)
    )


def store(
    ctx: ServerContext,
    session: Session,
    principal: Principal,
    prepared: Prepared,
    now: float,
    names_for_good: bool = False,
) -> Submitted:
    """Check against the store, then insert (plain statements, no ORM unit of work): nothing of
    this submission is written if any check says no."""
    rows = []
    for submitted in prepared.specs:
        spec = with_job_keys(session, principal.user, submitted)  # the ssh plugin's (job_keys)
        vc = prepared.request.virtual_cluster or spec.virtual_cluster or "default"
        vc_row = _check_membership(session, principal, vc)
        _check_conflicts(ctx, session, principal, spec, names_for_good)
        _check_reach(session, principal, spec, vc, vc_row)
        pinned = resolve_declared(session, principal, spec.all_data())
        images = images_of(spec)
        # on Kubernetes, its nodes pull images themselves: no job waits for a pushed one
        absent = [] if ctx.settings.kubernetes else missing_images(session, images)
        if absent and prepared.request.strict_images:
            raise ApiError(404, HOLD_CODE, f"{hold_message(absent[0])} (--strict-images)")
        rows.append((spec, vc, pinned, images, absent[0] if absent else None))
    _check_names([spec.name for spec in prepared.specs])
    connection = session.connection()
    ids = []
    array = prepared.array
    for spec, vc, pinned, images, missing in rows:
        seq = _next_seq(session)
        job_id = str(seq)
        row = _new_job(job_id, seq, spec, principal, vc, prepared, now)
        row |= {"code_hash": prepared.code_hash, "data_sets": pinned, **hold_fields(missing)}
        queued = f"submitted by {principal.user} to virtual cluster {vc}"
        if array is None:
            connection.execute(_INSERT_JOB, row)
        else:
            _insert_array(session, row, array, now)
            queued = f"array {array.expression} of {array.size} elements {queued}"
        record(session, job_id, now, "queued", queued)
        note_job_images(session, [job_id], images)
        if missing is not None:
            record(session, job_id, now, "image-missing", hold_message(missing))
        ids.append(job_id)
    return Submitted(ids, [spec.name for spec in prepared.specs], prepared.warnings, array)


def parse_submission(
    request: SubmitRequest, runtime: Runtime = Runtime.PROCESS
) -> tuple[SourceFormat, list[JobSpec], list[dict[str, object]]]:
    """``runtime``: how a job whose file does not say will run (for the warnings)."""
    fmt = None if request.format == "auto" else SourceFormat(request.format)
    try:
        if len(request.spec) <= INLINE_READ_LIMIT:  # small files only: the memo stays small
            parsed = _read(request.spec, fmt, tuple(sorted(request.params.items())), runtime)
        else:
            parsed = load_job_text(request.spec, request.params, fmt, runtime)
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


@lru_cache(maxsize=256)
def _read(
    text: str,
    fmt: SourceFormat | None,
    params: tuple[tuple[str, str], ...],
    runtime: Runtime,
) -> ParsedJobs:
    """The job file read once per text, format and parameters: a loop submitting one file again
    and again (``--name run-$i``, as an ``sbatch`` loop) reads it once. What comes back is
    immutable (frozen specs, tuples); a file with errors is read again each time."""
    return load_job_text(text, dict(params), fmt, runtime)


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
    if parent["missing_image"] is not None:  # waiting for an image: unless the cap holds them
        reason = {key: parent[key] for key in ("pending_code", "pending_message")}
        for element in elements:
            if not element["array_held"]:
                element.update(reason)
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


def _next_seq(session: Session) -> int:
    """The next job id: read once per transaction, then counted (a group commit stores many
    jobs in one transaction, under the store's one write lock)."""
    seq = session.info.get(_SEQ_KEY)
    if seq is None:
        seq = session.connection().execute(_MAX_SEQ).scalar() or 0
    session.info[_SEQ_KEY] = seq + 1
    return int(seq) + 1


def _check_names(names: Sequence[str]) -> None:
    """The jobs of one file (a schedule) are stored together: no two may share a name."""
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ApiError(
            409,
            "ConflictJobError",
            f"the file names more than one job {twice[0]!r}; give each job its own name",
        )


def _never_fits(ctx: ServerContext, session: Session, spec: JobSpec) -> str | None:
    """Why the job could never run on the cluster's nodes (None: it could, or no node has joined
    yet). A shape that fitted is believed to fit for ``FITS_TTL_S`` without reading the nodes
    again: a "no" is always decided on the nodes as they are now."""
    request = job_request(spec, "check")
    shape = request.shape()
    seen = ctx.fits.get(shape)
    if seen is not None and time.monotonic() - seen < FITS_TTL_S:
        return None
    nodes = load_nodes(session, include_lost=True)
    if not nodes:
        return None  # nothing to judge against
    plan = schedule(ClusterSnapshot(tuple(nodes), (request,)), ctx.clock())
    if plan.infeasible:
        return plan.infeasible[0].reason.message
    if len(ctx.fits) > 1024:
        ctx.fits.clear()
    ctx.fits[shape] = time.monotonic()
    return None


def _check_membership(session: Session, principal: Principal, vc: str) -> VirtualClusterRow | None:
    """The VC's row (None for ``default``) if the caller may submit to it."""
    row = ensure_exists(session, vc)
    members = set(row.members) if row is not None else set()
    allowed = principal.is_admin or not members or principal.user in members
    if row is None or allowed or members & set(principal.groups):
        return row
    raise ApiError(
        403,
        "ForbiddenUserError",
        f"you are not a member of virtual cluster {vc}; ask an admin to add you",
    )


def _check_reach(
    session: Session, principal: Principal, spec: JobSpec, vc: str, row: VirtualClusterRow | None
) -> None:
    """A 422 if the job asks more than VC ``vc`` may ever use (guarantee plus borrowing limit,
    or the per-user GPU cap): the scheduler's own verdict (``core.quota.beyond_reach``), so the
    job would otherwise wait for ever. A VC edit later is the scheduler's to report."""
    target = reach_of(session, vc, row)
    if target is None:
        return
    request = replace(job_request(spec, "check", 0.0, vc), user=principal.user)
    reason = beyond_reach(target, request)
    if reason is not None:
        raise ApiError(422, reason.code.value, reason.message)


def _check_conflicts(
    ctx: ServerContext,
    session: Session,
    principal: Principal,
    spec: JobSpec,
    names_for_good: bool = False,
) -> None:
    names = {"user": principal.user, "name": spec.name}
    if names_for_good:
        used = session.connection().execute(_NAME_USED, names).scalar()
        if used is not None:
            raise ApiError(
                409,
                "ConflictJobError",
                f"job name {principal.user}~{spec.name} is taken (job {used}); OpenPAI's API "
                "keeps a name for good: submit with another name",
            )
    clash = session.connection().execute(_CLASH, names).scalar()
    if clash is not None:
        raise ApiError(
            409,
            "ConflictJobError",
            f"you already have an active job named {spec.name!r} (id {clash}); "
            "wait for it, stop it, or submit with another --name",
        )
    never = _never_fits(ctx, session, spec)
    if never is not None:
        raise ApiError(422, "NeverFits", never)


def _new_job(
    job_id: str,
    seq: int,
    spec: JobSpec,
    principal: Principal,
    vc: str,
    prepared: Prepared,
    now: float,
) -> dict[str, object]:
    """The new job's row, for ``_INSERT_JOB``."""
    request = prepared.request
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
        "source_format": prepared.fmt.value,
        "source_text": request.spec,
        "spec": spec.model_dump(mode="json", exclude={"secrets"}),
        "secrets": dict(spec.secrets),
        "has_code": request.code_archive is not None or request.code_hash is not None,
        "inherited_env": inherited(request),
        "submit_dir": request.workdir,
        "stop_requested": False,
        "diagnostics": "",
    }
