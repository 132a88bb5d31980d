"""Virtual clusters as the scheduler sees them: each VC's guarantee, borrowing limit and aging,
read from the store (``vcs.py`` changes them; this part is what the scheduler process needs,
without the API's schemas and audit log)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shoal.core.aging import Aging
from shoal.core.resources import UNLIMITED, UNLIMITED_GPU, ResourceVector
from shoal.core.snapshot import NodeState, VirtualCluster
from shoal.server.services.nodes import load_nodes
from shoal.store.models import VirtualClusterRow

DEFAULT_VC = "default"

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
        row.borrow_cpu_millis if row.borrow_cpu_millis is not None else UNLIMITED,
        row.borrow_memory_mib if row.borrow_memory_mib is not None else UNLIMITED,
        row.borrow_gpu if row.borrow_gpu is not None else UNLIMITED_GPU,
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
        strict_fifo=default_row.strict_fifo if default_row else False,
    )
    return (default, *(_virtual_cluster(r) for r in named))


def _virtual_cluster(row: VirtualClusterRow) -> VirtualCluster:
    """A named VC (not ``default``) as the scheduler sees it."""
    return VirtualCluster(
        row.name,
        _guarantee(row),
        _borrow(row),
        row.user_gpu_cap,
        row.preempt_within,
        tuple(sorted((row.gpu_by_type or {}).items())),
        row.strict_fifo,
    )


def reach_of(session: Session, name: str, row: VirtualClusterRow | None) -> VirtualCluster | None:
    """VC ``name`` (``row``: its row, None for ``default``) as the scheduler sees it, for the
    submission's "could it ever run there?" check; None when there is nothing to judge. The
    ``default`` VC is read in full only when it has a borrowing limit, its guarantee counting
    every node, lost ones too (a node away for a moment refuses nothing), and not before a node
    has joined."""
    if row is not None:
        return _virtual_cluster(row)
    settings = session.get(VirtualClusterRow, DEFAULT_VC)
    if settings is None:
        return None  # no limits set: only the cluster's size bounds it (checked apart)
    nodes = load_nodes(session, include_lost=True) if _borrow(settings) is not None else []
    if not nodes:  # may borrow any idle capacity, or no node to size the guarantee by yet
        cap = settings.user_gpu_cap
        return None if cap is None else VirtualCluster(DEFAULT_VC, ResourceVector(), None, cap)
    return load_virtual_clusters(session, nodes)[0]


def load_aging(session: Session) -> dict[str, Aging]:
    """The VCs that switched aging on, with their setting (empty: no VC ages its jobs)."""
    rows = session.execute(
        select(VirtualClusterRow.name, VirtualClusterRow.aging).where(
            VirtualClusterRow.aging.is_not(None)
        )
    )
    return {name: aging_of(setting) for name, setting in rows if setting}


def aging_of(setting: dict[str, Any]) -> Aging:
    """A stored setting (validated when it was written) as ``core.aging`` takes it."""
    return Aging.from_hours(
        tuple(float(h) for h in setting["thresholds_gpu_hours"]),
        str(setting["policy"]),
        setting.get("max_preemptions"),
    )
