"""Jobs that ask more than their virtual cluster may ever use (issue 25, item 1): more than the
guarantee plus the borrowing limit, or more GPUs than the per-user cap, are reported infeasible
with a reason naming the VC, the limit and the fix, never left waiting forever; limits a VC does
not set are shown as unlimited, never as the sentinel that stands for them."""

from __future__ import annotations

from hypothesis import given

from shoal.core.plan import ReasonCode
from shoal.core.resources import UNLIMITED, UNLIMITED_GPU, ResourceVector
from shoal.core.scheduler import schedule
from shoal.core.snapshot import ClusterSnapshot, VirtualCluster
from tests.core.test_quota import CPU, job, plan_of, running, vc
from tests.core.test_quota_properties import PROPERTY, quota_snapshots

EXCEEDS = (ReasonCode.EXCEEDS_VC_LIMIT, ReasonCode.EXCEEDS_USER_GPU_CAP)


def gpu_only(name: str, gpu: int, borrow: int | None, cap: int | None = None) -> VirtualCluster:
    """A VC as the server builds it from ``--guarantee gpu=N --borrow-limit gpu=M``."""
    limit = None if borrow is None else ResourceVector(UNLIMITED, UNLIMITED, borrow)
    return VirtualCluster(name, ResourceVector(UNLIMITED, UNLIMITED, gpu), limit, cap)


def test_a_job_beyond_guarantee_plus_borrowing_is_infeasible_with_the_fix() -> None:
    vcs = [gpu_only("a", 4, borrow=2), vc("b", 12)]
    plan = plan_of(vcs, [job("big", "a", 8, 0), job("small", "a", 2, 1)])
    assert [i.job_id for i in plan.infeasible] == ["big"]
    assert plan.admitted_ids() == ["small"]  # the impossible job holds nothing back
    reason = plan.infeasible[0].reason
    assert reason.code is ReasonCode.EXCEEDS_VC_LIMIT
    assert reason.message == (
        "this job needs more than virtual cluster a may ever use (8 GPU asked, at most 6 GPU "
        "(guarantee 4 GPU plus borrowing limit 2 GPU)), so it could never start there; make it "
        "smaller, submit it to another virtual cluster, or ask an admin to raise the limit "
        "(shoal vc update a --borrow-limit gpu=4)"
    )


def test_every_resource_over_its_limit_is_named_and_no_unlimited_one() -> None:
    limit = ResourceVector(2 * CPU, 4096, UNLIMITED_GPU)
    vcs = [VirtualCluster("a", ResourceVector(2 * CPU, 2048, 0), limit)]
    plan = plan_of(vcs, [job("j", "a", 0, 0, instances=8)])  # 8 cpu, 8192 MiB
    message = plan.reason_for("j").message  # type: ignore[union-attr]
    assert "8 cpu asked, at most 4 cpu (guarantee 2 cpu plus borrowing limit 2 cpu)" in message
    assert "8192 MiB of memory asked, at most 6144 MiB of memory" in message
    assert "GPU" not in message and str(UNLIMITED_GPU) not in message
    assert message.endswith("--borrow-limit cpu=6,memory=6144Mi)")


def test_a_job_over_the_per_user_cap_is_infeasible() -> None:
    plan = plan_of([gpu_only("a", 16, None, cap=2), vc("b", 0)], [job("x", "a", 4, 0)])
    reason = plan.reason_for("x")
    assert [i.job_id for i in plan.infeasible] == ["x"]
    assert reason is not None and reason.code is ReasonCode.EXCEEDS_USER_GPU_CAP
    assert "needs 4 GPUs, more than the 2-GPU per-user cap of virtual cluster a" in reason.message
    assert "shoal vc update a --user-gpu-cap 4" in reason.message


def test_a_job_that_fits_by_borrowing_is_admitted() -> None:
    plan = plan_of([gpu_only("a", 4, borrow=4), vc("b", 12)], [job("j", "a", 8, 0)])
    assert plan.admitted_ids() == ["j"] and not plan.infeasible


def test_a_job_that_must_wait_for_its_vc_waits_rather_than_being_infeasible() -> None:
    allocations = [running("r", "a", "n0", (0, 1, 2, 3), 0)]
    plan = plan_of([gpu_only("a", 4, borrow=2), vc("b", 12)], [job("j", "a", 4, 1)], allocations)
    assert not plan.infeasible
    assert plan.reason_for("j").code is ReasonCode.OVER_QUOTA  # type: ignore[union-attr]


def test_oppo_jobs_count_against_no_limit_so_are_never_beyond_reach() -> None:
    plan = plan_of([gpu_only("a", 0, borrow=0, cap=1), vc("b", 16)], [job("o", "a", 8, 0, -1)])
    assert plan.admitted_ids() == ["o"]


def test_an_edit_that_shrinks_the_vc_makes_a_waiting_job_infeasible_and_back() -> None:
    queue = [job("j", "a", 8, 0)]
    busy = [
        running("r", "b", "n0", tuple(range(8)), 0),
        running("s", "b", "n1", tuple(range(8)), 0),
    ]
    wide = plan_of([gpu_only("a", 8, None), vc("b", 8)], queue, busy)
    assert not wide.infeasible  # it waits for room
    narrow = plan_of([gpu_only("a", 2, borrow=2), vc("b", 14)], queue, busy)
    assert narrow.reason_for("j").code is ReasonCode.EXCEEDS_VC_LIMIT  # type: ignore[union-attr]
    again = plan_of([gpu_only("a", 8, borrow=0), vc("b", 8)], queue)
    assert again.admitted_ids() == ["j"]


def test_an_impossible_head_does_not_stall_a_strict_fifo_vc() -> None:
    strict = VirtualCluster(
        "a", ResourceVector(UNLIMITED, UNLIMITED, 4), ResourceVector(0, 0, 0), strict_fifo=True
    )
    plan = plan_of([strict, vc("b", 12)], [job("big", "a", 8, 0), job("next", "a", 2, 1)])
    assert [i.job_id for i in plan.infeasible] == ["big"]
    assert plan.admitted_ids() == ["next"]


def test_over_quota_shows_limits_without_the_unlimited_sentinel() -> None:
    allocations = [running("r", "a", "n0", (0, 1), 0)]
    plan = plan_of([gpu_only("a", 2, borrow=1), vc("b", 13)], [job("j", "a", 2, 1)], allocations)
    message = plan.reason_for("j").message  # type: ignore[union-attr]
    assert "guarantee 2 GPU (cpu and memory unlimited)" in message
    assert "borrowing limit 1 GPU (cpu and memory unlimited)" in message
    assert str(UNLIMITED) not in message and "e+" not in message


def test_describe_limit() -> None:
    assert ResourceVector(UNLIMITED, UNLIMITED, 2).describe_limit() == (
        "2 GPU (cpu and memory unlimited)"
    )
    assert ResourceVector(1500, 2048, 0).describe_limit() == "1.5 cpu, 2048 MiB, 0 GPU"
    both = ResourceVector(UNLIMITED, UNLIMITED, 3) + ResourceVector(UNLIMITED, 5, UNLIMITED_GPU)
    assert both.describe_limit() == "unlimited"
    assert ResourceVector(UNLIMITED, 64, UNLIMITED_GPU).describe_limit() == (
        "64 MiB (cpu and GPU unlimited)"
    )


@PROPERTY
@given(quota_snapshots())
def test_exactly_the_jobs_beyond_their_vc_are_infeasible_for_it(snapshot: ClusterSnapshot) -> None:
    """No job waits for what its VC can never give; no job its VC could hold is refused for it."""
    plan = schedule(snapshot, 0.0)
    vcs = {v.name: v for v in snapshot.virtual_clusters}
    verdicts = {i.job_id: i.reason.code for i in plan.infeasible}
    for queued in snapshot.queue:
        vc_ = vcs[queued.virtual_cluster]
        need = queued.total
        beyond = not queued.opportunistic and (
            (vc_.user_gpu_cap is not None and need.gpu > vc_.user_gpu_cap)
            or (vc_.borrow_limit is not None and not need.fits_in(vc_.guarantee + vc_.borrow_limit))
        )
        if beyond:  # infeasible for its VC (or, a shape seen before, for the cluster)
            assert verdicts.get(queued.job_id) in (*EXCEEDS, ReasonCode.NEVER_FITS), queued
        else:
            assert verdicts.get(queued.job_id) not in EXCEEDS, queued
