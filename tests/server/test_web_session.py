"""The dashboard's server side in process (real SQLite and app): signing in and out, the session
cookie's flags, CSRF on state-changing calls, the job list's search/sort/paging, the change
stream and the page's files."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shoal.server.app import create_app, prepare
from shoal.server.routers import web
from shoal.server.services.web_sessions import CSRF_HEADER, SESSION_COOKIE
from shoal.server.settings import ServerSettings


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def api(home: Path) -> Iterator[TestClient]:
    ctx = prepare(ServerSettings(home=home, scheduler_interval_s=0.05))
    with TestClient(create_app(ctx)) as client:
        yield client


def _admin(home: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {(home / 'admin.token').read_text().strip()}"}


def _add_user(api: TestClient, home: Path, name: str, password: str | None = None) -> str:
    body: dict[str, object] = {"name": name}
    if password:
        body["password"] = password
    response = api.post("/api/v1/users", json=body, headers=_admin(home))
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


JOB = "version: 1\nname: {name}\nroles:\n  m:\n    resources: {{cpu: 1}}\n    command: 'true'\n"


def test_a_token_signs_in_with_an_httponly_strict_cookie_and_signing_out_ends_it(
    api: TestClient, home: Path
) -> None:
    token = _add_user(api, home, "ann")
    response = api.post("/api/v1/session", json={"token": token})
    assert response.status_code == 200, response.text
    cookie = response.headers["set-cookie"]
    assert f"{SESSION_COOKIE}=" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert token not in cookie  # the session has a token of its own
    body = response.json()
    assert (body["user"], body["admin"]) == ("ann", False)
    assert api.get("/api/v1/session").json()["user"] == "ann"
    assert api.get("/api/v1/me").json()["name"] == "ann"  # the whole API takes the cookie
    out = api.delete("/api/v1/session", headers={CSRF_HEADER: body["csrfToken"]})
    assert out.status_code == 204
    api.cookies.clear()
    api.cookies.set(SESSION_COOKIE, cookie.split("=", 1)[1].split(";", 1)[0])
    refused = api.get("/api/v1/me")
    assert refused.status_code == 401
    assert "sign in again" in refused.json()["message"]
    assert api.get("/api/v1/session").json() == {
        "signedIn": False,
        "user": None,
        "admin": False,
        "groups": [],
        "csrfToken": "",
        "expiresIn": None,
    }
    # the token the user signed in with still works
    assert api.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_password_sign_in_and_its_refusals(api: TestClient, home: Path) -> None:
    _add_user(api, home, "bob", password="correct-horse-9")
    wrong = api.post("/api/v1/session", json={"username": "bob", "password": "nope-nope-1"})
    assert wrong.status_code == 400
    assert wrong.json()["code"] == "IncorrectPasswordError"
    assert SESSION_COOKIE not in api.cookies
    nobody = api.post("/api/v1/session", json={"username": "zed", "password": "x"})
    assert (nobody.status_code, nobody.json()["code"]) == (400, "NoUserError")
    empty = api.post("/api/v1/session", json={})
    assert empty.status_code == 400
    assert "username and password" in empty.json()["message"]
    bad_token = api.post("/api/v1/session", json={"token": "shoal_nope"})
    assert bad_token.status_code == 401
    assert bad_token.json()["message"].startswith("token:")
    agent = (home / "agent.token").read_text().strip()
    assert api.post("/api/v1/session", json={"token": agent}).status_code == 403
    ok = api.post("/api/v1/session", json={"username": "bob", "password": "correct-horse-9"})
    assert ok.status_code == 200
    assert api.get("/api/v1/me").json()["name"] == "bob"


def test_state_changing_calls_with_the_cookie_need_the_csrf_header(
    api: TestClient, home: Path
) -> None:
    token = _add_user(api, home, "cat")
    csrf = api.post("/api/v1/session", json={"token": token}).json()["csrfToken"]
    body = {"spec": JOB.format(name="x")}
    refused = api.post("/api/v1/jobs", json=body)
    assert refused.status_code == 403
    assert refused.json()["code"] == "CsrfTokenError"
    forged = api.post("/api/v1/jobs", json=body, headers={CSRF_HEADER: "0" * 40})
    assert forged.status_code == 403
    assert api.get("/api/v1/jobs").json() == []  # nothing was stored
    accepted = api.post("/api/v1/jobs", json=body, headers={CSRF_HEADER: csrf})
    assert accepted.status_code == 201, accepted.text
    # a Bearer token needs no CSRF header (the CLI), even with a cookie beside it
    by_token = api.post(
        "/api/v1/jobs",
        json={"spec": JOB.format(name="y")},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert by_token.status_code == 201


def test_the_job_list_searches_filters_sorts_and_counts(api: TestClient, home: Path) -> None:
    headers = _admin(home)
    for name in ("alpha-1", "beta_2", "alpha-3", "gamma"):
        assert (
            api.post(
                "/api/v1/jobs", json={"spec": JOB.format(name=name)}, headers=headers
            ).status_code
            == 201
        )
    listed = api.get("/api/v1/jobs", params={"q": "alpha", "total": "true"}, headers=headers)
    assert [j["name"] for j in listed.json()] == ["alpha-3", "alpha-1"]
    assert listed.headers["X-Total-Count"] == "2"
    # "_" is a literal, not LIKE's any-character
    assert [
        j["name"] for j in api.get("/api/v1/jobs", params={"q": "a_1"}, headers=headers).json()
    ] == []
    by_name = api.get(
        "/api/v1/jobs",
        params={"sort": "name", "limit": 2, "offset": 1, "total": 1},
        headers=headers,
    )
    assert [j["name"] for j in by_name.json()] == ["alpha-3", "beta_2"]
    assert by_name.headers["X-Total-Count"] == "4"
    assert api.get("/api/v1/jobs", params={"vc": "nope"}, headers=headers).json() == []
    bad = api.get("/api/v1/jobs", params={"sort": "size"}, headers=headers)
    assert bad.status_code == 422
    assert "sort" in bad.json()["message"]


def test_the_stream_announces_a_change(api: TestClient, home: Path) -> None:
    headers = _admin(home)
    got: list[str] = []

    def submit_soon() -> None:
        api.post("/api/v1/jobs", json={"spec": JOB.format(name="later")}, headers=headers)

    with api.stream("GET", "/api/v1/stream", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        for line in lines:  # the first event: the generation now
            if line.startswith("data:"):
                got.append(line)
                break
        threading.Thread(target=submit_soon).start()
        for line in lines:  # bounded: the submission changes the generation at once
            if line.startswith("data:"):
                got.append(line)
                break
    assert len(got) == 2
    assert got[0] != got[1]


def test_the_stream_needs_a_caller(api: TestClient) -> None:
    assert api.get("/api/v1/stream").status_code == 401


def test_the_page_is_served_with_a_strict_policy(
    api: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert api.get("/", follow_redirects=False).headers["location"] == "/ui/"
    monkeypatch.setattr(web, "DIST", tmp_path / "missing")
    missing = api.get("/ui/")
    assert missing.status_code == 503
    assert "make web" in missing.text
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<!doctype html><title>shoal</title>")
    (dist / "assets" / "app-1234.js").write_text("console.log(1)")
    (tmp_path / "secret.txt").write_text("no")
    monkeypatch.setattr(web, "DIST", dist)
    page = api.get("/ui/jobs")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    asset = api.get("/ui/assets/app-1234.js")
    assert "immutable" in asset.headers["cache-control"]
    assert api.get("/ui/assets/../../secret.txt").status_code == 404


def test_job_templates_cover_every_format(api: TestClient, home: Path) -> None:
    templates = api.get("/api/v1/job-templates", headers=_admin(home)).json()
    assert {t["format"] for t in templates} == {"native", "pai", "pai-v1", "maro"}
    assert all(t["text"].strip() for t in templates)


def test_check_answers_200_with_the_problems_and_lines_of_a_bad_file(
    api: TestClient, home: Path
) -> None:
    headers = _admin(home)
    bad = "version: 1\nname: x\nroles:\n  m:\n    resources: {cpu: lots}\n    command: 'true'\n"
    answer = api.post("/api/v1/jobs/check", json={"spec": bad}, headers=headers)
    assert answer.status_code == 200
    body = answer.json()
    assert body["valid"] is False
    assert body["code"] == "InvalidJobSpec"
    problem = body["problems"][0]
    assert problem["path"].startswith("roles.m.resources")
    assert problem["line"] == 5
    good = api.post("/api/v1/jobs/check", json={"spec": JOB.format(name="ok")}, headers=headers)
    assert good.json()["valid"] is True
    assert good.json()["plans"][0]["name"] == "ok"
    assert api.get("/api/v1/jobs", headers=headers).json() == []  # nothing stored


def test_the_terminal_socket_takes_the_cookie_only_from_the_servers_own_page(
    api: TestClient, home: Path
) -> None:
    token = _add_user(api, home, "dan")
    api.post("/api/v1/session", json={"token": token})
    cookie = f"{SESSION_COOKIE}={api.cookies[SESSION_COOKIE]}"
    foreign = {"cookie": cookie, "origin": "http://evil.example"}
    with api.websocket_connect("/api/v1/jobs/1/exec", headers=foreign) as socket:
        refused = socket.receive_json()
    assert refused["type"] == "error"
    assert refused["code"] == "CsrfTokenError"
    own = {"cookie": cookie, "origin": "http://testserver"}
    with api.websocket_connect("/api/v1/jobs/1/exec", headers=own) as socket:
        answer = socket.receive_json()
    assert answer["code"] == "NoJobError"  # signed in as dan; there is no job 1
