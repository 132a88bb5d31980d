"""Virtual clusters: created, changed and deleted live (no restart), checked against the cluster.

The ``default`` VC always exists and is open to everyone; its guarantee is whatever the other VCs
do not guarantee, so together the guarantees never exceed the cluster.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.resources import ResourceVector
from shoal.core.snapshot import NodeState, VirtualCluster
from shoal.core.states import State
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import VirtualClusterIn, VirtualClusterOut
from shoal.server.services.nodes import HOLDING, load_nodes
from shoal.store.models import Job, Task, VirtualClusterRow

DEFAULT_VC = "default"


UNLIMITED = 1 << 40
_ALL_ROWS = select(VirtualClusterRow).order_by(VirtualClusterRow.name)


def _guarantee(row: VirtualClusterRow) -> ResourceVector:
    """The guarantee; cpu or memory that the VC does not limit count as unlimited."""
    return ResourceVector(
        row.guarantee_cpu_millis if row.guarantee_cpu_millis is not None else UNLIMITED,
        row.guarantee_memory_mib if row.guarantee_memory_mib is not None else UNLIMITED,
        row.guarantee_gpu,
    )


def _limited(row: VirtualClusterRow) -> ResourceVector:
    """The part of the guarantee that is carved out of the cluster (limited dimensions only)."""
    return ResourceVector(
        row.guarantee_cpu_millis or 0, row.guarantee_memory_mib or 0, row.guarantee_gpu
    )


def _borrow(row: VirtualClusterRow) -> ResourceVector | None:
    if row.borrow_gpu is None and row.borrow_cpu_millis is None and row.borrow_memory_mib is None:
        return None
    return ResourceVector(
        row.borrow_cpu_millis if row.borrow_cpu_millis is not None else 1 << 40,
        row.borrow_memory_mib if row.borrow_memory_mib is not None else 1 << 40,
        row.borrow_gpu if row.borrow_gpu is not None else 1 << 30,
    )


def cluster_total(session: Session, nodes: list[NodeState] | None = None) -> ResourceVector:
    total = ResourceVector()
    for node in load_nodes(session) if nodes is None else nodes:
        total = total + node.capacity
    return total


def load_virtual_clusters(
    session: Session, nodes: list[NodeState] | None = None
) -> tuple[VirtualCluster, ...]:
    """Every VC for the scheduler, ``default`` getting what the others leave (``nodes``: the
    ready nodes, if the caller has them already)."""
    rows = list(session.scalars(_ALL_ROWS))
    named = [r for r in rows if r.name != DEFAULT_VC]
    reserved = ResourceVector()
    for row in named:
        reserved = reserved + _limited(row)
    left = cluster_total(session, nodes) - reserved
    default_row = next((r for r in rows if r.name == DEFAULT_VC), None)
    default = VirtualCluster(
        DEFAULT_VC,
        ResourceVector(max(left.cpu_millis, 0), max(left.memory_mib, 0), max(left.gpu, 0)),
        _borrow(default_row) if default_row else None,
        default_row.user_gpu_cap if default_row else None,
        default_row.preempt_within if default_row else True,
    )
    return (
        default,
        *(
            VirtualCluster(
                r.name,
                _guarantee(r),
                _borrow(r),
                r.user_gpu_cap,
                r.preempt_within,
                tuple(sorted((r.gpu_by_type or {}).items())),
            )
            for r in named
        ),
    )


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


def upsert(ctx: ServerContext, name: str, body: VirtualClusterIn, create: bool) -> None:
    if name == DEFAULT_VC and (
        body.guarantee_cpu is not None
        or body.guarantee_memory_mib is not None
        or body.guarantee_gpu
    ):
        raise ApiError(
            400,
            "InvalidParametersError",
            "the default VC's guarantee is what the other VCs leave; set theirs",
        )
    cpu = None if body.guarantee_cpu is None else round(body.guarantee_cpu * 1000)
    wanted = ResourceVector(cpu or 0, body.guarantee_memory_mib or 0, body.guarantee_gpu)
    with ctx.db.write() as session:
        row = session.get(VirtualClusterRow, name)
        if create and row is not None:
            raise ApiError(409, "ConflictVirtualClusterError", f"virtual cluster {name} exists")
        if not create and row is None:
            raise ApiError(404, "NoVirtualClusterError", f"no virtual cluster {name!r}")
        _check_total(session, name, wanted, dict(body.guarantee_gpu_by_type))
        if row is None:
            row = VirtualClusterRow(name=name, created_at=ctx.clock())
            session.add(row)
        row.description = body.description
        row.guarantee_cpu_millis, row.guarantee_memory_mib = cpu, body.guarantee_memory_mib
        row.guarantee_gpu = body.guarantee_gpu
        row.borrow_cpu_millis = None if body.borrow_cpu is None else round(body.borrow_cpu * 1000)
        row.borrow_memory_mib = body.borrow_memory_mib
        row.borrow_gpu = body.borrow_gpu
        row.user_gpu_cap = body.user_gpu_cap
        row.preempt_within = body.preempt_within
        row.members = list(body.members)
        row.gpu_by_type = dict(body.guarantee_gpu_by_type)
    ctx.wake_scheduler()


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


def describe_all(ctx: ServerContext) -> list[VirtualClusterOut]:
    with ctx.db.read() as session:
        vcs = load_virtual_clusters(session)
        rows = {r.name: r for r in session.scalars(select(VirtualClusterRow))}
        used: dict[str, ResourceVector] = {}
        for task, vc in session.execute(
            select(Task, Job.virtual_cluster)
            .join(Job, Job.id == Task.job_id)
            .where(Task.state.in_(HOLDING))
        ):
            vector = ResourceVector(task.cpu_millis, task.memory_mib, len(task.gpu_indices))
            used[vc] = used.get(vc, ResourceVector()) + vector
        total = cluster_total(session)
    return [
        VirtualClusterOut(
            name=vc.name,
            description=rows[vc.name].description if vc.name in rows else "everyone's share",
            guarantee=_vector_out(vc.guarantee),
            gpuByType=dict(vc.gpu_by_type),
            borrowLimit=None if vc.borrow_limit is None else _vector_out(vc.borrow_limit),
            used=_vector_out(used.get(vc.name, ResourceVector())),
            userGpuCap=vc.user_gpu_cap,
            preemptWithin=vc.preempt_within,
            members=list(rows[vc.name].members) if vc.name in rows else ["*"],
            clusterTotal=_vector_out(total),
        )
        for vc in vcs
    ]


def _vector_out(vector: ResourceVector) -> dict[str, float]:
    return {
        "cpu": vector.cpu_millis / 1000,
        "memoryMiB": float(vector.memory_mib),
        "gpu": float(vector.gpu),
    }
