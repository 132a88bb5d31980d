"""``shoal image`` and container jobs that wait for their image, against a real local cluster
(server and agent processes, real ``shoal`` commands through ``--context local``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from shoal.agent.runtimes.container import podman_problem
from shoal.archives import human
from tests.image_archives import docker_archive, image_id_of, oci_archive
from tests.integration.conftest import LocalCluster
from tests.integration.conftest import local_cli as shoal

PODMAN = shutil.which("podman")
BUSYBOX = "localhost/shoal-test/busybox:local"  # made by scripts/containers-setup.sh


def test_push_archives_list_move_and_remove(local: LocalCluster, tmp_path: Path) -> None:
    salt = uuid.uuid4().bytes
    named = tmp_path / "app.tar"
    named.write_bytes(docker_archive(("localhost/shoal-test-cli/app:1",), salt))
    pushed = shoal(local, "image", "push", str(named))
    assert pushed.returncode == 0, pushed.stderr
    size = human(named.stat().st_size)
    assert (
        pushed.stdout
        == f"pushed localhost/shoal-test-cli/app:1: image {image_id_of(salt)[:12]}, {size}\n"
    )
    oci = tmp_path / "oci.tar"
    oci.write_bytes(oci_archive(None, salt + b"2"))
    nameless = shoal(local, "image", "push", str(oci))
    assert nameless.returncode == 1
    assert "gives its image no name: say which with --name NAME:TAG" in nameless.stderr
    renamed = shoal(local, "image", "push", str(oci), "--name", "team/app")
    assert renamed.returncode == 0, renamed.stderr
    assert renamed.stdout.startswith(
        f"pushed team/app:latest: image {image_id_of(salt + b'2')[:12]}"
    )
    moved = shoal(local, "image", "push", str(named), "--name", "team/app:latest")
    assert moved.returncode == 0, moved.stderr
    assert f"(it was image {image_id_of(salt + b'2')[:12]})" in moved.stdout
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    refused = shoal(local, "image", "push", str(text), "--name", "x:1")
    assert refused.returncode == 1 and "not a tar archive" in refused.stderr
    listed = json.loads(shoal(local, "image", "list", "-o", "json").stdout)
    assert [(i["name"], i["imageId"]) for i in listed] == [
        ("localhost/shoal-test-cli/app:1", image_id_of(salt)),
        ("team/app:latest", image_id_of(salt)),  # the name moved to the other image
    ]
    table = shoal(local, "image", "list").stdout.splitlines()
    assert table[0].split() == ["IMAGE", "IMAGE", "ID", "SIZE", "PUSHED", "BY", "PUSHED"]
    assert table[2].split()[:3] == ["team/app:latest", image_id_of(salt)[:12], *size.split()[:1]]
    removed = shoal(local, "image", "rm", "team/app")
    assert removed.returncode == 0 and removed.stdout == "removed image team/app:latest\n"
    again = shoal(local, "image", "rm", "team/app")
    assert again.returncode == 1 and "no image team/app:latest in the cluster" in again.stderr


@pytest.mark.skipif(podman_problem(PODMAN) is not None, reason=str(podman_problem(PODMAN)))
def test_push_from_the_podman_store(local: LocalCluster, tmp_path: Path) -> None:
    assert PODMAN is not None
    image_id = subprocess.run(
        [PODMAN, "image", "inspect", "--format", "{{.Id}}", BUSYBOX],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if not image_id:
        pytest.skip(f"{BUSYBOX} is not in podman's store: run scripts/containers-setup.sh")
    pushed = shoal(local, "image", "push", BUSYBOX)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.startswith(f"pushed {BUSYBOX}: image {image_id[:12]}, ")
    (listed,) = json.loads(shoal(local, "image", "list", "-o", "json").stdout)
    assert (listed["name"], listed["imageId"], listed["pushedBy"]) == (BUSYBOX, image_id, "admin")
    missing = shoal(local, "image", "push", "localhost/shoal-test/no-such-image:1")
    assert missing.returncode == 1
    assert "no image localhost/shoal-test/no-such-image:1 in podman's store" in missing.stderr


def test_a_container_job_waits_for_its_image_then_is_placed(
    local: LocalCluster, tmp_path: Path
) -> None:
    image = f"localhost/shoal-test-cli/wait-{uuid.uuid4().hex[:8]}:1"
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        f"version: 1\nname: c\nroles:\n  w:\n    image: {image}\n    command: echo hi\n"
    )
    strict = shoal(
        local, "job", "submit", str(job_file), "--runtime", "container", "--strict-images"
    )
    assert strict.returncode == 1
    assert (
        f"image {image} is not in the cluster: push it with `shoal image push {image}`"
        in strict.stderr
    )
    assert json.loads(shoal(local, "job", "list", "-o", "json").stdout) == []
    submitted = shoal(local, "job", "submit", str(job_file), "--runtime", "container", "-o", "json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    status = shoal(local, "job", "status", job_id)
    assert f"waiting: ImageNotFound: image {image} is not in the cluster" in status.stdout
    why = shoal(local, "job", "why", job_id)
    assert "ImageNotFound" in why.stdout and f"shoal image push {image}" in why.stdout
    archive = tmp_path / "wait.tar"
    archive.write_bytes(docker_archive((image,), uuid.uuid4().bytes))
    pushed = shoal(local, "image", "push", str(archive))
    assert pushed.returncode == 0, pushed.stderr
    assert f"queued job {job_id} that waited for it" in pushed.stdout
    # placed on a node (whether its container then runs is the runtime's business)
    local.wait_for(lambda: bool(local.client.job(job_id)["tasks"]))
    (task,) = local.client.job(job_id)["tasks"]
    assert task["node"].startswith("node-")
