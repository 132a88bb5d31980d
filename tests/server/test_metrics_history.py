"""The server's metrics history (server/metrics_history.py): bounded whatever the number and rate
of reports, bucket means, ``since``/``step`` windows, the cluster's sums of closed buckets,
GPU series absent without NVML, and removed nodes forgotten. Times are given, not read."""

from __future__ import annotations

from shoal.protocol import GpuMetrics, NodeMetrics
from shoal.server.metrics_history import (
    TIERS,
    MetricsHistory,
    NodeLoad,
    Ring,
    plan_window,
)

T0 = 3600.0 * 300  # a whole hour: bucket and group starts are round


def figures(cpu_millis: float, memory: float = 100.0, gpus: int = 0) -> NodeMetrics:
    return NodeMetrics(
        tasks_cpu_millis=cpu_millis,
        tasks_memory_mib=memory,
        host_cpu_pct=50.0,
        host_memory_used_mib=1000.0,
        host_memory_total_mib=4000.0,
        gpus=[
            GpuMetrics(index=i, utilization_pct=40.0, memory_used_mib=10.0, memory_total_mib=80.0)
            for i in range(gpus)
        ],
    )


def tick(history: MetricsHistory, t: float, loads: list[NodeLoad] | None = None) -> bool:
    """What the server does at each report: on the first of a bucket, read the loads, turn."""
    if not history.begin(t):
        return False
    history.turn(t, loads or [])
    return True


def ring_sizes(history: MetricsHistory) -> set[int]:
    """The lengths of every array every ring of the history holds."""
    sizes: set[int] = set()
    rings: list[Ring] = list(history._cluster)
    for node in history._nodes.values():
        rings += node.rings
        rings += [r for gpu in node.gpus.values() for r in gpu]
    for ring in rings:
        sizes.add(len(ring._bucket) - ring.slots)  # 0 when it holds exactly its slots
        sizes |= {len(a) - ring.slots for a in ring._sum.values()}
        sizes |= {len(a) - ring.slots for a in ring._count.values()}
    return sizes


def test_the_history_stays_the_same_size_however_many_reports_come() -> None:
    history = MetricsHistory()
    t = T0
    for i in range(15_000):  # two days and a half of reports, 14 s apart
        tick(history, t)
        for node in range(2):
            history.record(f"n{node}", t, figures(i % 1000, gpus=2))
        t += 14.0
    assert ring_sizes(history) == {0}
    assert history.known() == ["n0", "n1"]
    hour = history.node("n0", t - 3600, t)
    assert len(hour.t) == 360 and hour.step == 10.0
    day = history.node("n0", t - 86_400, t)
    assert len(day.t) == TIERS[1][1] and day.step == 300.0
    assert history.cluster(t - 10 * 86_400, t).t[0] >= t - 86_400 - 300  # a day back at most


def test_a_bucket_holds_the_mean_of_its_reports() -> None:
    history = MetricsHistory()
    for at, cpu in ((T0, 1000), (T0 + 3, 2000), (T0 + 9.9, 3000), (T0 + 10, 8000)):
        history.record("n0", at, figures(cpu))
    series = history.node("n0", T0, T0 + 15)
    assert series.t == [T0, T0 + 10]
    assert series.columns["cpuUsed"] == [2.0, 8.0]
    assert series.columns["memoryUsedMiB"] == [100.0, 100.0]
    assert series.columns["hostCpuPercent"] == [50.0, 50.0]


def test_since_and_step_choose_the_buckets() -> None:
    history = MetricsHistory()
    for second in range(0, 600, 2):
        history.record("n0", T0 + second, figures(1000 * (second // 60)))  # a minute per level
    now = T0 + 599
    tail = history.node("n0", now - 100, now)
    assert tail.t[0] == T0 + 490 and tail.t[-1] == T0 + 590 and len(tail.t) == 11
    minutes = history.node("n0", T0, now, step=60)
    assert minutes.step == 60 and minutes.t == [T0 + 60 * m for m in range(10)]
    assert minutes.columns["cpuUsed"] == [float(m) for m in range(10)]
    rounded_up = history.node("n0", T0, now, step=45)  # whole buckets: 50 s
    assert rounded_up.step == 50
    assert plan_window(now - 7200, now, None).width == 300  # beyond the hour: the coarse tier
    coarse = history.node("n0", now - 7200, now)
    assert coarse.columns["cpuUsed"][-2:] == [2.0, 7.0]  # the means of minutes 0-4 and 5-9


def test_the_cluster_sums_the_nodes_in_closed_buckets_only() -> None:
    history = MetricsHistory()
    loads = [NodeLoad("n0", (4.0, 8192.0, 2.0), (1.0, 512.0, 1.0)), NodeLoad("n1", None, (0, 0, 0))]
    assert tick(history, T0, loads)
    history.record("n0", T0 + 1, figures(500))
    history.record("n1", T0 + 2, figures(1500))
    assert not tick(history, T0 + 5, loads)  # the same bucket
    before = history.cluster(T0, T0 + 9)
    assert before.columns["cpuUsed"] == [None]  # the bucket still filling is not shown
    loads[0] = NodeLoad("n0", (4.0, 8192.0, 2.0), (2.0, 512.0, 1.0))  # one more core reserved
    assert tick(history, T0 + 10, loads)  # ends and closes T0's bucket, starts the next
    after = history.cluster(T0, T0 + 11)
    assert after.t == [T0, T0 + 10]
    assert after.columns["cpuUsed"] == [2.0, None]
    assert after.columns["memoryUsedMiB"] == [200.0, None]
    assert after.columns["cpuCapacity"] == [4.0, None]  # n1 is NOT_READY: it offers nothing
    assert after.columns["cpuAllocated"] == [1.5, None]  # the mean of its start and its end
    assert after.columns["gpuAllocated"] == [1.0, None]
    assert after.columns["gpuUsed"] == [None, None]  # no NVML anywhere: absent, not zero


def test_after_a_silence_the_loads_read_do_not_end_the_old_bucket() -> None:
    history = MetricsHistory()
    tick(history, T0, [NodeLoad("n0", (4.0, 1024.0, 0.0), (1.0, 0.0, 0.0))])
    tick(history, T0 + 600, [NodeLoad("n0", (4.0, 1024.0, 0.0), (3.0, 0.0, 0.0))])
    history.record("n0", T0 + 601, figures(0))
    tick(history, T0 + 610, [NodeLoad("n0", (4.0, 1024.0, 0.0), (3.0, 0.0, 0.0))])
    reserved = history.cluster(T0, T0 + 610).columns["cpuAllocated"]
    assert reserved[0] == 1.0  # its start only: ten minutes later is not its end
    assert reserved[60] == 3.0 and set(reserved[1:60]) == {None}


def test_gpu_series_come_from_nvml_figures_only() -> None:
    history = MetricsHistory()
    tick(history, T0)
    history.record("gpu-node", T0, figures(0, gpus=2))
    history.record("sim-node", T0, figures(0))
    tick(history, T0 + 10)
    with_gpus = history.node("gpu-node", T0, T0 + 5)
    assert sorted(with_gpus.gpus) == [0, 1]
    assert with_gpus.gpus[1]["utilizationPercent"] == [40.0]
    assert with_gpus.columns["gpuUsed"] == [0.8]  # two GPUs at 40 %
    assert with_gpus.columns["gpuMemoryTotalMiB"] == [160.0]
    simulated = history.node("sim-node", T0, T0 + 5)
    assert simulated.gpus == {} and simulated.columns["gpuUsed"] == [None]
    assert history.cluster(T0, T0 + 10).columns["gpuUsed"] == [0.8, None]


def test_a_removed_node_is_forgotten_but_the_cluster_keeps_its_past() -> None:
    history = MetricsHistory()
    tick(history, T0)
    history.record("kept", T0, figures(1000))
    history.record("gone", T0, figures(3000))
    tick(history, T0 + 10)
    history.retain({"kept"})
    assert history.known() == ["kept"]
    assert history.node("gone", T0, T0 + 10).columns["cpuUsed"] == [None, None]
    assert history.cluster(T0, T0 + 10).columns["cpuUsed"] == [4.0, None]


def test_use_now_is_each_nodes_newest_figures_and_none_once_stale() -> None:
    history = MetricsHistory()
    assert history.latest(T0) == (None, dict.fromkeys(history.latest(T0)[1]))
    tick(history, T0)
    history.record("n0", T0 + 1, figures(1000))
    history.record("n1", T0 + 2, figures(2000))
    tick(history, T0 + 10)
    history.record("n0", T0 + 11, figures(3000))  # n1 has not reported in this bucket yet
    at, used = history.latest(T0 + 12)
    assert at == T0 + 10
    assert used["cpuUsed"] == 5.0 and used["memoryUsedMiB"] == 200.0
    assert used["gpuUsed"] is None
    assert history.latest(T0 + 60)[0] is None  # nothing for 50 s: no "now" figure


def test_reports_older_than_a_slot_holds_are_dropped() -> None:
    ring = Ring(10.0, 3, ("x",))
    ring.add(T0 + 30, {"x": 5.0})  # the slot of T0 now holds T0 + 30
    ring.add(T0, {"x": 1.0})
    assert ring.mean("x", ring.bucket_of(T0 + 30)) == 5.0
    assert ring.mean("x", ring.bucket_of(T0)) is None
