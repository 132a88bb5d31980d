"""Users' SSH public keys through ``/api/v1/ssh-keys`` (docs/ssh.md), on a real server app: added
with a name, listed, refused when broken or twice, removed; installed in the jobs submitted with
OpenPAI's ssh plugin afterwards."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shoal.server.app import create_app, prepare
from shoal.server.services.snapshot import spec_of
from shoal.server.settings import ServerSettings
from shoal.store.models import Job
from tests.server.openpai.test_ssh_info import SSH_JOB


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home, scheduler="thread"))
    with TestClient(create_app(ctx)) as client:
        client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        client.shoal_context = ctx  # type: ignore[attr-defined]
        yield client


def public_key(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return (tmp_path / f"{name}.pub").read_text()


def test_keys_are_added_listed_refused_and_removed(api: TestClient, tmp_path: Path) -> None:
    key = public_key(tmp_path, "laptop")
    added = api.post("/api/v1/ssh-keys", json={"public_key": key})
    assert added.status_code == 201, added.text
    assert added.json()["name"] == "laptop"  # from the key's comment
    fingerprint = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(tmp_path / "laptop.pub")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    assert added.json()["fingerprint"] == fingerprint  # as ssh-keygen says it
    again = api.post("/api/v1/ssh-keys", json={"public_key": key, "name": "other"})
    assert again.status_code == 409 and "as laptop" in again.json()["message"]
    broken = api.post("/api/v1/ssh-keys", json={"public_key": key.replace("AAAA", "BBBB", 1)})
    assert broken.status_code == 400 and broken.json()["code"] == "InvalidSshKey"
    private = (tmp_path / "laptop").read_text()
    refused = api.post("/api/v1/ssh-keys", json={"public_key": private})
    assert refused.status_code == 400
    (listed,) = api.get("/api/v1/ssh-keys").json()
    assert listed["public_key"] == key.strip()
    assert api.delete("/api/v1/ssh-keys/laptop").status_code == 204
    assert api.get("/api/v1/ssh-keys").json() == []
    gone = api.delete("/api/v1/ssh-keys/laptop")
    assert gone.status_code == 404 and gone.json()["code"] == "NoSshKeyError"


def test_another_users_keys_are_an_admins_business(api: TestClient, tmp_path: Path) -> None:
    made = api.post("/api/v1/users", json={"name": "bob"})
    assert made.status_code == 201, made.text
    bob = {"Authorization": f"Bearer {made.json()['token']}"}
    key = public_key(tmp_path, "bobkey")
    assert api.post("/api/v1/ssh-keys?user=bob", json={"public_key": key}).status_code == 201
    assert [k["name"] for k in api.get("/api/v1/ssh-keys", headers=bob).json()] == ["bobkey"]
    peek = api.get("/api/v1/ssh-keys?user=admin", headers=bob)
    assert peek.status_code == 403 and "only admins" in peek.json()["message"]


def test_a_job_with_the_ssh_plugin_gets_its_users_keys(api: TestClient, tmp_path: Path) -> None:
    key = public_key(tmp_path, "desk")
    assert api.post("/api/v1/ssh-keys", json={"public_key": key}).status_code == 201
    text = SSH_JOB.format(name="keyed", gpu=0)
    answer = api.post("/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml"})
    assert answer.status_code == 202, answer.text
    info = api.get("/api/v1/jobs/admin~keyed/ssh").json()
    assert info["login"] == "admin" and info["jobssh"] is True
    assert info["host_public_key"].startswith("ssh-ed25519 ")
    ctx = api.shoal_context  # type: ignore[attr-defined]
    with ctx.db.read() as session:
        job = session.get(Job, info["job_id"])
        assert job is not None
        spec = spec_of(job)
    assert spec.env["SHOAL_SSH_AUTHORIZED_KEYS"] == key.strip()
    assert spec.env["SHOAL_SSH_HOST_PUBLIC_KEY"] == info["host_public_key"]
    assert sorted(spec.secrets) == ["shoal_ssh_host_key", "shoal_ssh_job_key"]
    assert spec.public_dict()["secrets"] == dict.fromkeys(spec.secrets, "******")
