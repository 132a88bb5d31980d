"""OpenPAI v2 accounts (docs/openpai-compat.md, "Accounts"): tokens, basic login and logout,
OIDC's answer, users and groups. Every answer is checked against OpenPAI's description by the
``pai`` fixture; here, what each one does in shoal."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient

from shoal.store.db import MIGRATIONS, Database, sqlite_url
from tests.server.test_api import JOB, register_node

PASSWORD = "secret1"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def login(pai: TestClient, name: str, password: str = PASSWORD) -> str:
    answer = pai.post("/api/v2/authn/basic/login", data={"username": name, "password": password})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


def add_user(pai: TestClient, name: str, **extra: object) -> str:
    """A user made through /api/v2 (by the admin); their login token."""
    made = pai.post("/api/v2/users", json={"username": name, "password": PASSWORD, **extra})
    assert made.status_code == 201, made.text
    assert made.json() == {"message": "User is created successfully"}
    return login(pai, name)


def refused(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code
    message = str(response.json()["message"])
    assert message
    return message


def make_vc(pai: TestClient, name: str, members: list[str]) -> None:
    made = pai.post(f"/api/v1/virtual-clusters/{name}", json={"members": members})
    assert made.status_code == 201, made.text


def vc_members(pai: TestClient, name: str) -> list[str]:
    return list(pai.get(f"/api/v1/virtual-clusters/{name}").json()["members"])


# ---- login, logout, OIDC ----


def test_basic_login_answers_a_token_or_openpais_400s(pai: TestClient) -> None:
    add_user(pai, "alice")
    form = pai.post(
        "/api/v2/authn/basic/login",
        data={"username": "alice", "password": PASSWORD, "expiration": "3600"},
        headers={"Authorization": ""},
    )
    assert form.status_code == 200 and form.json()["user"] == "alice"
    assert form.json()["admin"] is False
    token = form.json()["token"]
    assert pai.get("/api/v2/users/alice", headers=bearer(token)).status_code == 200
    # OpenPAI's SDK logs in with JSON and a number
    sdk = {"username": "alice", "password": PASSWORD, "expiration": 4000}
    assert pai.post("/api/v2/authn/basic/login", json=sdk).status_code == 200

    def attempt(**fields: str) -> httpx.Response:
        return pai.post("/api/v2/authn/basic/login", data=fields)

    refused(attempt(username="nobody", password=PASSWORD), 400, "NoUserError")
    refused(attempt(username="alice", password="wrong-one"), 400, "IncorrectPasswordError")
    refused(attempt(username="alice"), 400, "InvalidParametersError")
    too_short = attempt(username="alice", password=PASSWORD, expiration="10")
    assert "expiration" in refused(too_short, 400, "InvalidParametersError")
    not_json = pai.post(
        "/api/v2/authn/basic/login", content=b"[1]", headers={"Content-Type": "application/json"}
    )
    refused(not_json, 400, "InvalidParametersError")


def test_a_user_without_a_password_cannot_log_in(pai: TestClient) -> None:
    assert pai.post("/api/v1/users", json={"name": "tokenonly"}).status_code == 201
    attempt = {"username": "tokenonly", "password": PASSWORD}
    message = refused(
        pai.post("/api/v2/authn/basic/login", data=attempt), 400, "IncorrectPasswordError"
    )
    assert "no password" in message


def test_logout_revokes_the_calling_token_only(pai: TestClient) -> None:
    add_user(pai, "alice")
    first, second = login(pai, "alice"), login(pai, "alice")
    out = pai.delete("/api/v2/authn/basic/logout", headers=bearer(first))
    assert out.status_code == 200 and out.json() == {"message": "Logout successfully"}
    refused(pai.get("/api/v2/tokens", headers=bearer(first)), 401, "UnauthorizedUserError")
    assert pai.get("/api/v2/tokens", headers=bearer(second)).status_code == 200
    application = pai.post("/api/v2/tokens/application", headers=bearer(second)).json()["token"]
    refused(
        pai.delete("/api/v2/authn/basic/logout", headers=bearer(application)),
        403,
        "ForbiddenUserError",
    )
    anonymous = pai.delete("/api/v2/authn/basic/logout", headers={"Authorization": ""})
    refused(anonymous, 401, "UnauthorizedUserError")


def test_oidc_routes_send_basic_login_users_to_info(pai: TestClient) -> None:
    for action in ("login", "logout"):
        url = f"/api/v2/authn/oidc/{action}"
        redirect = pai.get(url, headers={"Authorization": ""}, follow_redirects=False)
        assert redirect.status_code == 302 and redirect.headers["location"] == "/api/v2/info"
        assert "basic/login" in refused(redirect, 302, "NoApiError")
        followed = pai.get(url, headers={"Authorization": ""})
        assert followed.status_code == 200 and followed.json()["authnMethod"] == "basic"


# ---- tokens ----


def test_tokens_are_listed_by_reference_and_revoked_by_reference_or_value(
    pai: TestClient,
) -> None:
    token = add_user(pai, "alice")
    as_alice = bearer(token)
    made = pai.post("/api/v2/tokens/application", headers=as_alice)
    assert made.status_code == 200 and made.json()["application"] is True
    application = made.json()["token"]
    listed = pai.get("/api/v2/tokens", headers=as_alice).json()["tokens"]
    assert len(listed) == 2 and all(t.startswith("shoal-token-") for t in listed)
    assert token not in listed and application not in listed  # only hashes are kept
    # an application token works on what it may do (reading yourself), then is revoked
    assert pai.get("/api/v2/users/alice", headers=bearer(application)).status_code == 200
    revoked = pai.delete(f"/api/v2/tokens/{listed[1]}", headers=as_alice)
    assert revoked.status_code == 200 and revoked.json() == {"message": "revoke successfully"}
    gone = pai.get("/api/v2/users/alice", headers=bearer(application))
    refused(gone, 401, "UnauthorizedUserError")
    assert pai.get("/api/v2/tokens", headers=as_alice).json()["tokens"] == listed[:1]
    # by value, as OpenPAI's clients revoke the JWTs they hold
    other = pai.post("/api/v2/tokens/application", headers=as_alice).json()["token"]
    assert pai.delete(f"/api/v2/tokens/{other}", headers=as_alice).status_code == 200
    refused(pai.get("/api/v2/users/alice", headers=bearer(other)), 401, "UnauthorizedUserError")


def test_application_tokens_manage_no_tokens(pai: TestClient) -> None:
    as_alice = bearer(add_user(pai, "alice"))
    application = bearer(pai.post("/api/v2/tokens/application", headers=as_alice).json()["token"])
    refused(pai.get("/api/v2/tokens", headers=application), 401, "UnauthorizedUserError")
    again = pai.post("/api/v2/tokens/application", headers=application)
    refused(again, 401, "UnauthorizedUserError")
    reference = pai.get("/api/v2/tokens", headers=as_alice).json()["tokens"][0]
    revoke = pai.delete(f"/api/v2/tokens/{reference}", headers=application)
    refused(revoke, 403, "ForbiddenUserError")


def test_alice_cannot_revoke_bobs_tokens_but_an_admin_can(pai: TestClient) -> None:
    as_alice, as_bob = bearer(add_user(pai, "alice")), bearer(add_user(pai, "bob"))
    bobs = pai.get("/api/v2/tokens", headers=as_bob).json()["tokens"][0]
    for reference in (bobs, "shoal-token-99999", "shoal_not-a-real-token"):
        attempt = pai.delete(f"/api/v2/tokens/{reference}", headers=as_alice)
        assert "not-a-real" not in refused(attempt, 403, "ForbiddenUserError")
    assert pai.get("/api/v2/tokens", headers=as_bob).status_code == 200
    assert pai.delete(f"/api/v2/tokens/{bobs}").status_code == 200  # the admin
    refused(pai.get("/api/v2/tokens", headers=as_bob), 401, "UnauthorizedUserError")


# ---- users ----


def user_info(pai: TestClient, name: str, token: str | None = None) -> dict[str, Any]:
    answer = pai.get(f"/api/v2/users/{name}", headers=bearer(token) if token else None)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_admin_creates_users_with_their_profile_and_vcs(pai: TestClient) -> None:
    make_vc(pai, "team", ["carol"])
    make_vc(pai, "open", [])
    add_user(pai, "alice", email="alice@example.com", extension={"k": 1}, virtualCluster=["team"])
    info = user_info(pai, "alice")
    assert info["email"] == "alice@example.com" and info["extension"] == {"k": 1}
    assert info["virtualCluster"] == ["default", "open", "team"] and info["admin"] is False
    assert info["storageConfig"] == [] and info["grouplist"] == []
    assert vc_members(pai, "team") == ["carol", "alice"]
    assert vc_members(pai, "open") == []  # an open VC stays open to everyone
    names = [u["username"] for u in pai.get("/api/v2/users").json()]
    assert names == ["admin", "alice"]
    assert user_info(pai, "admin")["virtualCluster"] == ["default", "open", "team"]


def test_creating_a_user_refuses_conflicts_and_bad_bodies(pai: TestClient) -> None:
    add_user(pai, "alice")
    again = pai.post("/api/v2/users", json={"username": "alice", "password": PASSWORD})
    refused(again, 409, "ConflictUserError")

    def create(**body: object) -> httpx.Response:
        return pai.post("/api/v2/users", json=body)

    assert "password" in refused(create(username="bob"), 400, "InvalidParametersError")
    refused(create(username="bob", password="short"), 400, "InvalidParametersError")
    refused(create(username="no spaces", password=PASSWORD), 400, "InvalidParametersError")
    unknown_vc = create(username="bob", password=PASSWORD, virtualCluster=["nope"])
    assert "nope" in refused(unknown_vc, 400, "NoVirtualClusterError")
    extra = create(username="bob", password=PASSWORD, shoe="size")
    assert "shoe" in refused(extra, 400, "InvalidParametersError")
    assert [u["username"] for u in pai.get("/api/v2/users").json()] == ["admin", "alice"]


def test_a_user_sees_only_themself(pai: TestClient) -> None:
    token = add_user(pai, "alice")
    add_user(pai, "bob")
    listed = pai.get("/api/v2/users", headers=bearer(token)).json()
    assert [u["username"] for u in listed] == ["alice"]
    refused(pai.get("/api/v2/users/bob", headers=bearer(token)), 404, "NoUserError")
    refused(pai.get("/api/v2/users/nobody"), 404, "NoUserError")


def test_admin_updates_a_user_by_patch_and_in_full(pai: TestClient) -> None:
    make_vc(pai, "team", ["carol"])
    make_vc(pai, "solo", ["alice"])
    add_user(pai, "alice", virtualCluster=["team", "solo"])

    def put(data: dict[str, object], patch: bool) -> httpx.Response:
        return pai.put("/api/v2/users", json={"data": data, "patch": patch})

    patched = put({"username": "alice", "email": "a@x", "extension": {"a": 1}}, True)
    assert patched.status_code == 201, patched.text
    assert put({"username": "alice", "extension": {"b": 2}}, True).status_code == 201
    info = user_info(pai, "alice")
    assert info["email"] == "a@x" and info["extension"] == {"a": 1, "b": 2}
    partial = put({"username": "alice", "email": "b@x"}, False)
    assert "data.password" in refused(partial, 400, "InvalidParametersError")
    full = {
        "username": "alice",
        "email": "b@x",
        "virtualCluster": ["solo"],
        "admin": True,
        "password": "another1",
        "extension": {"c": 3},
    }
    assert put(full, False).status_code == 201
    info = user_info(pai, "alice")
    assert info["admin"] is True and info["extension"] == {"c": 3} and info["email"] == "b@x"
    assert vc_members(pai, "team") == ["carol"]  # alice left it
    login(pai, "alice", "another1")
    wrong = pai.post("/api/v2/authn/basic/login", data={"username": "alice", "password": PASSWORD})
    refused(wrong, 400, "IncorrectPasswordError")
    last = put({"username": "alice", "virtualCluster": []}, True)
    assert "open solo to everyone" in refused(last, 400, "InvalidParametersError")
    assert vc_members(pai, "solo") == ["alice"]
    refused(put({"username": "nobody", "email": "x"}, True), 404, "NoUserError")
    refused(put({"username": "admin", "admin": False}, True), 403, "RemoveAdminError")
    no_data = pai.put("/api/v2/users", json={"patch": True})
    assert "data" in refused(no_data, 400, "InvalidParametersError")


def test_alice_changes_herself_but_not_bob(pai: TestClient) -> None:
    as_alice = bearer(add_user(pai, "alice"))
    add_user(pai, "bob")

    def me(data: dict[str, object], patch: bool = True) -> httpx.Response:
        return pai.put("/api/v2/users/me", json={"data": data, "patch": patch}, headers=as_alice)

    assert me({"username": "alice", "email": "alice@x"}).status_code == 201
    assert user_info(pai, "alice")["email"] == "alice@x"
    refused(me({"username": "bob", "email": "mine@x"}), 403, "ForbiddenUserError")
    assert user_info(pai, "bob")["email"] == ""
    wrong = me({"username": "alice", "newPassword": "changed1", "oldPassword": "guess1"})
    refused(wrong, 403, "ForbiddenUserError")
    right = me({"username": "alice", "newPassword": "changed1", "oldPassword": PASSWORD})
    assert right.status_code == 201
    login(pai, "alice", "changed1")
    # patch: false sets the fields given, as OpenPAI's server did (test_openpai_last_differences)
    assert me({"username": "alice", "email": "x"}, patch=False).status_code == 201
    # OpenPAI's older SDK sends the fields bare: a patch
    bare = pai.put(
        "/api/v2/users/me", json={"username": "alice", "email": "bare@x"}, headers=as_alice
    )
    assert bare.status_code == 201 and user_info(pai, "alice")["email"] == "bare@x"
    # what only admins do
    to_bob = {"data": {"username": "bob", "admin": True}, "patch": True}
    refused(pai.put("/api/v2/users", json=to_bob, headers=as_alice), 403, "ForbiddenUserError")
    made = pai.post(
        "/api/v2/users", json={"username": "eve", "password": PASSWORD}, headers=as_alice
    )
    refused(made, 403, "ForbiddenUserError")
    refused(pai.delete("/api/v2/users/bob", headers=as_alice), 403, "ForbiddenUserError")
    group = pai.put("/api/v2/users/bob/group/", json={"groupname": "g"}, headers=as_alice)
    refused(group, 403, "ForbiddenUserError")
    assert user_info(pai, "bob")["admin"] is False


def test_an_admins_application_token_manages_no_users(pai: TestClient) -> None:
    application = bearer(pai.post("/api/v2/tokens/application").json()["token"])
    made = pai.post(
        "/api/v2/users", json={"username": "eve", "password": PASSWORD}, headers=application
    )
    refused(made, 403, "ForbiddenUserError")
    me = {"data": {"username": "admin", "email": "x"}, "patch": True}
    refused(pai.put("/api/v2/users/me", json=me, headers=application), 403, "ForbiddenUserError")
    listed = pai.get("/api/v2/users", headers=application).json()
    assert [u["username"] for u in listed] == ["admin"]  # reads only its own user


def test_deleting_users(pai: TestClient, pai_home: Path) -> None:
    as_bob = bearer(add_user(pai, "bob"))
    deleted = pai.delete("/api/v2/users/bob")
    assert deleted.status_code == 200 and deleted.json() == {
        "message": "user is removed successfully"
    }
    refused(pai.get("/api/v2/users/bob"), 404, "NoUserError")
    refused(pai.get("/api/v2/users/bob", headers=as_bob), 401, "UnauthorizedUserError")
    refused(pai.delete("/api/v2/users/bob"), 404, "NoUserError")
    refused(pai.delete("/api/v2/users/admin"), 403, "RemoveAdminError")
    # an active job refuses it, as shoal's own API does without stopJobs
    register_node(pai, pai_home, gpus=1)
    as_carol = bearer(add_user(pai, "carol"))
    job = {"spec": JOB.format(name="long", gpu=1)}
    assert pai.post("/api/v1/jobs", json=job, headers=as_carol).status_code == 201
    busy = refused(pai.delete("/api/v2/users/carol"), 403, "ForbiddenUserError")
    assert "stopJobs=true" in busy
    assert user_info(pai, "carol")["username"] == "carol"


# ---- groups ----


def test_group_lifecycle_with_its_vcs(pai: TestClient) -> None:
    make_vc(pai, "team", ["carol"])
    group = {
        "groupname": "ml",
        "description": "the ML team",
        "externalName": "ML-AD",
        "extension": {"color": "blue", "acls": {"virtualClusters": ["team"]}},
    }
    made = pai.post("/api/v2/groups", json=group)
    assert made.status_code == 201 and made.json() == {"message": "group is created successfully"}
    got = pai.get("/api/v2/groups/ml").json()
    assert got["description"] == "the ML team" and got["externalName"] == "ML-AD"
    assert got["extension"]["color"] == "blue"
    assert got["extension"]["acls"]["virtualClusters"] == ["default", "team"]
    assert vc_members(pai, "team") == ["carol", "ml"]
    assert [g["groupname"] for g in pai.get("/api/v2/groups").json()] == ["default", "ml"]
    patch = {"data": {"groupname": "ml", "description": "ML"}, "patch": True}
    assert pai.put("/api/v2/groups", json=patch).status_code == 201
    got = pai.get("/api/v2/groups/ml").json()
    assert got["description"] == "ML" and got["externalName"] == "ML-AD"
    full = {"data": {"groupname": "ml", "description": "again"}, "patch": False}
    assert pai.put("/api/v2/groups", json=full).status_code == 201
    got = pai.get("/api/v2/groups/ml").json()
    assert got["externalName"] == "" and "color" not in got["extension"]
    assert vc_members(pai, "team") == ["carol", "ml"]  # no acls given: VCs unchanged
    # OpenPAI's SDK sends the group bare: a patch
    assert (
        pai.put("/api/v2/groups", json={"groupname": "ml", "externalName": "E"}).status_code == 201
    )
    assert pai.get("/api/v2/groups/ml").json()["externalName"] == "E"
    removed = pai.delete("/api/v2/groups/ml")
    assert removed.status_code == 201 and removed.json() == {
        "message": "group is removed successfully"
    }
    refused(pai.get("/api/v2/groups/ml"), 404, "NoGroupError")
    assert vc_members(pai, "team") == ["carol"]
    refused(pai.delete("/api/v2/groups/ml"), 500, "NoGroupError")


def test_group_creation_refuses_conflicts_and_bad_bodies(pai: TestClient) -> None:
    add_user(pai, "alice")
    assert pai.post("/api/v2/groups", json={"groupname": "ml"}).status_code == 201

    def create(**body: object) -> httpx.Response:
        return pai.post("/api/v2/groups", json=body)

    assert "already exists" in refused(create(groupname="ml"), 400, "InvalidParametersError")
    assert "a user is named" in refused(create(groupname="alice"), 400, "InvalidParametersError")
    refused(create(groupname="no spaces"), 400, "InvalidParametersError")
    refused(create(description="no name"), 400, "InvalidParametersError")
    admins = create(groupname="ops", extension={"acls": {"admin": True}})
    assert "per user" in refused(admins, 400, "InvalidParametersError")
    unknown_vc = create(groupname="ops", extension={"acls": {"virtualClusters": ["nope"]}})
    refused(unknown_vc, 400, "NoVirtualClusterError")
    assert [g["groupname"] for g in pai.get("/api/v2/groups").json()] == ["default", "ml"]
    missing = pai.put("/api/v2/groups", json={"data": {"groupname": "nope"}, "patch": True})
    refused(missing, 404, "NoGroupError")


def test_users_join_and_leave_groups(pai: TestClient) -> None:
    make_vc(pai, "team", ["ml"])
    add_user(pai, "alice")
    assert pai.post("/api/v2/groups", json={"groupname": "ml"}).status_code == 201
    joined = pai.put("/api/v2/users/alice/group/", json={"groupname": "ml"})
    assert joined.status_code == 201
    assert joined.json() == {"message": "User alice is added into group ml"}
    info = user_info(pai, "alice")
    assert info["grouplist"] == ["ml"] and "team" in info["virtualCluster"]
    members = pai.get("/api/v2/groups/ml/userlist").json()
    assert members == [{"username": "alice", "clusterAdmin": False}]
    assert pai.get("/api/v2/groups/nope/userlist").json() == []  # as OpenPAI: nobody
    unknown = pai.put("/api/v2/users/alice/group/", json={"groupname": "nope"})
    refused(unknown, 404, "NoGroupError")
    nobody = pai.put("/api/v2/users/nobody/group/", json={"groupname": "ml"})
    refused(nobody, 404, "NoUserError")
    nobody = pai.request("DELETE", "/api/v2/users/nobody/group/", json={"groupname": "ml"})
    refused(nobody, 404, "NoUserError")
    refused(pai.put("/api/v2/users/alice/group/", json={}), 400, "InvalidParametersError")
    left = pai.request("DELETE", "/api/v2/users/alice/group/", json={"groupname": "ml"})
    assert left.status_code == 201 and user_info(pai, "alice")["grouplist"] == []
    assert "team" not in user_info(pai, "alice")["virtualCluster"]
    listed = pai.put("/api/v2/users/alice/grouplist/", json={"grouplist": ["ml", "ml"]})
    assert listed.status_code == 201 and user_info(pai, "alice")["grouplist"] == ["ml"]
    bad = pai.put("/api/v2/users/alice/grouplist/", json={"grouplist": ["ml", "nope"]})
    refused(bad, 404, "NoGroupError")
    # a group only /api/v1 users carry is a group too, with empty attributes
    assert pai.patch("/api/v1/users/alice", json={"groups": ["ml", "legacy"]}).status_code == 200
    legacy = pai.get("/api/v2/groups/legacy").json()
    assert legacy["description"] == "" and legacy["externalName"] == ""
    # deleting a group takes it from its users
    assert pai.delete("/api/v2/groups/ml").status_code == 201
    assert user_info(pai, "alice")["grouplist"] == ["legacy"]
    assert vc_members(pai, "team") == ["ml"]  # its last member: the VC stays closed


def test_non_admins_read_groups_but_do_not_manage_them(pai: TestClient) -> None:
    as_alice = bearer(add_user(pai, "alice"))
    assert pai.post("/api/v2/groups", json={"groupname": "ml"}).status_code == 201
    assert pai.get("/api/v2/groups", headers=as_alice).status_code == 200
    assert pai.get("/api/v2/groups/ml", headers=as_alice).status_code == 200
    made = pai.post("/api/v2/groups", json={"groupname": "mine"}, headers=as_alice)
    refused(made, 403, "ForbiddenUserError")
    change = {"data": {"groupname": "ml", "description": "x"}, "patch": True}
    refused(pai.put("/api/v2/groups", json=change, headers=as_alice), 403, "ForbiddenUserError")
    refused(pai.delete("/api/v2/groups/ml", headers=as_alice), 403, "ForbiddenUserError")
    members = pai.get("/api/v2/groups/ml/userlist", headers=as_alice)
    refused(members, 403, "ForbiddenUserError")
    assert pai.get("/api/v2/groups/ml").json()["description"] == ""


# ---- the store ----


@pytest.mark.sqlite_only  # an older store is a SQLite file made by an older shoal
def test_users_of_an_older_store_get_an_empty_profile(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))

    def migrate(step: str, revision: str) -> None:
        with db.engine.begin() as connection:
            config.attributes["connection"] = connection
            getattr(command, step)(config, revision)

    migrate("upgrade", "0017")
    with sqlite3.connect(tmp_path / "shoal.db") as raw:
        raw.execute(
            "INSERT INTO users (name, is_admin, created_at, groups) VALUES ('old', 0, 0, '[\"g\"]')"
        )
    migrate("upgrade", "head")
    with sqlite3.connect(tmp_path / "shoal.db") as raw:
        row = raw.execute(
            "SELECT email, extension, groups FROM users WHERE name = 'old'"
        ).fetchone()
        assert raw.execute("SELECT count(*) FROM user_groups").fetchone() == (0,)
    assert row == ("", "{}", '["g"]')
    migrate("downgrade", "0017")  # and back: the columns and the table go, the user stays
    with sqlite3.connect(tmp_path / "shoal.db") as raw:
        columns = [c[1] for c in raw.execute("PRAGMA table_info(users)")]
        assert "email" not in columns and "extension" not in columns
        assert raw.execute("SELECT name FROM users").fetchall() == [("old",)]
    db.dispose()
