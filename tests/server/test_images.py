"""Container images through the REST API in process (real SQLite, real app, the scheduler
process, no agent): push/list/rm with who may do what, uploads that are no image, jobs that wait
for an image (``ImageNotFound``) and are queued once it is pushed, ``--strict-images``, the
runtime a job gets, OpenPAI and MARO images by name, and what an agent may download."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shoal.protocol import image_blob_path
from shoal.server.app import create_app, prepare
from shoal.server.settings import ServerSettings
from shoal.store.db import Database, sqlite_url
from shoal.store.models import Job
from tests.image_archives import (
    docker_archive,
    image_id_of,
    oci_archive,
    sha256_of,
)
from tests.server.test_api import agent_headers, register_node
from tests.server.test_security import bearer, make_user

CONTAINER_JOB = (
    "version: 1\nname: {name}\nruntime: container\nroles:\n  w:\n    image: {image}\n"
    "    resources: {{gpu: {gpu}}}\n    command: echo hi\n"
)
PLAIN_JOB = "version: 1\nname: {name}\nroles:\n  w:\n    image: {image}\n    command: echo hi\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[TestClient, str, Path]]:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home))
    with TestClient(create_app(ctx)) as client:
        yield client, (home / "admin.token").read_text().strip(), home


def until(what: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s}s")


def push(client: TestClient, token: str, name: str, body: bytes) -> Any:
    return client.put(f"/api/v1/images/{name}", content=body, headers=bearer(token))


def submit(client: TestClient, token: str, text: str, **options: object) -> Any:
    return client.post("/api/v1/jobs", json={"spec": text, **options}, headers=bearer(token))


def job(client: TestClient, token: str, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/api/v1/jobs/{job_id}", headers=bearer(token)).json())


def stored_runtime(home: Path, job_id: str) -> str | None:
    db = Database(sqlite_url(home))  # the home's store (tests/server/conftest.py)
    try:
        with db.read() as session:
            spec = session.scalar(select(Job.spec).where(Job.id == job_id))
    finally:
        db.dispose()
    assert spec is not None
    runtime = spec.get("runtime")
    return None if runtime is None else str(runtime)


# ---- push, list, remove ----


def test_push_list_and_remove_with_who_may_do_what(server: tuple[TestClient, str, Path]) -> None:
    client, admin, home = server
    alice, bob = make_user(client, admin, "alice"), make_user(client, admin, "bob")
    first = docker_archive(salt=b"one")
    pushed = push(client, alice, "localhost/t/app", first)  # no tag: latest
    assert pushed.status_code == 201, pushed.text
    body = pushed.json()
    assert body["name"] == "localhost/t/app:latest" and body["imageId"] == image_id_of(b"one")
    assert body["size"] == len(first) and body["pushedBy"] == "alice"
    assert body["replaced"] is None and body["releasedJobs"] == []
    blob = home / "blobs" / "sha256" / sha256_of(first)
    assert blob.read_bytes() == first
    listed = client.get("/api/v1/images", headers=bearer(bob)).json()  # everyone sees the names
    assert [(i["name"], i["imageId"]) for i in listed] == [
        ("localhost/t/app:latest", image_id_of(b"one"))
    ]
    # another user may neither replace nor remove it
    for refused in (
        push(client, bob, "localhost/t/app:latest", docker_archive(salt=b"bob")),
        client.delete("/api/v1/images/localhost/t/app:latest", headers=bearer(bob)),
    ):
        assert refused.status_code == 403 and refused.json()["code"] == "ForbiddenUserError"
        assert "pushed by alice" in refused.json()["message"]
    # pushing the name again (its pusher) moves it; the old archive goes
    second = oci_archive(salt=b"two")
    moved = push(client, alice, "localhost/t/app:latest", second)
    assert moved.status_code == 201 and moved.json()["replaced"] == image_id_of(b"one")
    assert moved.json()["imageId"] == image_id_of(b"two") and not blob.exists()
    listed = client.get("/api/v1/images", headers=bearer(alice)).json()
    assert [i["imageId"] for i in listed] == [image_id_of(b"two")]
    # bob's own image; an admin removes anyone's
    assert push(client, bob, "bob/tool:1", docker_archive(salt=b"bob")).status_code == 201
    removed = client.delete("/api/v1/images/bob/tool:1", headers=bearer(admin))
    assert removed.status_code == 200 and removed.json() == {"name": "bob/tool:1", "heldJobs": []}
    missing = client.delete("/api/v1/images/bob/tool:1", headers=bearer(bob))
    assert missing.status_code == 404 and missing.json()["code"] == "NoImageError"
    assert client.get("/api/v1/images", headers={"Authorization": ""}).status_code == 401


def test_an_upload_that_is_no_image_or_no_name_stores_nothing(
    server: tuple[TestClient, str, Path],
) -> None:
    client, admin, home = server
    not_an_image = io.BytesIO()
    with tarfile.open(fileobj=not_an_image, mode="w") as archive:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    refused = push(client, admin, "x:1", not_an_image.getvalue())
    assert refused.status_code == 400 and refused.json()["code"] == "NotAnImageArchive"
    assert "neither manifest.json" in refused.json()["message"]
    assert "podman save" in refused.json()["message"]
    bad_name = push(client, admin, "Bad Name", docker_archive())
    assert bad_name.status_code == 400 and bad_name.json()["code"] == "InvalidImageName"
    cut = client.put(
        "/api/v1/images/x:1",
        params={"sha256": "0" * 64},
        content=docker_archive(),
        headers=bearer(admin),
    )
    assert cut.status_code == 400 and cut.json()["code"] == "DigestMismatch"
    assert client.get("/api/v1/images", headers=bearer(admin)).json() == []
    assert not (home / "blobs" / "sha256").exists() or not any(
        (home / "blobs" / "sha256").iterdir()
    )
    assert list((home / "blobs" / "tmp").iterdir()) == []


# ---- jobs that need an image ----


def test_a_job_waits_for_its_image_and_is_placed_once_pushed(
    server: tuple[TestClient, str, Path],
) -> None:
    client, admin, home = server
    register_node(client, home)
    made = submit(client, admin, CONTAINER_JOB.format(name="c", image="team/app:2", gpu=0))
    assert made.status_code == 201, made.text
    held_id = made.json()[0]["id"]
    pending = job(client, admin, held_id)["pending"]
    assert pending["code"] == "ImageNotFound"
    assert "`shoal image push team/app:2`" in pending["message"]
    why = client.get(f"/api/v1/jobs/{held_id}/pending-reason", headers=bearer(admin)).json()
    assert why["code"] == "ImageNotFound" and why["blockers"] == []
    # held out of the queue: a process job submitted after it is placed, it is not
    plain = submit(client, admin, PLAIN_JOB.format(name="p", image="ignored:1")).json()[0]["id"]
    until(lambda: job(client, admin, plain)["state"] == "RUNNING")
    assert job(client, admin, held_id)["state"] == "WAITING"
    assert stored_runtime(home, held_id) == "container"
    assert stored_runtime(home, plain) == "process"  # the server's default, stored
    pushed = push(client, admin, "team/app:2", docker_archive(salt=b"app"))
    assert pushed.json()["releasedJobs"] == [held_id]
    placed = until(lambda: (d := job(client, admin, held_id))["state"] == "RUNNING" and d)
    assert [t["node"] for t in placed["tasks"]] == ["n0"]
    kinds = [
        e["kind"]
        for e in client.get(f"/api/v1/jobs/{held_id}/events", headers=bearer(admin)).json()
    ]
    assert kinds[:3] == ["queued", "image-missing", "image-pushed"] and "placed" in kinds


def test_removing_an_image_holds_the_queued_jobs_that_need_it(
    server: tuple[TestClient, str, Path],
) -> None:
    client, admin, home = server
    register_node(client, home)  # 2 GPUs
    assert push(client, admin, "team/app:3", docker_archive(salt=b"3")).status_code == 201
    hog = submit(
        client,
        admin,
        PLAIN_JOB.format(name="hog", image="x").replace(
            "command", "resources: {gpu: 2}\n    command"
        ),
    )
    hog_id = hog.json()[0]["id"]
    until(lambda: job(client, admin, hog_id)["state"] == "RUNNING")
    queued = submit(client, admin, CONTAINER_JOB.format(name="q", image="team/app:3", gpu=2))
    queued_id = queued.json()[0]["id"]
    until(lambda: (job(client, admin, queued_id)["pending"] or {}).get("code") == "InsufficientGPU")
    removed = client.delete("/api/v1/images/team/app:3", headers=bearer(admin)).json()
    assert removed["heldJobs"] == [queued_id]
    assert job(client, admin, queued_id)["pending"]["code"] == "ImageNotFound"
    again = push(client, admin, "team/app:3", docker_archive(salt=b"3"))
    assert again.json()["releasedJobs"] == [queued_id]
    # back in the queue: the scheduler says why it waits again (it wrote that reason before)
    until(lambda: (job(client, admin, queued_id)["pending"] or {}).get("code") == "InsufficientGPU")


def test_strict_images_refuses_and_stores_nothing(server: tuple[TestClient, str, Path]) -> None:
    client, admin, _home = server
    refused = submit(
        client, admin, CONTAINER_JOB.format(name="s", image="nowhere:1", gpu=0), strict_images=True
    )
    assert refused.status_code == 404, refused.text
    assert refused.json()["code"] == "ImageNotFound"
    assert "`shoal image push nowhere:1`" in refused.json()["message"]
    assert client.get("/api/v1/jobs", headers=bearer(admin)).json() == []
    assert push(client, admin, "nowhere:1", docker_archive()).status_code == 201
    untagged = submit(
        client, admin, CONTAINER_JOB.format(name="s", image="nowhere", gpu=0), strict_images=True
    )
    assert untagged.status_code == 404 and "nowhere:latest" in untagged.json()["message"]
    accepted = submit(
        client, admin, CONTAINER_JOB.format(name="s", image="nowhere:1", gpu=0), strict_images=True
    )
    assert accepted.status_code == 201, accepted.text


def test_an_array_waits_for_its_image_as_a_whole(server: tuple[TestClient, str, Path]) -> None:
    client, admin, home = server
    register_node(client, home)
    made = submit(
        client, admin, CONTAINER_JOB.format(name="arr", image="a/b:1", gpu=0), array="0-3%2"
    )
    parent = made.json()[0]["id"]
    detail = job(client, admin, parent)
    codes = sorted(e["pending"]["code"] for e in detail["elements"])
    assert codes == ["ArrayConcurrencyLimit"] * 2 + ["ImageNotFound"] * 2
    assert push(client, admin, "a/b:1", docker_archive(salt=b"arr")).json()["releasedJobs"] == [
        f"{parent}_0",
        f"{parent}_1",
    ]
    until(lambda: job(client, admin, f"{parent}_0")["state"] == "RUNNING")
    held = job(client, admin, f"{parent}_3")
    assert held["pending"]["code"] == "ArrayConcurrencyLimit"  # the cap still holds it


# ---- the runtime a job gets ----


@pytest.mark.parametrize(
    ("file_says", "flag", "default", "runs"),
    [
        (None, None, "process", "process"),
        (None, None, "container", "container"),
        (None, "container", "process", "container"),
        ("process", "container", "container", "process"),  # the file wins, with a warning
        ("container", None, "process", "container"),
    ],
)
def test_runtime_is_the_files_else_the_submissions_else_the_servers(
    tmp_path: Path, file_says: str | None, flag: str | None, default: str, runs: str
) -> None:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home, default_runtime=default))  # type: ignore[arg-type]
    with TestClient(create_app(ctx)) as client:
        admin = (home / "admin.token").read_text().strip()
        assert push(client, admin, "app:1", docker_archive()).status_code == 201
        text = PLAIN_JOB.format(name="r", image="app:1")
        if file_says is not None:
            text = text.replace("roles:", f"runtime: {file_says}\nroles:")
        made = submit(client, admin, text, **({"runtime": flag} if flag else {}))
        assert made.status_code == 201, made.text
        assert stored_runtime(home, made.json()[0]["id"]) == runs
        warnings = {w["path"]: w["message"] for w in made.json()[0]["warnings"]}
        if file_says is not None and flag is not None and file_says != flag:
            assert (
                warnings["runtime"]
                == f"--runtime {flag} is not used: the job file says runtime: {file_says}"
            )
        if runs == "process":
            assert "image app:1 is not used" in warnings["roles.w.image"]
            assert "--runtime container" in warnings["roles.w.image"]
        else:
            assert "roles.w.image" not in warnings


NATIVE_NO_IMAGE = "version: 1\nname: n\nruntime: container\nroles:\n  w:\n    command: x\n"
PAI_BY_DIGEST = """protocolVersion: 2
name: n
type: job
prerequisites:
  - {name: img, type: dockerimage, uri: 'x@sha256:0'}
taskRoles:
  t:
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 100, gpu: 0}
    commands: [x]
"""


@pytest.mark.parametrize(
    ("text", "path", "said"),
    [
        (NATIVE_NO_IMAGE, "roles.w.image", "role w has no image"),
        (
            NATIVE_NO_IMAGE.replace("    command", "    image: Not An Image\n    command"),
            "roles.w.image",
            "is not an image name",
        ),
        (PAI_BY_DIGEST, "taskRoles.t.dockerImage", "by digest"),
    ],
)
def test_a_container_job_needs_an_image_name_for_every_role(
    server: tuple[TestClient, str, Path], text: str, path: str, said: str
) -> None:
    client, admin, _home = server
    refused = submit(client, admin, text, runtime="container")
    assert refused.status_code == 400, refused.text
    body = refused.json()
    assert body["code"] == "InvalidJobSpec"
    (problem,) = body["problems"]
    assert problem["path"] == path and said in problem["message"]
    assert client.get("/api/v1/jobs", headers=bearer(admin)).json() == []


# ---- what an agent downloads ----


def _launch(client: TestClient, home: Path) -> dict[str, Any]:
    agent = agent_headers(home)
    body = {"agent_id": "a", "nodes": ["n0"], "wait_s": 0.2}
    launch = until(
        lambda: client.post("/api/v1/agent/orders", json=body, headers=agent).json()["launch"]
    )
    (order,) = launch
    return dict(order)


def test_agents_download_the_image_of_a_container_attempt_only(
    server: tuple[TestClient, str, Path],
) -> None:
    client, admin, home = server
    register_node(client, home)
    archive = docker_archive(salt=b"dl")
    assert push(client, admin, "dl/app:1", archive).status_code == 201
    assert push(client, admin, "dl/other:1", docker_archive(salt=b"other")).status_code == 201
    submit(client, admin, CONTAINER_JOB.format(name="c", image="dl/app:1", gpu=0))
    order = _launch(client, home)
    assert order["image"] == {
        "name": "dl/app:1",
        "image_id": image_id_of(b"dl"),
        "blob_sha256": sha256_of(archive),
        "size": len(archive),
    }
    agent = agent_headers(home)
    attempt = order["attempt_id"]
    got = client.get(image_blob_path(attempt, sha256_of(archive)), headers=agent)
    assert got.status_code == 200 and got.content == archive
    other = sha256_of(docker_archive(salt=b"other"))
    for path in (image_blob_path(attempt, other), image_blob_path("999.1", sha256_of(archive))):
        refused = client.get(path, headers=agent)
        assert refused.status_code == 404, path
    user = make_user(client, admin, "alice")
    assert (
        client.get(image_blob_path(attempt, sha256_of(archive)), headers=bearer(user)).status_code
        == 403
    )


def test_a_process_jobs_launch_order_has_no_image(server: tuple[TestClient, str, Path]) -> None:
    client, admin, home = server
    register_node(client, home)
    assert push(client, admin, "app:1", docker_archive()).status_code == 201
    submit(client, admin, PLAIN_JOB.format(name="p", image="app:1"))
    order = _launch(client, home)
    assert order["image"] is None
    refused = client.get(
        image_blob_path(order["attempt_id"], sha256_of(docker_archive())),
        headers=agent_headers(home),
    )
    assert refused.status_code == 404 and refused.json()["code"] == "NoImageError"


PAI_WITH_AUTH = """protocolVersion: 2
name: pai-job
type: job
prerequisites:
  - type: dockerimage
    uri: 'openpai/standard:python_3.6-pytorch_1.2.0-gpu'
    name: img
    auth: {username: me, password: '<% $secrets.pw %>', registryuri: 'https://index.docker.io/v1/'}
secrets: {pw: hunter2}
taskRoles:
  worker:
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 100, gpu: 0}
    commands: [echo hi]
"""
MARO_GRASS = """mode: grass/local
name: maro-job
components:
  actor:
    image: team/maro
    resources: {cpu: 1, memory: 100m, gpu: 0}
    num: 1
    command: echo hi
"""
PAI_V1 = (
    '{"jobName": "v1-job", "image": "team/v1:3", "authFile": "hdfs://auth",'
    ' "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 100,'
    ' "gpuNumber": 0, "command": "echo hi"}]}'
)


@pytest.mark.parametrize(
    ("text", "image", "warned"),
    [
        (PAI_WITH_AUTH, "openpai/standard:python_3.6-pytorch_1.2.0-gpu", "prerequisites[0].auth"),
        (MARO_GRASS, "team/maro:latest", None),
        (PAI_V1, "team/v1:3", "authFile"),
    ],
)
def test_openpai_and_maro_images_resolve_to_pushed_images_by_name(
    server: tuple[TestClient, str, Path], text: str, image: str, warned: str | None
) -> None:
    client, admin, home = server
    register_node(client, home)
    made = submit(client, admin, text, runtime="container")
    assert made.status_code == 201, made.text
    (submitted,) = made.json()
    if warned is not None:  # credentials are accepted, and said to be of no use here
        warning = next(w for w in submitted["warnings"] if w["path"] == warned)
        assert "shoal has no registry" in warning["message"]
        assert f"shoal image push {image}" in warning["hint"]
    assert job(client, admin, submitted["id"])["pending"]["code"] == "ImageNotFound"
    assert image in job(client, admin, submitted["id"])["pending"]["message"]
    released = push(client, admin, image, docker_archive(salt=image.encode()))
    assert released.json()["releasedJobs"] == [submitted["id"]]
    until(lambda: job(client, admin, submitted["id"])["state"] == "RUNNING")


def test_a_job_of_two_missing_images_waits_for_each_in_turn(
    server: tuple[TestClient, str, Path],
) -> None:
    client, admin, home = server
    register_node(client, home)
    text = CONTAINER_JOB.format(name="two", image="two/a:1", gpu=0) + (
        "  v:\n    image: two/b:1\n    command: echo hi\n"
    )
    job_id = submit(client, admin, text).json()[0]["id"]
    assert "image two/a:1 is not" in job(client, admin, job_id)["pending"]["message"]
    first = push(client, admin, "two/a:1", docker_archive(salt=b"two-a"))
    assert first.json()["releasedJobs"] == []  # it needs two/b:1 too
    assert "image two/b:1 is not" in job(client, admin, job_id)["pending"]["message"]
    second = push(client, admin, "two/b:1", docker_archive(salt=b"two-b"))
    assert second.json()["releasedJobs"] == [job_id]
    placed = until(lambda: (d := job(client, admin, job_id))["state"] == "RUNNING" and d)
    assert sorted(t["role"] for t in placed["tasks"]) == ["v", "w"]
