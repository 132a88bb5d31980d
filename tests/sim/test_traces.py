"""Trace readers against the real trace files and against broken ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.sim.alibaba import read_alibaba_nodes, read_alibaba_pods
from shoal.sim.traces import (
    GangRules,
    TraceFormat,
    detect_format,
    read_philly,
    read_shoal,
    read_tiresias,
)
from shoal.sim.workload import TraceError, gpu_gang

RULES = GangRules(gpus_per_node=8)


def test_formats_are_detected_from_the_real_headers(traces: Path) -> None:
    assert detect_format(traces / "philly_pollux_jobs.csv") is TraceFormat.PHILLY
    assert detect_format(traces / "tiresias_60_job.csv") is TraceFormat.TIRESIAS
    assert detect_format(traces / "alibaba_openb_pod_list_default.csv") is TraceFormat.ALIBABA


def test_philly_is_sorted_relative_and_complete(traces: Path) -> None:
    trace = read_philly(traces / "philly_pollux_jobs.csv", RULES)
    assert len(trace.jobs) == 82_247  # every row (the blank last line is not a job)
    submits = [job.submit_s for job in trace.jobs]
    assert submits[0] == 0.0 and submits == sorted(submits)
    assert submits[-1] / 86_400 == pytest.approx(108.9, abs=0.1)  # 2017-09-04 .. 2017-12-22
    by_gpus = {}
    for job in trace.jobs:
        by_gpus[job.gpus] = by_gpus.get(job.gpus, 0) + 1
    assert by_gpus[1] == 76_627 and by_gpus[128] == 3  # the README's counts
    big = next(job for job in trace.jobs if job.gpus == 128)
    assert big.roles[0].instances == 16 and big.roles[0].per_instance.gpu == 8


def test_philly_limit_takes_the_earliest_jobs(traces: Path) -> None:
    whole = read_philly(traces / "philly_pollux_jobs.csv", RULES)
    first = read_philly(traces / "philly_pollux_jobs.csv", RULES, limit=100)
    assert [j.job_id for j in first.jobs] == [j.job_id for j in whole.jobs[:100]]


@pytest.mark.parametrize(
    ("gpus", "tasks", "per_task"), [(1, 1, 1), (8, 1, 8), (12, 2, 6), (24, 3, 8), (7, 1, 7)]
)
def test_gpu_counts_become_gangs_that_fit_nodes(gpus: int, tasks: int, per_task: int) -> None:
    (role,) = gpu_gang(gpus, 8)
    assert (role.instances, role.per_instance.gpu) == (tasks, per_task)


def test_philly_errors_name_line_and_column(write) -> None:
    header = "timestamp,duration,num_gpus,gpu_time,cluster\n"
    bad_time = write("a.csv", header + "2017-10-03 14:02:05,10,1,10,vc\nyesterday,10,1,10,vc\n")
    with pytest.raises(TraceError, match=r"a.csv:3: column 'timestamp'"):
        read_philly(bad_time, RULES)
    bad_gpus = write("b.csv", header + "2017-10-03 14:02:05,10,zero,10,vc\n")
    with pytest.raises(TraceError, match=r"b.csv:2: column 'num_gpus' must be a number"):
        read_philly(bad_gpus, RULES)
    missing = write("c.csv", "timestamp,duration\n2017-10-03 14:02:05,10\n")
    with pytest.raises(TraceError, match="lacks column"):
        read_philly(missing, RULES)


def test_tiresias_reads_all_sixty(traces: Path) -> None:
    trace = read_tiresias(traces / "tiresias_60_job.csv", GangRules(gpus_per_node=4))
    assert len(trace.jobs) == 60
    assert sorted({job.gpus for job in trace.jobs}) == [1, 2, 4, 8]
    eight = next(job for job in trace.jobs if job.gpus == 8)
    assert eight.roles[0].instances == 2  # two 4-GPU tasks on 4-GPU nodes


def test_alibaba_pods_and_nodes(traces: Path) -> None:
    trace = read_alibaba_pods(traces / "alibaba_openb_pod_list_default.csv")
    assert len(trace.jobs) == 8_152 - 897  # pods never scheduled have no run time
    assert any("897 pods never scheduled" in note for note in trace.notes)
    assert any(job.priority == -1 for job in trace.jobs)  # BE pods are opportunistic
    nodes = read_alibaba_nodes(traces / "alibaba_openb_node_list_gpu_node.csv", (20000, 30000))
    assert len(nodes) == 1_213
    assert sum(node.capacity.gpu for node in nodes) == 6_212
    assert {node.gpu_type for node in nodes} >= {"T4", "P100", "V100M16", "G2"}


def test_shoal_job_list_with_roles_and_gpu_counts(write) -> None:
    path = write(
        "jobs.yaml",
        """
jobs:
  - {id: b, submit: 5, duration: 60, gpus: 16, virtual_cluster: team, priority: prod}
  - id: a
    submit: 0
    duration: 30
    roles:
      - {name: learner, gpu: 1, cpu: 4, memory: 8Gi}
      - {name: actor, instances: 4, cpu: 2, memory: 2Gi}
""",
    )
    trace = read_shoal(path, RULES)
    assert [job.job_id for job in trace.jobs] == ["a", "b"]
    a, b = trace.jobs
    assert a.roles[1].instances == 4 and a.roles[0].per_instance.memory_mib == 8192
    assert b.priority == 100 and b.roles[0].instances == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("jobs: []", "jobs"),
        ("jobs:\n  - {id: a, submit: 0, duration: 1}", "exactly one of `gpus`"),
        ("jobs:\n  - {id: a, submit: 0, duration: 1, gpus: 1, roles: [{name: r}]}", "exactly one"),
        ("jobs:\n  - {id: a, submit: -1, duration: 1, gpus: 1}", r"jobs\.0\.submit"),
        ("jobs:\n  - {id: a, submit: 0, duration: 1, gpus: 1, colour: red}", "colour"),
        (
            "jobs:\n  - {id: a, submit: 0, duration: 1, gpus: 1}\n"
            "  - {id: a, submit: 0, duration: 1, gpus: 1}",
            "appears twice",
        ),
        ("jobs: [", "not valid YAML"),
    ],
)
def test_shoal_job_list_errors(write, body: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        read_shoal(write("jobs.yaml", body), RULES)
