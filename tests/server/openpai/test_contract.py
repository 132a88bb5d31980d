"""Answers of ``/api/v2`` checked against OpenPAI's own API description (issue #14, started):
every response these tests see is validated by ``contract.violations``. Routes are added here as
they are made to conform; docs/openpai-compat.md will list the rest."""

from __future__ import annotations

import httpx
from fastapi.testclient import TestClient

from tests.server.openpai.contract import violations


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
