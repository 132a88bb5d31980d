"""Property tests of the quota rules on random clusters, VCs, running jobs and queues."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.core.plan import Plan
from shoal.core.quota import QuotaLedger, running_jobs
from shoal.core.resources import ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot, VirtualCluster
from tests.core.strategies import snapshots

VC_NAMES = ("a", "b", "c")
PRIORITIES = (120, 100, 10, 10, -1)
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def quota_snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    base = draw(snapshots())
    vcs = []
    for name in VC_NAMES:
        gpu = draw(st.integers(0, 8))
        cpu = draw(st.sampled_from((0, 4000, 16000, 64000)))
        borrow = draw(st.sampled_from((None, 0, 2, 8)))
        vcs.append(
            VirtualCluster(
                name,
                ResourceVector(cpu, 1 << 20, gpu),
                None if borrow is None else ResourceVector(borrow * 4000, 1 << 20, borrow),
                draw(st.sampled_from((None, None, 1, 4))),
                draw(st.booleans()),
            )
        )
    # give every running job a VC, priority and user; some are already being stopped
    owners = {a.job_id for a in base.allocations}
    meta = {
        job_id: (
            draw(st.sampled_from(VC_NAMES)),
            draw(st.sampled_from(PRIORITIES)),
            float(draw(st.integers(0, 50))),
            draw(st.sampled_from(("ann", "bob"))),
            draw(st.sampled_from((False, False, False, True))),
        )
        for job_id in sorted(owners)
    }
    allocations = tuple(
        dataclasses.replace(
            a,
            virtual_cluster=meta[a.job_id][0],
            priority=meta[a.job_id][1],
            submitted_at=meta[a.job_id][2],
            user=meta[a.job_id][3],
            terminating=meta[a.job_id][4],
        )
        for a in base.allocations
    )
    queue = tuple(
        dataclasses.replace(
            j,
            virtual_cluster=draw(st.sampled_from(VC_NAMES)),
            priority=draw(st.sampled_from(PRIORITIES)),
            user=draw(st.sampled_from(("ann", "bob"))),
        )
        for j in base.queue
    )
    return ClusterSnapshot(base.nodes, queue, allocations, tuple(vcs))


@PROPERTY
@given(quota_snapshots())
def test_jobs_inside_their_guarantee_are_never_preempted_by_another_vc(
    snapshot: ClusterSnapshot,
) -> None:
    running = running_jobs(snapshot.allocations)
    inside = QuotaLedger(snapshot.virtual_clusters, running).inside_guarantee()
    by_id = {r.job_id: r for r in running}
    queued = {j.job_id: j for j in snapshot.queue}
    for preemption in schedule(snapshot, 0.0).preemptions:
        victim = by_id[preemption.victim_job_id]
        taker = queued[preemption.for_job_id]
        assert not taker.opportunistic, "oppo jobs never preempt"
        assert not victim.terminating
        if victim.virtual_cluster != taker.virtual_cluster and not victim.opportunistic:
            assert victim.job_id not in inside, preemption
        if victim.virtual_cluster == taker.virtual_cluster and not victim.opportunistic:
            assert victim.priority < taker.priority


@PROPERTY
@given(quota_snapshots())
def test_admissions_keep_every_vc_within_guarantee_plus_borrowing_limit(
    snapshot: ClusterSnapshot,
) -> None:
    assert_within_guarantee_and_borrowing(snapshot, schedule(snapshot, 0.0))


def assert_within_guarantee_and_borrowing(snapshot: ClusterSnapshot, plan: Plan) -> None:
    """Every VC that the plan's admissions grow stays within guarantee plus borrowing limit."""
    ledger = QuotaLedger(snapshot.virtual_clusters, running_jobs(snapshot.allocations))
    before = dict(ledger.usage)
    queued = {j.job_id: j for j in snapshot.queue}
    for admission in plan.admissions:
        ledger.admit(queued[admission.job_id])
    for vc in snapshot.virtual_clusters:
        if vc.borrow_limit is None or ledger.usage[vc.name] == before[vc.name]:
            continue
        assert ledger.usage[vc.name].fits_in(vc.guarantee + vc.borrow_limit), vc


@PROPERTY
@given(quota_snapshots())
def test_user_gpu_caps_hold_for_new_admissions(snapshot: ClusterSnapshot) -> None:
    plan = schedule(snapshot, 0.0)
    ledger = QuotaLedger(snapshot.virtual_clusters, running_jobs(snapshot.allocations))
    caps = {vc.name: vc.user_gpu_cap for vc in snapshot.virtual_clusters}
    queued = {j.job_id: j for j in snapshot.queue}
    for admission in plan.admissions:
        job = queued[admission.job_id]
        cap = caps[job.virtual_cluster]
        if cap is not None and not job.opportunistic and job.total.gpu:
            assert ledger.user_gpus.get((job.virtual_cluster, job.user), 0) + job.total.gpu <= cap
        ledger.admit(job)


@PROPERTY
@given(quota_snapshots())
def test_quota_plans_are_deterministic_and_account_for_every_job(
    snapshot: ClusterSnapshot,
) -> None:
    plan = schedule(snapshot, 0.0)
    assert plan == schedule(snapshot, 0.0)
    shuffled = dataclasses.replace(
        snapshot, nodes=tuple(reversed(snapshot.nodes)), queue=tuple(reversed(snapshot.queue))
    )
    assert plan == schedule(shuffled, 0.0)
    ids = [a.job_id for a in plan.admissions] + [p.job_id for p in plan.pending]
    ids += [i.job_id for i in plan.infeasible]
    assert sorted(ids) == sorted(j.job_id for j in snapshot.queue)
    admitted = set(plan.admitted_ids())
    victims = {p.victim_job_id for p in plan.preemptions}
    assert not victims & admitted


@PROPERTY
@given(quota_snapshots())
def test_no_node_is_over_allocated_with_quotas_and_reservations(
    snapshot: ClusterSnapshot,
) -> None:
    plan = schedule(snapshot, 0.0)
    used: dict[str, ResourceVector] = {}
    gpus: dict[str, list[int]] = {}
    for alloc in snapshot.allocations:
        used[alloc.node] = used.get(alloc.node, ResourceVector()) + alloc.resources
        gpus.setdefault(alloc.node, []).extend(alloc.gpu_indices)
    for admission in plan.admissions:
        for p in admission.placements:
            used[p.node] = used.get(p.node, ResourceVector()) + p.resources
            gpus.setdefault(p.node, []).extend(p.gpu_indices)
    for node in snapshot.nodes:
        before = ResourceVector()
        for alloc in snapshot.allocations:
            if alloc.node == node.name:
                before = before + alloc.resources
        admitted = used.get(node.name, ResourceVector()) - before
        if admitted != ResourceVector():  # new work only lands where it fits
            assert used[node.name].fits_in(node.capacity), node.name
        taken = gpus.get(node.name, [])
        assert len(taken) == len(set(taken)), node.name
