"""The agent's image store with the real podman: a pushed archive downloaded (checked against
its sha256), loaded once however many tasks ask, checked to be the image the server named, and
the least recently used images shoal loaded evicted past the size limit, never one in use nor
one shoal did not load. Each test makes images of its own (a salt of its own: an ID nobody else
has) and removes them, and the containers it made, by ID."""

from __future__ import annotations

import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shoal.agent import images as images_module
from shoal.agent.images import ImageError, ImageStore
from shoal.agent.runtimes.container import podman_problem
from shoal.protocol import ImageRef, LaunchOrder, image_blob_path
from tests.image_archives import docker_archive, image_id_of, oci_archive, sha256_of

PODMAN = shutil.which("podman")
PODMAN_PROBLEM = podman_problem(PODMAN)
needs_podman = pytest.mark.skipif(PODMAN_PROBLEM is not None, reason=str(PODMAN_PROBLEM))


class Server:
    """What the agent's download reaches: archives by their image path; counts each call."""

    def __init__(self) -> None:
        self.archives: dict[str, bytes] = {}
        self.calls: list[str] = []

    def download(self, path: str, sink: Callable[[bytes], None]) -> None:
        self.calls.append(path)
        body = self.archives.get(path)
        if body is None:
            raise RuntimeError(f"the server answered 404: {path}")
        for start in range(0, len(body), 4096):
            sink(body[start : start + 4096])


def podman(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PODMAN is not None
    return subprocess.run(
        [PODMAN, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def exists(image_id: str, cwd: Path) -> bool:
    return podman("image", "exists", image_id, cwd=cwd).returncode == 0


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """A scratch directory for podman's calls, and the images and containers to remove."""
    made_images: list[str] = []
    made_containers: list[str] = []
    work = tmp_path / "podman"
    work.mkdir()
    yield work, made_images, made_containers
    for container in made_containers:
        podman("rm", "--force", container, cwd=work)
    for image_id in made_images:
        podman("rmi", "--force", image_id, cwd=work)


def pushed(
    server: Server, archive: bytes, image_id: str, name: str, attempt: str = "7.1"
) -> LaunchOrder:
    """The launch order of a container task whose image the server has as ``archive``."""
    ref = ImageRef(name=name, image_id=image_id, blob_sha256=sha256_of(archive), size=len(archive))
    server.archives[image_blob_path(attempt, ref.blob_sha256)] = archive
    return LaunchOrder(
        attempt_id=attempt,
        job_id=attempt.split(".", maxsplit=1)[0],
        role="main",
        index=0,
        node="n0",
        command="true",
        env={},
        hostfile="",
        has_code=False,
        kill_grace_s=1.0,
        epoch=0,
        runtime="container",
        image=ref,
    )


def salted(tag: str) -> tuple[bytes, str]:
    salt = f"{tag}-{uuid.uuid4()}".encode()
    return salt, image_id_of(salt)


@needs_podman
def test_a_pushed_archive_is_downloaded_and_loaded_once(
    tmp_path: Path, scratch: tuple[Path, list[str], list[str]]
) -> None:
    work, made, _ = scratch
    server = Server()
    store = ImageStore(tmp_path / "agent", server.download)
    salt, image_id = salted("once")
    made.append(image_id)
    order = pushed(
        server, docker_archive(("localhost/shoal-test-images/once:1",), salt), image_id, "once:1"
    )
    assert not exists(image_id, work)
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(store.ensure(order))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == [image_id] * 3
    assert exists(image_id, work)
    assert store.loads == 1 and len(server.calls) == 1  # three tasks, one download, one load
    assert store.ensure(order) == image_id and len(server.calls) == 1
    assert store.loaded()[image_id]["name"] == "once:1"
    assert list((tmp_path / "agent" / "images" / "tmp").iterdir()) == []  # the archive went
    # an oci-archive loads the same way
    salt, oci_id = salted("oci")
    made.append(oci_id)
    oci = pushed(
        server, oci_archive("localhost/shoal-test-images/oci:1", salt), oci_id, "oci:1", "8.1"
    )
    assert store.ensure(oci) == oci_id and exists(oci_id, work)


@needs_podman
def test_a_load_that_gives_another_image_or_a_bad_download_is_an_error(
    tmp_path: Path, scratch: tuple[Path, list[str], list[str]]
) -> None:
    _, made, _ = scratch
    server = Server()
    store = ImageStore(tmp_path / "agent", server.download)
    claimed_salt, claimed = salted("claimed")
    real_salt, real = salted("real")
    made += [claimed, real]
    order = pushed(server, docker_archive((), real_salt), claimed, "liar:1")
    with pytest.raises(ImageError, match=f"did not give image {claimed[:12]}"):
        store.ensure(order)
    assert store.loaded() == {}
    archive = docker_archive((), claimed_salt)
    cut = pushed(server, archive, claimed, "cut:1", "9.1")
    server.archives[image_blob_path("9.1", sha256_of(archive))] = archive[:-512]  # cut short
    with pytest.raises(ImageError, match="could not be fetched: the download's sha256 is"):
        store.ensure(cut)
    assert not exists(claimed, tmp_path) and store.loads == 0


@needs_podman
def test_least_recently_used_images_are_evicted_but_not_in_use_nor_foreign(
    tmp_path: Path, scratch: tuple[Path, list[str], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    work, made, containers = scratch
    monkeypatch.setattr(images_module, "PIN_S", 0.0)  # no task is about to start here
    server = Server()
    orders = {}
    for i, tag in enumerate(("a", "b", "c", "d", "foreign")):
        salt, image_id = salted(tag)
        made.append(image_id)
        archive = docker_archive((f"localhost/shoal-test-images/{tag}:1",), salt)
        orders[tag] = pushed(server, archive, image_id, f"{tag}:1", f"{i + 1}.1")
    size = orders["a"].image.size  # type: ignore[union-attr]
    # an image podman had before shoal looked: used, never recorded, never evicted
    foreign = tmp_path / "foreign.tar"
    foreign.write_bytes(next(body for path, body in server.archives.items() if "/5.1/" in path))
    assert podman("load", "--input", str(foreign), cwd=work).returncode == 0
    store = ImageStore(tmp_path / "agent", server.download, limit_bytes=2 * size + size // 2)
    ids = {tag: order.image.image_id for tag, order in orders.items()}  # type: ignore[union-attr]
    assert store.ensure(orders["foreign"]) == ids["foreign"] and store.loaded() == {}
    store.ensure(orders["a"])
    store.ensure(orders["b"])
    store.ensure(orders["c"])  # three of them: the least recently used (a) goes
    assert not exists(ids["a"], work) and exists(ids["b"], work) and exists(ids["c"], work)
    assert sorted(store.loaded()) == sorted([ids["b"], ids["c"]])
    # b is the oldest now, but a container was made from it: c goes instead
    created = podman("create", ids["b"], "/salt", cwd=work)
    assert created.returncode == 0, created.stderr
    containers.append(created.stdout.strip())
    store.ensure(orders["d"])
    assert exists(ids["b"], work) and not exists(ids["c"], work) and exists(ids["d"], work)
    assert exists(ids["foreign"], work)


def test_without_podman_the_store_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    server = Server()
    store = ImageStore(tmp_path / "agent", server.download)
    problem = store.available()
    assert problem is not None and problem.startswith("podman is not installed")
    assert "scripts/containers-setup.sh (make containers)" in problem
    salt, image_id = salted("none")
    with pytest.raises(ImageError, match="podman is not installed"):
        store.ensure(pushed(server, docker_archive((), salt), image_id, "none:1"))
    assert server.calls == []
