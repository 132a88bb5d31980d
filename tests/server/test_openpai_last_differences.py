"""The last differences OpenPAI's own clients found between OpenPAI's REST API and shoal's
(issue #26, item 7; docs/openpai-compat.md), every ``/api/v2`` answer checked against OpenPAI's
description as in ``tests/server/openpai``: the ``default`` group, the attempts of a job not
placed yet, START while the job stops (kept across a server restart), the 403 texts, and
``PUT /users/me`` with ``patch: false``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from tests.server.openpai import conftest as openpai_fixtures
from tests.server.openpai.contract import violations
from tests.server.openpai.test_accounts import add_user, bearer, refused, user_info
from tests.server.openpai.test_jobs import GpuAgent, submit, wait_state

APPLICATIONS = "Applications are not allowed to do this operation."
NON_ADMIN = "Non-admin is not allow to do this operation."  # OpenPAI's text, its typo too

# tests/server/openpai's fixtures: every /api/v2 answer checked against OpenPAI's description
pai = openpai_fixtures.pai
pai_home = openpai_fixtures.pai_home


def test_a_fresh_cluster_has_the_default_group(pai: TestClient) -> None:
    default = pai.get("/api/v2/groups/default")
    assert default.status_code == 200, default.text
    assert default.json()["extension"]["acls"]["virtualClusters"] == ["default"]
    assert "default" in [g["groupname"] for g in pai.get("/api/v2/groups").json()]
    add_user(pai, "alice")
    # what OpenPAI's clients do with it: put users in it
    put = pai.put("/api/v2/users/alice/grouplist/", json={"grouplist": ["default"]})
    assert put.status_code == 201, put.text
    info = user_info(pai, "alice")
    assert info["grouplist"] == ["default"] and "default" in info["virtualCluster"]
    members = pai.get("/api/v2/groups/default/userlist").json()
    assert members == [{"username": "alice", "clusterAdmin": False}]
    # it always exists: deleting it is refused, and it is still there
    refused(pai.delete("/api/v2/groups/default"), 403, "ForbiddenUserError")
    assert pai.get("/api/v2/groups/default").status_code == 200


def test_a_job_not_placed_yet_has_attempt_zero_everywhere(pai: TestClient) -> None:
    assert submit(pai, "waits").status_code == 202  # no node: it waits, never placed
    attempt = pai.get("/api/v2/jobs/admin~waits/attempts/0")
    assert attempt.status_code == 200, attempt.text
    listed = pai.get("/api/v2/jobs/admin~waits/job-attempts")
    assert listed.status_code == 200, listed.text
    (only,) = listed.json()
    assert only["attemptIndex"] == 0 and only["isLatest"] is True
    assert only["state"] == "WAITING" and only["originState"] == "AttemptCreationPending"
    one = pai.get("/api/v2/jobs/admin~waits/job-attempts/0")
    assert one.status_code == 200, one.text
    assert one.json() == only
    refused(pai.get("/api/v2/jobs/admin~waits/job-attempts/1"), 404, "NoJobError")
    refused(pai.get("/api/v2/jobs/admin~waits/attempts/1"), 404, "NoJobError")


@contextmanager
def server(home: Path) -> Iterator[TestClient]:
    """A server on ``home`` whose every /api/v2 answer must conform; the admin's token sent."""
    seen: list[httpx.Response] = []

    def keep(response: httpx.Response) -> None:
        if response.request.url.path.startswith("/api/v2/"):
            response.read()
            seen.append(response)

    ctx = prepare(ServerSettings(home=home, scheduler="thread"))
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        client.event_hooks["response"].append(keep)
        yield client
    found = [v for response in seen for v in violations(response)]
    assert not found, "\n\n".join(found)


def execution(api: TestClient, job: str, value: str) -> None:
    answer = api.put(f"/api/v2/jobs/{job}/executionType", json={"value": value})
    assert answer.status_code == 202, answer.text


def event_kinds(api: TestClient, job: str) -> list[str]:
    return [e["reason"] for e in api.get(f"/api/v2/jobs/{job}/events").json()["data"]]


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(what)


def test_start_while_stopping_runs_the_job_again_once_stopped_across_a_restart(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with server(home) as api:
        agent = GpuAgent(api, home)
        assert submit(api, "again").status_code == 202
        (first,) = agent.launches(1)
        wait_state(api, "admin~again", "RUNNING")
        execution(api, "admin~again", "STOP")
        wait_state(api, "admin~again", "STOPPING")  # its task has not exited yet
        execution(api, "admin~again", "START")  # OpenPAI accepted it: 202
        assert "start-requested" in event_kinds(api, "admin~again")
    # the server restarts before the task exits: the request is still there
    with server(home) as api:
        agent = GpuAgent(api, home)
        agent.known[first["attempt_id"]] = first
        assert api.get("/api/v2/jobs/admin~again").json()["jobStatus"]["state"] == "STOPPING"
        agent.exit(first, None, stopped=True)
        (second,) = agent.launches(1)  # stopped, then run again as its next attempt
        assert second["job_id"] == first["job_id"] and second["attempt_id"] != first["attempt_id"]
        running = wait_state(api, "admin~again", "RUNNING")
        assert running["jobStatus"]["attemptId"] == 1
        kinds = event_kinds(api, "admin~again")
        assert kinds.index("stopped") < kinds.index("restarted"), kinds


def test_stop_after_start_while_stopping_cancels_the_start(pai: TestClient, pai_home: Path) -> None:
    agent = GpuAgent(pai, pai_home)
    assert submit(pai, "cancel").status_code == 202
    (order,) = agent.launches(1)
    wait_state(pai, "admin~cancel", "RUNNING")
    execution(pai, "admin~cancel", "STOP")
    wait_state(pai, "admin~cancel", "STOPPING")
    execution(pai, "admin~cancel", "START")
    execution(pai, "admin~cancel", "STOP")
    agent.exit(order, None, stopped=True)
    wait_state(pai, "admin~cancel", "STOPPED")
    time.sleep(0.6)  # three of the watcher's looks
    assert pai.get("/api/v2/jobs/admin~cancel").json()["jobStatus"]["state"] == "STOPPED"
    kinds = event_kinds(pai, "admin~cancel")
    assert "start-cancelled" in kinds and "restarted" not in kinds, kinds


def test_the_403s_say_what_openpais_description_says(pai: TestClient) -> None:
    as_alice = bearer(add_user(pai, "alice"))
    application = bearer(pai.post("/api/v2/tokens/application").json()["token"])
    new_user = {"username": "eve", "password": "secret-1"}
    for headers, text in ((as_alice, NON_ADMIN), (application, APPLICATIONS)):
        made = pai.post("/api/v2/users", json=new_user, headers=headers)
        assert refused(made, 403, "ForbiddenUserError") == text
        group = pai.post("/api/v2/groups", json={"groupname": "g"}, headers=headers)
        assert refused(group, 403, "ForbiddenUserError") == text
        grouplist = pai.put(
            "/api/v2/users/alice/grouplist/", json={"grouplist": []}, headers=headers
        )
        assert refused(grouplist, 403, "ForbiddenUserError") == text
        assert made.json()["problems"], "shoal's reason and fix stay in problems"
    logout = pai.delete("/api/v2/authn/basic/logout", headers=application)
    assert refused(logout, 403, "ForbiddenUserError") == APPLICATIONS


def test_put_users_me_without_patch_or_extension_is_accepted(pai: TestClient) -> None:
    as_alice = bearer(add_user(pai, "alice", extension={"kept": 1}))
    body = {"data": {"username": "alice", "email": "alice@example.com"}, "patch": False}
    answer = pai.put("/api/v2/users/me", json=body, headers=as_alice)
    assert answer.status_code == 201, answer.text
    info = user_info(pai, "alice")
    assert info["email"] == "alice@example.com" and info["extension"] == {"kept": 1}
    # patch: false with an extension replaces it (a patch merges)
    body = {"data": {"username": "alice", "extension": {"new": 2}}, "patch": False}
    assert pai.put("/api/v2/users/me", json=body, headers=as_alice).status_code == 201
    assert user_info(pai, "alice")["extension"] == {"new": 2}
