"""Cluster files: the shipped examples load, and mistakes are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.sim.cluster import ClusterError, load_cluster
from shoal.sim.policies import make_policy
from tests.sim.conftest import EXAMPLES


def test_philly_layout_is_352_nodes_and_eleven_vcs() -> None:
    cluster = load_cluster(EXAMPLES / "philly-352.yaml")
    assert len(cluster.nodes) == 352 and cluster.total_gpus == 2_816
    quotas = {q.name: q.gpus for q in cluster.quotas}
    assert len(quotas) == 11 and sum(quotas.values()) == 2_816
    assert quotas["6214e9"] == 512 and quotas["103959"] == 64  # numeric names stay names


def test_alibaba_cluster_reads_the_node_list(shared_dir: Path) -> None:
    cluster = load_cluster(EXAMPLES / "alibaba-openb.yaml")
    assert cluster.total_gpus == 6_212 and len(cluster.quotas) == 1


def test_policies_set_the_vc_rules() -> None:
    cluster = load_cluster(EXAMPLES / "two-teams.yaml")
    fifo = {vc.name: vc for vc in make_policy("fifo").virtual_clusters(cluster)}
    shoal = {vc.name: vc for vc in make_policy("shoal").virtual_clusters(cluster)}
    assert fifo["research"].borrow_limit is not None and fifo["research"].borrow_limit.gpu == 0
    assert fifo["research"].strict_fifo and not fifo["research"].preempt_within
    assert shoal["research"].borrow_limit is None  # no limit given: may borrow any idle GPU
    assert shoal["product"].borrow_limit is not None and shoal["product"].borrow_limit.gpu == 8
    assert not shoal["research"].strict_fifo and shoal["research"].preempt_within


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("name: x", "node_groups or a node_list"),
        ("node_groups: [{count: 0}]", r"node_groups\.0\.count"),
        ("node_groups: [{count: 1, gpus: 8}]\nvirtual_clusters: [{name: a}]", "exactly one"),
        (
            "node_groups: [{count: 1, gpus: 8}]\nvirtual_clusters: [{name: a, gpus: 16}]",
            "guarantee 16 GPUs but the nodes have 8",
        ),
        (
            "node_groups: [{count: 1}]\nvirtual_clusters: [{name: a, gpus: 1}]\n"
            "unknown_virtual_cluster: b",
            "unknown_virtual_cluster",
        ),
        ("node_list: {path: nowhere.csv}", "no such file"),
        ("node_groups: [", "not valid YAML"),
    ],
)
def test_cluster_file_errors_name_the_field(write, body: str, message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        load_cluster(write("cluster.yaml", body))


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="choose one of fifo, shoal, las"):
        make_policy("sjf")
