"""Secrets stay secret (issue 15, item 7): tokens, passwords and `secrets:` values of jobs never
appear in what shoal writes under $SHOAL_HOME (its logs, the tasks' directories), in API output,
events or error messages, and tokens and passwords are not in the store either (hashes only).

One real local cluster: users sign in and fail to, tokens are made and used, jobs with secrets
run, fail validation and are stopped; then every answer collected and every file shoal wrote is
searched for every secret."""

from __future__ import annotations

import hashlib
import secrets as random_secrets
from pathlib import Path

import httpx

from tests.integration.conftest import LocalCluster
from tests.integration.test_admin_cli import ok, shoal
from tests.integration.test_local_mode import native

# files that hold a secret on purpose: the token files `shoal up` writes (mode 0600), the cluster's
# private keys, and the store, which keeps a job's file (with its secrets) to launch it
KEPT_ON_PURPOSE = ("admin.token", "agent.token", ".key")


def _files(home: Path) -> list[Path]:
    return [
        p
        for p in home.rglob("*")
        if p.is_file()
        and not p.name.endswith(KEPT_ON_PURPOSE)
        and not p.name.startswith("shoal.db")
    ]


def test_no_token_password_or_job_secret_leaks_anywhere(local: LocalCluster) -> None:
    cluster, home = local, local.home
    secret = f"S3CRET-{random_secrets.token_hex(8)}"
    password = f"pw-{random_secrets.token_hex(8)}"
    wrong_password = f"wrong-{random_secrets.token_hex(8)}"
    api = httpx.Client(base_url=cluster.info.url, timeout=30)
    admin = {"Authorization": f"Bearer {(home / 'admin.token').read_text().strip()}"}
    answers: list[str] = []

    def call(method: str, path: str, reveals: bool = False, **kwargs: object) -> httpx.Response:
        """``reveals``: the one answer that shows a new token, by design (never again)."""
        response = api.request(method, path, **kwargs)  # type: ignore[arg-type]
        if not reveals:
            answers.append(
                f"{method} {path} {response.status_code} {response.headers} {response.text}"
            )
        return response

    made = call(
        "POST", "/api/v1/users", True, json={"name": "gina", "password": password}, headers=admin
    )
    gina_token = made.json()["token"]
    gina = {"Authorization": f"Bearer {gina_token}"}
    login = call(
        "POST", "/api/v2/authn/basic/login", True, data={"username": "gina", "password": password}
    )
    login_token = login.json()["token"]
    call("POST", "/api/v2/authn/basic/login", data={"username": "gina", "password": wrong_password})
    minted = call("POST", "/api/v1/tokens", True, json={"label": "ci"}, headers=gina).json()[
        "token"
    ]

    with_secret = native(
        "keeps-a-secret",
        'main:\n  command: printf %s "{{ secrets.apikey }}" | sha256sum\n',
        extra=f"secrets:\n  apikey: {secret}\n",
    )
    job = call("POST", "/api/v1/jobs", json={"spec": with_secret}, headers=gina).json()[0]["id"]
    bad = native("bad", "main:\n  command: echo {{ secrets.apikey }}\n  instances: lots\n",
                 extra=f"secrets:\n  apikey: {secret}\n")  # fmt: skip
    assert call("POST", "/api/v1/jobs", json={"spec": bad}, headers=gina).status_code == 400
    checked = call("POST", "/api/v1/jobs/check", json={"spec": bad}, headers=gina)
    assert checked.status_code == 200
    assert cluster.wait(job)["state"] == "SUCCEEDED"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert digest in cluster.log(job, "main"), "the task did not get the secret"
    for path in (
        f"/api/v1/jobs/{job}",
        f"/api/v1/jobs/{job}/events",
        f"/api/v1/jobs/{job}/source",
        f"/api/v1/jobs/{job}/logs",
        "/api/v1/jobs",
        "/api/v2/jobs/gina~keeps-a-secret",
        "/api/v2/jobs/gina~keeps-a-secret/config",
        "/api/v1/tokens",
        "/api/v2/tokens",
    ):
        call("GET", path, headers=gina)
    call("GET", "/api/v1/audit", headers=admin)
    call("GET", "/api/v1/jobs", headers={"Authorization": f"Bearer {minted}x"})  # a wrong token
    answers.append(ok(shoal(home, "job", "describe", job, token=gina_token)))
    answers.append(ok(shoal(home, "admin", "audit", "-o", "json")))
    table = ok(shoal(home, "admin", "audit", "--user", "gina", "--since", "1h"))
    assert "login" in table and "refused" in table, table
    refused = shoal(home, "admin", "audit", token=gina_token)
    assert refused.returncode != 0 and "only admins" in refused.stderr, refused
    answers.append(table + refused.stderr)
    api.close()

    tokens = (gina_token, login_token, minted)
    leaks = [
        f"{value[:6]}... in {answer[:60]}"
        for answer in answers
        for value in (secret, password, wrong_password, *tokens)
        if value in answer
    ]
    assert leaks == []
    written = _files(home)
    assert len(written) > 5, written
    for path in written:
        data = path.read_bytes()
        for value in (secret, password, wrong_password, *tokens):
            assert value.encode() not in data, f"{value[:6]}... is in {path}"
    store = b"".join(p.read_bytes() for p in home.glob("shoal.db*"))
    for value in (password, wrong_password, *tokens):
        assert value.encode() not in store, f"{value[:6]}... is in the store"
