"""Answers of ``/api/v2`` checked against OpenPAI's own API description (issue #14, started):
every response these tests see is validated by ``contract.violations``. Routes are added here as
they are made to conform; docs/openpai-compat.md will list the rest."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from shoal.server.openpai.exitspec import exit_spec
from tests.server.openpai.contract import violations
from tests.server.openpai.test_jobs import GpuAgent, submit
from tests.server.test_code_and_data import push


def test_cluster_info_is_what_openpai_clients_ask_first(pai: TestClient) -> None:
    anonymous = pai.get("/api/v2/info", headers={"Authorization": ""})
    assert anonymous.status_code == 200
    assert anonymous.json()["authnMethod"] == "basic"
    assert anonymous.json()["version"].startswith("v")


def test_virtual_clusters_and_an_unknown_one(pai: TestClient) -> None:
    listed = pai.get("/api/v2/virtual-clusters").json()
    assert "default" in listed
    assert pai.get("/api/v2/virtual-clusters/default").status_code == 200
    missing = pai.get("/api/v2/virtual-clusters/nope")
    assert missing.status_code == 404
    assert missing.json()["code"] == "NoVirtualClusterError"


def test_job_list_with_and_without_a_count_and_an_unknown_job(pai: TestClient) -> None:
    assert pai.get("/api/v2/jobs").json() == []
    assert pai.get("/api/v2/jobs", params={"withTotalCount": "true"}).json()["totalCount"] == 0
    missing = pai.get("/api/v2/jobs/admin~nope")
    assert missing.status_code == 404
    assert missing.json()["code"] == "NoJobError"


def test_the_contract_check_finds_what_does_not_conform(pai: TestClient) -> None:
    # The check itself can fail: a 200 whose body breaks the described schema is a violation.
    request = httpx.Request("GET", "http://testserver/api/v2/info")
    wrong = httpx.Response(200, json={"name": "x"}, request=request)
    assert violations(wrong), "a body missing required fields passed the contract"
    assert pai.get("/api/v2/info").status_code == 200


def test_kubernetes_nodes_and_pods_storages_alerts_and_skus(
    pai: TestClient, pai_home: Path
) -> None:
    agent = GpuAgent(pai, pai_home)
    assert submit(pai, "podded").status_code == 202
    agent.launches(1)
    nodes = pai.get("/api/v2/kubernetes/nodes").json()
    assert nodes["kind"] == "NodeList"
    (node,) = nodes["items"]
    assert node["metadata"]["name"] == "n0"
    assert node["status"]["capacity"] == {
        "cpu": "8000m",
        "memory": "16384Mi",
        "nvidia.com/gpu": "2",
    }
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"  # the job holds one
    pods = pai.get("/api/v2/kubernetes/pods").json()
    (pod,) = pods["items"]
    assert pod["metadata"]["labels"]["jobName"] == "podded"
    assert pod["spec"]["nodeName"] == "n0"
    assert (
        pai.get("/api/v2/kubernetes/pods", params={"namespace": "kube-system"}).json()["items"]
        == []
    )
    assert pai.get("/api/v2/storages").json() == {"storages": []}
    token = pai.headers["Authorization"].removeprefix("Bearer ")
    assert push(pai, token, "admin", "corpus", b"words").status_code == 201  # type: ignore[attr-defined]
    (listed,) = pai.get("/api/v2/storages").json()["storages"]
    assert listed["name"] == "admin~corpus" and listed["share"] is False
    assert pai.get("/api/v2/storages", params={"default": "true"}).json() == {"storages": []}
    assert pai.get("/api/v2/storages/admin~corpus").json()["type"] == "other"
    missing = pai.get("/api/v2/storages/admin~nothing")
    assert missing.status_code == 404 and missing.json()["code"] == "NoStorageError"
    assert pai.get("/api/v2/alerts").json() == []


def test_exit_codes_read_through_openpais_exit_spec() -> None:
    assert exit_spec(None) is None
    assert exit_spec(-1001)["phrase"] == "PodNodeLost"  # type: ignore[index]
    assert exit_spec(137)["phrase"] == "ContainerSigKillReceived"  # type: ignore[index]
    undefined = exit_spec(-5)
    assert undefined is not None and undefined["code"] == -5
    assert undefined["phrase"] == "ContainerUndefinedNegativeExitCode"
