"""Virtual clusters: created, changed and deleted live (no restart), checked against the cluster.

The ``default`` VC always exists and is open to everyone; its guarantee is whatever the other VCs
do not guarantee, so together the guarantees never exceed the cluster. Its other settings
(borrowing limit, user cap, preemption, strict FIFO, description) can be changed like any VC's.

Changes are patches: only the settings named change (``patch``); ``PUT`` is a full replace,
a patch that names every setting.

``aging`` (``{policy: las, thresholds_gpu_hours: [1, 10]}``) switches on attained-service aging
in a VC: ``load_aging`` gives the scheduler's snapshot each aging VC's ``core.aging.Aging``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.resources import UNLIMITED, UNLIMITED_GPU, ResourceVector
from shoal.core.states import State
from shoal.server.admin_schemas import (
    ChangeResult,
    FieldChange,
    VirtualClusterIn,
    VirtualClusterOut,
    VirtualClusterPatch,
)
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import audit
from shoal.server.services.nodes import HOLDING, load_nodes
from shoal.server.services.vc_loading import (  # noqa: F401 (some moved there: callers import them here)
    _ALL_ROWS,
    DEFAULT_VC,
    _limited,
    aging_of,
    cluster_total,
    load_aging,
    load_virtual_clusters,
    reach_of,
)
from shoal.store.models import Job, Task, VirtualClusterRow


def _check_total(
    session: Session, name: str, wanted: ResourceVector, typed: dict[str, int]
) -> None:
    total = cluster_total(session)
    others = ResourceVector()
    typed_others: dict[str, int] = {}
    for row in session.scalars(select(VirtualClusterRow)):
        if row.name not in (name, DEFAULT_VC):
            others = others + _limited(row)
            for gpu_type, count in (row.gpu_by_type or {}).items():
                typed_others[gpu_type] = typed_others.get(gpu_type, 0) + count
    after = others + wanted
    if not after.fits_in(total):
        raise ApiError(
            400,
            "InvalidParametersError",
            f"the guarantees would add up to {after.describe()}, more than the cluster's "
            f"{total.describe()}; lower this guarantee or another VC's first",
        )
    if sum(typed.values()) > wanted.gpu:
        raise ApiError(
            400,
            "InvalidParametersError",
            "the per-type GPU guarantees add up to more than the VC's GPU guarantee",
        )
    have = _gpus_by_type(session)
    for gpu_type, count in typed.items():
        if typed_others.get(gpu_type, 0) + count > have.get(gpu_type, 0):
            raise ApiError(
                400,
                "InvalidParametersError",
                f"the {gpu_type} guarantees would add up to "
                f"{typed_others.get(gpu_type, 0) + count}, but the cluster has "
                f"{have.get(gpu_type, 0)} {gpu_type} GPUs",
            )


def _gpus_by_type(session: Session) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in load_nodes(session):
        if node.gpu_type is not None:
            counts[node.gpu_type] = counts.get(node.gpu_type, 0) + node.capacity.gpu
    return counts


SETTINGS = tuple(VirtualClusterIn.model_fields)
DEFAULTS: dict[str, Any] = VirtualClusterIn().model_dump()
GUARANTEE_SETTINGS = frozenset(
    ("guarantee_cpu", "guarantee_memory_mib", "guarantee_gpu", "guarantee_gpu_by_type")
)
FIXED_FOR_DEFAULT = GUARANTEE_SETTINGS | {"members"}
NOT_CLEARABLE = frozenset(("preempt_within", "strict_fifo"))


def settings_of(row: VirtualClusterRow | None) -> dict[str, Any]:
    """A VC's settings as the API takes them (the defaults for a ``default`` with no row)."""
    if row is None:
        return dict(DEFAULTS)

    def cores(millis: int | None) -> float | None:
        return None if millis is None else millis / 1000

    return {
        "description": row.description,
        "guarantee_cpu": cores(row.guarantee_cpu_millis),
        "guarantee_memory_mib": row.guarantee_memory_mib,
        "guarantee_gpu": row.guarantee_gpu,
        "guarantee_gpu_by_type": dict(row.gpu_by_type or {}),
        "borrow_cpu": cores(row.borrow_cpu_millis),
        "borrow_memory_mib": row.borrow_memory_mib,
        "borrow_gpu": row.borrow_gpu,
        "user_gpu_cap": row.user_gpu_cap,
        "preempt_within": row.preempt_within,
        "strict_fifo": row.strict_fifo,
        "aging": None if row.aging is None else dict(row.aging),
        "members": list(row.members),
        "idle_timeout_s": row.idle_timeout_s,
    }


def _write(row: VirtualClusterRow, settings: dict[str, Any]) -> None:
    def millis(cores: float | None) -> int | None:
        return None if cores is None else round(cores * 1000)

    row.description = settings["description"]
    row.guarantee_cpu_millis = millis(settings["guarantee_cpu"])
    row.guarantee_memory_mib = settings["guarantee_memory_mib"]
    row.guarantee_gpu = settings["guarantee_gpu"]
    row.gpu_by_type = dict(settings["guarantee_gpu_by_type"])
    row.borrow_cpu_millis = millis(settings["borrow_cpu"])
    row.borrow_memory_mib = settings["borrow_memory_mib"]
    row.borrow_gpu = settings["borrow_gpu"]
    row.user_gpu_cap = settings["user_gpu_cap"]
    row.preempt_within = settings["preempt_within"]
    row.strict_fifo = settings["strict_fifo"]
    row.aging = None if settings["aging"] is None else dict(settings["aging"])
    row.members = list(settings["members"])
    row.idle_timeout_s = settings["idle_timeout_s"]


def _patched(before: dict[str, Any], body: VirtualClusterPatch) -> dict[str, Any]:
    """``before`` with the fields ``body`` names; an explicit null restores the default."""
    after = dict(before)
    for name in sorted(body.model_fields_set):
        value = getattr(body, name)
        if value is None and name in NOT_CLEARABLE:
            raise ApiError(
                400,
                "InvalidParametersError",
                f"{name} is true or false; null cannot clear it",
                [{"path": name, "message": "give true or false"}],
            )
        if isinstance(value, BaseModel):
            value = value.model_dump()
        after[name] = DEFAULTS[name] if value is None else value
    for gpu_type, count in after["guarantee_gpu_by_type"].items():
        if count < 0:
            raise ApiError(
                400,
                "InvalidParametersError",
                f"guarantee_gpu_by_type.{gpu_type} is {count}; give a count >= 0",
                [{"path": f"guarantee_gpu_by_type.{gpu_type}", "message": "must be >= 0"}],
            )
    return after


def _refuse_fixed_default_settings(before: dict[str, Any], after: dict[str, Any]) -> None:
    fixed = sorted(f for f in FIXED_FOR_DEFAULT if after[f] != before[f])
    if fixed:
        raise ApiError(
            400,
            "InvalidParametersError",
            f"the default VC's {', '.join(fixed)} cannot change: its guarantee is what the "
            "other VCs leave (change theirs) and it is open to everyone (make a new VC "
            "with members instead)",
            [{"path": f, "message": "fixed for the default VC"} for f in fixed],
        )


def _session(ctx: ServerContext, dry_run: bool) -> AbstractContextManager[Session]:
    """A dry run only reads: it can never write, whatever happens below."""
    return ctx.db.read() if dry_run else ctx.db.write()


def patch(
    ctx: ServerContext,
    name: str,
    body: VirtualClusterPatch,
    dry_run: bool = False,
    create: bool = False,
) -> ChangeResult:
    """Change only the settings ``body`` names, checked like a creation; ``dry_run``: compute
    the answer, write nothing."""
    with _session(ctx, dry_run) as session:
        row = session.get(VirtualClusterRow, name)
        if create and (row is not None or name == DEFAULT_VC):
            raise ApiError(409, "ConflictVirtualClusterError", f"virtual cluster {name} exists")
        if not create and row is None and name != DEFAULT_VC:
            raise ApiError(
                404,
                "NoVirtualClusterError",
                f"no virtual cluster {name!r}; see `shoal vc list` or create it",
            )
        before = settings_of(row)
        after = _patched(before, body)
        if name == DEFAULT_VC:
            _refuse_fixed_default_settings(before, after)
        elif create or any(after[f] != before[f] for f in GUARANTEE_SETTINGS):
            cpu = after["guarantee_cpu"]
            wanted = ResourceVector(
                0 if cpu is None else round(cpu * 1000),
                after["guarantee_memory_mib"] or 0,
                after["guarantee_gpu"],
            )
            _check_total(session, name, wanted, dict(after["guarantee_gpu_by_type"]))
        changes = [
            FieldChange(field=f, before=before[f], after=after[f])
            for f in SETTINGS
            if before[f] != after[f]
        ]
        if not dry_run and (changes or create):
            if row is None:
                row = VirtualClusterRow(name=name, created_at=ctx.clock())
                session.add(row)
            _write(row, after)
            action = "vc.create" if create else "vc.update"
            detail = {"changes": [c.model_dump() for c in changes]}
            audit.record(session, ctx.clock(), None, action, f"vc {name}", detail)
    if not dry_run and changes:
        ctx.wake_scheduler()
    if name == DEFAULT_VC:
        before = {k: v for k, v in before.items() if k not in FIXED_FOR_DEFAULT}
        after = {k: v for k, v in after.items() if k not in FIXED_FOR_DEFAULT}
    return ChangeResult(name=name, dryRun=dry_run, before=before, after=after, changes=changes)


def upsert(ctx: ServerContext, name: str, body: VirtualClusterIn, create: bool) -> None:
    """Create a VC, or replace every setting of one (``PUT``: what is not given is reset)."""
    patch(ctx, name, VirtualClusterPatch(**body.model_dump()), create=create)


def delete(ctx: ServerContext, name: str) -> None:
    if name == DEFAULT_VC:
        raise ApiError(400, "InvalidParametersError", "the default virtual cluster cannot go")
    with ctx.db.write() as session:
        row = session.get(VirtualClusterRow, name)
        if row is None:
            raise ApiError(404, "NoVirtualClusterError", f"no virtual cluster {name!r}")
        active = session.scalar(
            select(Job.id).where(
                Job.virtual_cluster == name,
                Job.state.in_((State.WAITING.value, State.RUNNING.value, State.STOPPING.value)),
            )
        )
        if active is not None:
            raise ApiError(
                409,
                "ConflictVirtualClusterError",
                f"virtual cluster {name} still has active jobs (e.g. {active}); "
                "stop them or let them finish first",
            )
        session.delete(row)
        audit.record(session, ctx.clock(), None, "vc.delete", f"vc {name}")
    ctx.wake_scheduler()


def ensure_exists(session: Session, name: str) -> VirtualClusterRow | None:
    """The VC's row (None for ``default``); 400 if it does not exist."""
    if name == DEFAULT_VC:
        return None
    row = session.get(VirtualClusterRow, name)
    if row is None:
        raise ApiError(
            400,
            "NoVirtualClusterError",
            f"virtual cluster {name!r} does not exist; see `shoal vc list`",
        )
    return row


# What unfinished tasks hold, by VC, as plain rows (no objects: a busy cluster has thousands)
_HELD_BY_VC = (
    select(Task.cpu_millis, Task.memory_mib, Task.gpu_indices, Job.virtual_cluster)
    .join(Job, Job.id == Task.job_id)
    .where(Task.state.in_(HOLDING))
)


def describe_all(ctx: ServerContext) -> list[VirtualClusterOut]:
    with ctx.db.read() as session:
        vcs = load_virtual_clusters(session)
        rows = {r.name: r for r in session.scalars(select(VirtualClusterRow))}
        used: dict[str, ResourceVector] = {}
        for cpu, memory, gpus, vc in session.connection().execute(_HELD_BY_VC):
            used[vc] = used.get(vc, ResourceVector()) + ResourceVector(cpu, memory, len(gpus))
        total = cluster_total(session)
    return [
        VirtualClusterOut(
            name=vc.name,
            description=rows[vc.name].description if vc.name in rows else "everyone's share",
            guarantee=_limit_out(vc.guarantee),
            gpuByType=dict(vc.gpu_by_type),
            borrowLimit=None if vc.borrow_limit is None else _limit_out(vc.borrow_limit),
            used=_vector_out(used.get(vc.name, ResourceVector())),
            userGpuCap=vc.user_gpu_cap,
            preemptWithin=vc.preempt_within,
            strictFifo=vc.strict_fifo,
            aging=rows[vc.name].aging if vc.name in rows else None,
            members=["*"] if vc.name == DEFAULT_VC else list(rows[vc.name].members),
            clusterTotal=_vector_out(total),
            idleTimeoutS=rows[vc.name].idle_timeout_s if vc.name in rows else None,
        )
        for vc in vcs
    ]


def _limit_out(vector: ResourceVector) -> dict[str, float | None]:
    """A guarantee or a limit; null for a resource it does not limit (no sentinel numbers)."""
    return {
        "cpu": None if vector.cpu_millis >= UNLIMITED else vector.cpu_millis / 1000,
        "memoryMiB": None if vector.memory_mib >= UNLIMITED else float(vector.memory_mib),
        "gpu": None if vector.gpu >= UNLIMITED_GPU else float(vector.gpu),
    }


def _vector_out(vector: ResourceVector) -> dict[str, float]:
    return {
        "cpu": vector.cpu_millis / 1000,
        "memoryMiB": float(vector.memory_mib),
        "gpu": float(vector.gpu),
    }


# ---- membership: users and groups named in ``members`` (OpenPAI's virtualCluster lists) ----


def named_rows(session: Session) -> list[VirtualClusterRow]:
    """Every VC's row but ``default``'s (whose members are fixed: everyone)."""
    return [r for r in session.scalars(_ALL_ROWS) if r.name != DEFAULT_VC]


def usable_by(rows: list[VirtualClusterRow], names: set[str], admin: bool) -> list[str]:
    """The VCs whose jobs a user (``names``: their name and groups) may submit, of ``rows``
    (``named_rows``): every VC for an admin; else ``default``, the VCs open to everyone (no
    members) and those naming them."""
    return [DEFAULT_VC] + [r.name for r in rows if admin or not r.members or names & set(r.members)]


def set_membership(session: Session, member: str, wanted: list[str]) -> None:
    """Make ``member`` (a user or group name) usable for exactly the VCs in ``wanted``, as far as
    members decide it: it is added to the restricted VCs it wants and removed from the others
    that name it. ``default`` and VCs open to everyone need no change (adding a member would
    close them to the others); a VC whose last member it is keeps it, since removing it would
    open the VC to everyone: that is refused (400), changing nothing."""
    rows = {r.name: r for r in session.scalars(_ALL_ROWS)}
    unknown = sorted(n for n in set(wanted) if n != DEFAULT_VC and n not in rows)
    if unknown:
        raise ApiError(
            400,
            "NoVirtualClusterError",
            f"virtual cluster(s) {', '.join(unknown)} do not exist; "
            "see GET /api/v2/virtual-clusters",
        )
    changes: dict[str, list[str]] = {}
    for name, row in rows.items():
        members = list(row.members)
        if name == DEFAULT_VC or not members:
            continue
        if name in wanted and member not in members:
            changes[name] = [*members, member]
        elif name not in wanted and member in members:
            if members == [member]:
                raise ApiError(
                    400,
                    "InvalidParametersError",
                    f"{member} is the last member of virtual cluster {name}: removing it would "
                    f"open {name} to everyone; add another member first (shoal vc update {name} "
                    "--add-member NAME)",
                )
            changes[name] = [m for m in members if m != member]
    for name, members in changes.items():
        rows[name].members = members


def forget_member(session: Session, member: str) -> None:
    """``member`` (a deleted group) leaves every VC, except one it is the last member of: that VC
    keeps naming it, so it stays closed to everyone else rather than opening."""
    for row in session.scalars(_ALL_ROWS):
        if member in row.members and list(row.members) != [member]:
            row.members = [m for m in row.members if m != member]
