"""Code archives and data sets through the REST API in process (real SQLite, real app): unsafe
archives refused naming the member, uploads checked against their sha256, who may read a data
set (owner, shared user, group, VC, admin; everyone else 404), submissions that declare data,
and what an agent may download."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from shoal import archives
from shoal.server.app import create_app, prepare
from shoal.server.services import attempt_credentials
from shoal.server.settings import ServerSettings
from tests.server.test_api import agent_headers, register_node
from tests.server.test_security import bearer, make_user

JOB = "version: 1\nname: {name}\ndata: [{data}]\nroles:\n  w:\n    command: echo hi\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[TestClient, str, Path]]:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home))
    with TestClient(create_app(ctx)) as client:
        yield client, (home / "admin.token").read_text().strip(), home


def tar_gz(*members: tarfile.TarInfo, data: bytes = b"x") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for member in members:
            if member.isreg():
                member.size = len(data)
                archive.addfile(member, io.BytesIO(data))
            else:
                archive.addfile(member)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def put_code(client: TestClient, token: str, body: bytes, sha: str | None = None) -> object:
    sha = sha or hashlib.sha256(body).hexdigest()
    return client.put(f"/api/v1/code/{sha}", content=body, headers=bearer(token))


@pytest.mark.parametrize(
    ("bad", "named", "why"),
    [
        (member("../escape.py"), "../escape.py", "'..'"),
        (member("/etc/cron.d/x"), "/etc/cron.d/x", "absolute path"),
        (member("link", tarfile.SYMTYPE, "../../etc/passwd"), "link", "outside the archive"),
        (member("abs", tarfile.SYMTYPE, "/etc/passwd"), "abs", "outside the archive"),
        (member("hard", tarfile.LNKTYPE, "/etc/shadow"), "hard", "outside the archive"),
        (member("dev", tarfile.CHRTYPE), "dev", "device or FIFO"),
        (member("fifo", tarfile.FIFOTYPE), "fifo", "device or FIFO"),
    ],
)
def test_unsafe_code_archives_are_refused_naming_the_member(
    server: tuple[TestClient, str, Path], bad: tarfile.TarInfo, named: str, why: str
) -> None:
    client, admin, home = server
    body = tar_gz(member("ok.py"), bad)
    refused = put_code(client, admin, body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "UnsafeArchive"
    assert repr(named) in refused.json()["message"] and why in refused.json()["message"]
    sha = hashlib.sha256(body).hexdigest()
    assert client.get(f"/api/v1/code/{sha}", headers=bearer(admin)).status_code == 404
    # the same archive sent inline with the submission (the older way) is refused the same way
    inline = client.post(
        "/api/v1/jobs",
        json={
            "spec": JOB.format(name="j", data=""),
            "code_archive": base64.b64encode(body).decode(),
        },
        headers=bearer(admin),
    )
    assert inline.status_code == 400 and repr(named) in inline.json()["message"]
    assert list((home / "blobs" / "tmp").iterdir()) == []


def test_code_archives_are_kept_once_by_sha256_and_checked(
    server: tuple[TestClient, str, Path],
) -> None:
    client, admin, home = server
    body = tar_gz(member("main.py"), member("pkg", tarfile.DIRTYPE))
    sha = hashlib.sha256(body).hexdigest()
    assert client.get(f"/api/v1/code/{sha}", headers=bearer(admin)).status_code == 404
    wrong = put_code(client, admin, body[:-10], sha)  # cut short: not the announced hash
    assert wrong.status_code == 400 and wrong.json()["code"] == "DigestMismatch"
    assert client.get(f"/api/v1/code/{sha}", headers=bearer(admin)).status_code == 404
    assert put_code(client, admin, body).status_code == 201
    assert client.get(f"/api/v1/code/{sha}", headers=bearer(admin)).json()["size"] == len(body)
    unknown = "0" * 64
    missing = client.post(
        "/api/v1/jobs",
        json={"spec": JOB.format(name="j", data=""), "code_hash": unknown},
        headers=bearer(admin),
    )
    assert missing.status_code == 400 and unknown in missing.json()["message"]
    job = client.post(
        "/api/v1/jobs",
        json={"spec": JOB.format(name="j", data=""), "code_hash": sha},
        headers=bearer(admin),
    )
    assert job.status_code == 201, job.text
    assert (home / "blobs" / "sha256" / sha).read_bytes() == body


def push(client: TestClient, token: str, owner: str, name: str, body: bytes) -> object:
    params = {"sha256": hashlib.sha256(body).hexdigest(), "kind": "file"}
    return client.put(
        f"/api/v1/data/{owner}/{name}", params=params, content=body, headers=bearer(token)
    )


def test_who_may_read_a_data_set(server: tuple[TestClient, str, Path]) -> None:
    client, admin, _ = server
    alice = make_user(client, admin, "alice")
    bob = make_user(client, admin, "bob")
    carol = make_user(client, admin, "carol", groups=["vision"])
    dave = make_user(client, admin, "dave")
    eve = make_user(client, admin, "eve")
    team = {"members": ["dave"]}
    assert client.post("/api/v1/virtual-clusters/team", json=team, headers=bearer(admin)).is_success
    assert push(client, alice, "alice", "corpus", b"secret words").status_code == 201

    def reads(token: str) -> tuple[int, int, int]:
        meta = client.get("/api/v1/data/alice/corpus", headers=bearer(token)).status_code
        content = client.get("/api/v1/data/alice/corpus/content", headers=bearer(token))
        job = client.post(
            "/api/v1/jobs",
            json={"spec": JOB.format(name=f"j{len(token)}{meta}", data="alice/corpus")},
            headers=bearer(token),
        )
        if content.status_code == 200:
            assert content.content == b"secret words"
        else:  # the same answer as for a data set that does not exist: nothing leaks
            assert content.json()["code"] == "NoDataSetError"
        return meta, content.status_code, job.status_code

    assert reads(alice) == (200, 200, 201)
    assert reads(admin) == (200, 200, 201)
    for outsider in (bob, carol, dave, eve):
        assert reads(outsider) == (404, 404, 404)
    refused = client.post(
        "/api/v1/jobs",
        json={"spec": JOB.format(name="x", data="alice/corpus")},
        headers=bearer(eve),
    )
    assert "'alice/corpus'" in refused.json()["message"] and "eve" in refused.json()["message"]
    # only the owner (or an admin) shares; others may not even learn it exists
    share = {"users": ["bob"], "groups": ["vision"], "vcs": ["team"]}
    stranger = client.post("/api/v1/data/alice/corpus/share", json=share, headers=bearer(eve))
    assert stranger.status_code == 404
    shared = client.post("/api/v1/data/alice/corpus/share", json=share, headers=bearer(alice))
    assert shared.json()["shares"] == {"users": ["bob"], "groups": ["vision"], "vcs": ["team"]}
    for reader in (bob, carol, dave):  # a user, a group's member, a VC's member
        assert reads(reader)[:2] == (200, 200)
    assert reads(eve) == (404, 404, 404)
    listed = client.get("/api/v1/data", headers=bearer(bob)).json()
    assert [(d["ref"], d["shares"]) for d in listed] == [("alice/corpus", None)]
    assert client.get("/api/v1/data", headers=bearer(eve)).json() == []
    # a reader may not change it (403 now that it may see it); nor push as someone else
    assert client.delete("/api/v1/data/alice/corpus", headers=bearer(bob)).status_code == 403
    assert push(client, bob, "alice", "corpus", b"mine now").status_code == 403
    unshare = {"users": ["bob"]}
    assert client.post(
        "/api/v1/data/alice/corpus/unshare", json=unshare, headers=bearer(alice)
    ).is_success
    assert reads(bob)[:2] == (404, 404)
    assert (
        client.post(
            "/api/v1/data/alice/corpus/share", json={"users": ["nobody"]}, headers=bearer(alice)
        ).status_code
        == 404
    )


def test_names_replacing_and_removing(server: tuple[TestClient, str, Path]) -> None:
    client, admin, home = server
    alice = make_user(client, admin, "alice")
    assert push(client, alice, "alice", "bad/name", b"x").status_code in (404, 405)
    assert push(client, alice, "alice", ".hidden", b"x").status_code == 400
    assert push(client, alice, "alice", "set", b"one").status_code == 201
    again = push(client, alice, "alice", "set", b"two")
    assert again.status_code == 409 and "--replace" in again.json()["message"]
    body = b"two"
    params = {"sha256": hashlib.sha256(body).hexdigest(), "replace": "true"}
    replaced = client.put(
        "/api/v1/data/alice/set", params=params, content=body, headers=bearer(alice)
    )
    assert replaced.status_code == 201 and replaced.json()["size"] == 3
    old_blob = home / "blobs" / "sha256" / hashlib.sha256(b"one").hexdigest()
    assert not old_blob.exists()  # nothing uses it any more
    assert client.delete("/api/v1/data/alice/set", headers=bearer(alice)).status_code == 204
    assert client.get("/api/v1/data/alice/set", headers=bearer(alice)).status_code == 404
    assert list((home / "blobs" / "sha256").iterdir()) == []


def test_agents_download_only_what_an_unfinished_attempt_reads(
    server: tuple[TestClient, str, Path],
) -> None:
    client, admin, home = server
    register_node(client, home)
    assert push(client, admin, "admin", "mine", b"for the job").status_code == 201
    assert push(client, admin, "admin", "other", b"not for the job").status_code == 201
    job = client.post(
        "/api/v1/jobs", json={"spec": JOB.format(name="j", data="mine")}, headers=bearer(admin)
    )
    assert job.status_code == 201, job.text
    agent = agent_headers(home)
    orders = client.post(
        "/api/v1/agent/orders", json={"agent_id": "a", "nodes": ["n0"]}, headers=agent
    )
    for _ in range(50):
        launch = orders.json()["launch"]
        if launch:
            break
        orders = client.post(
            "/api/v1/agent/orders",
            json={"agent_id": "a", "nodes": ["n0"], "wait_s": 0.2},
            headers=agent,
        )
    (order,) = orders.json()["launch"]
    (mount,) = order["data"]
    assert mount["ref"] == "mine" and mount["kind"] == "file" and mount["size"] == 11
    attempt = order["attempt_id"]
    got = client.get(f"/api/v1/agent/attempts/{attempt}/data/{mount['sha256']}", headers=agent)
    assert got.status_code == 200 and got.content == b"for the job"
    other = hashlib.sha256(b"not for the job").hexdigest()
    assert (
        client.get(f"/api/v1/agent/attempts/{attempt}/data/{other}", headers=agent).status_code
        == 404
    )
    assert (
        client.get(
            f"/api/v1/agent/attempts/999.1/data/{mount['sha256']}", headers=agent
        ).status_code
        == 404
    )
    # users cannot call the agent API with their tokens
    user = make_user(client, admin, "alice")
    assert (
        client.get(
            f"/api/v1/agent/attempts/{attempt}/data/{mount['sha256']}", headers=bearer(user)
        ).status_code
        == 403
    )
    # an attempt's own credential (what a Kubernetes Pod shows): its files only
    assert order["fetch_token"] is None  # shoal's own agents fetch as themselves
    credential = attempt_credentials.mint(
        SimpleNamespace(settings=SimpleNamespace(home=home)),  # type: ignore[arg-type]
        attempt,
    )
    assert stat.S_IMODE((home / "attempt-fetch.key").stat().st_mode) == 0o600
    mine = f"/api/v1/attempts/{attempt}/data/{mount['sha256']}"
    got = client.get(mine, headers=bearer(credential))
    assert got.status_code == 200 and got.content == b"for the job"
    assert (
        client.get(mine.replace(mount["sha256"], other), headers=bearer(credential)).status_code
        == 404
    )
    assert (
        client.get(f"/api/v1/attempts/{attempt}/code", headers=bearer(credential)).status_code
        == 404
    )
    refused = client.get(
        f"/api/v1/attempts/999.1/data/{mount['sha256']}", headers=bearer(credential)
    )
    assert refused.status_code == 401 and refused.json()["code"] == "UnauthorizedAttemptError"
    assert client.get(mine, headers=bearer(user)).status_code == 401  # a user's token is not one
    assert client.get(mine, headers=bearer(admin)).status_code == 401


def test_uploads_a_crash_left_unfinished_are_removed_at_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    prepare(ServerSettings(home=home))
    leftover = home / "blobs" / "tmp" / "upload-abc"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half a data set")
    prepare(ServerSettings(home=home))
    assert not leftover.exists()


def test_archives_are_deterministic_and_unpack_without_setid_bits(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    tool = tree / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o6755)
    first = archives.build(tree, tmp_path / "a.tar.gz", compress=True)
    os.utime(tool, (1, 1))  # a touched file: the same content, the same archive
    second = archives.build(tree, tmp_path / "b.tar.gz", compress=True)
    assert first.sha256 == second.sha256
    with tarfile.open(first.path) as built:
        assert built.getmember("bin/tool").mode == 0o755
    raw = tmp_path / "setid.tar.gz"
    with tarfile.open(raw, "w:gz") as archive:
        info = member("run.sh")
        info.mode = 0o6755
        info.size = 2
        archive.addfile(info, io.BytesIO(b"#!"))
    archives.extract(raw, tmp_path / "out")
    assert stat.S_IMODE((tmp_path / "out" / "run.sh").stat().st_mode) & 0o6000 == 0
    outside = tmp_path / "evil.tar.gz"
    outside.write_bytes(tar_gz(member("../evil")))
    with pytest.raises(archives.ArchiveError):
        archives.extract(outside, tmp_path / "out2")
    assert not (tmp_path / "evil").exists()


def test_a_data_sets_hash_is_not_a_code_archive(server: tuple[TestClient, str, Path]) -> None:
    """Data sets and code share the blob store: knowing the sha256 of someone's data set (shown to
    those it was shared with, kept after an unshare) must not let a job unpack it as its code."""
    client, admin, _home = server
    alice, bob = make_user(client, admin, "alice"), make_user(client, admin, "bob")
    body = tar_gz(member("secret.txt"), data=b"alice's private data")
    sha = hashlib.sha256(body).hexdigest()
    stored = client.put(
        "/api/v1/data/alice/private",
        params={"sha256": sha, "kind": "dir"},
        content=body,
        headers=bearer(alice),
    )
    assert stored.status_code == 201, stored.text
    assert client.get(f"/api/v1/code/{sha}", headers=bearer(bob)).status_code == 404
    spec = "version: 1\nname: steal\nroles:\n  w:\n    command: cat secret.txt\n"
    refused = client.post(
        "/api/v1/jobs", json={"spec": spec, "code_hash": sha}, headers=bearer(bob)
    )
    assert refused.status_code == 400 and refused.json()["code"] == "NoCodeArchive", refused.text
    # the same content uploaded as code (checked as an archive) may then be named as code
    uploaded = put_code(client, bob, body, sha)
    assert uploaded.status_code == 201, uploaded.text  # type: ignore[attr-defined]
    made = client.post("/api/v1/jobs", json={"spec": spec, "code_hash": sha}, headers=bearer(bob))
    assert made.status_code == 201, made.text
