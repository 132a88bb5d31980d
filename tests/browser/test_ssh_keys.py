"""A user's SSH keys on the dashboard (docs/ssh.md, docs/dashboard.md): they paste a `.pub` line
made by ssh-keygen, see the key listed with the fingerprint ssh-keygen gives it, see the API's
refusals (not a key, a bad name, the same key again) under the field they name, and remove the
key after confirming."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="ssh-keygen is not installed"),
]


def _keypair(folder: Path, comment: str) -> tuple[str, str]:
    """A fresh ed25519 key's public line and its SHA256 fingerprint, both from ssh-keygen."""
    key = folder / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
        check=True, timeout=30,
    )  # fmt: skip
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", f"{key}.pub"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout  # fmt: skip
    return (folder / "id_ed25519.pub").read_text().strip(), listed.split()[1]


def _user(api: httpx.Client, name: str) -> httpx.Client:
    made = api.post("/api/v1/users", json={"name": name, "password": f"{name}-password-1"})
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['token']}"}
    return httpx.Client(base_url=str(api.base_url), headers=headers, timeout=30)


def test_add_see_the_fingerprint_and_remove_a_key(
    open_page: object, api: httpx.Client, tmp_path: Path
) -> None:
    line, fingerprint = _keypair(tmp_path, "kim@laptop")
    assert fingerprint.startswith("SHA256:")
    kim = _user(api, "kim")
    try:
        watched = open_page()
        page = watched.page
        sign_in(watched, user="kim", password="kim-password-1")
        page.locator("header nav a", has_text="SSH keys").click()
        expect(page.locator("h1")).to_have_text("SSH keys")
        expect(page.locator("[data-testid=no-ssh-keys]")).to_be_visible()
        form = page.locator("[data-testid=add-ssh-key]")
        key_field = form.get_by_label("Public key (one line of a .pub file)")
        name_field = form.get_by_label("Name (optional: the key's comment if it makes one)")

        # not a public key: refused under the key's field, which is marked invalid
        watched.allow(r"status of 400")
        key_field.fill("-----BEGIN OPENSSH PRIVATE KEY-----")
        form.locator("button[type=submit]").click()
        refusal = form.locator(".field-error[data-field=public_key]")
        expect(refusal).to_contain_text("is not a public key type")
        expect(refusal).to_contain_text("InvalidSshKey")
        expect(key_field).to_have_attribute("aria-invalid", "true")
        expect(form.locator(".field-error[data-field=name]")).to_have_count(0)

        # a name the server refuses: under the name's field
        key_field.fill(line)
        name_field.fill("no spaces allowed")
        form.locator("button[type=submit]").click()
        expect(form.locator(".field-error[data-field=name]")).to_contain_text("is not a key name")
        expect(form.locator(".field-error[data-field=public_key]")).to_have_count(0)

        # added: listed with ssh-keygen's fingerprint, and the API has it
        name_field.fill("laptop")
        form.locator("button[type=submit]").click()
        row = page.locator("[data-testid=ssh-keys-table] tr[data-key=laptop]")
        expect(row.locator("[data-testid=fingerprint]")).to_have_text(fingerprint)
        expect(row).to_contain_text("ssh-ed25519")
        expect(page.locator("[data-testid=ssh-key-news]")).to_contain_text("Added key laptop")
        expect(form.locator(".field-error")).to_have_count(0)
        expect(key_field).to_have_value("")
        listed = kim.get("/api/v1/ssh-keys").json()
        assert [(k["name"], k["fingerprint"]) for k in listed] == [("laptop", fingerprint)]

        # the same key again: the conflict, under the key's field
        watched.allow(r"status of 409")
        key_field.fill(line)
        form.locator("button[type=submit]").click()
        expect(form.locator(".field-error[data-field=public_key]")).to_contain_text(
            "has registered this key already, as laptop"
        )

        # removed only once confirmed: dismissing the dialog keeps it
        page.once("dialog", lambda dialog: dialog.dismiss())
        row.get_by_role("button", name="Remove key laptop").click()
        expect(row).to_have_count(1)
        assert len(kim.get("/api/v1/ssh-keys").json()) == 1
        page.once("dialog", lambda dialog: dialog.accept())
        row.get_by_role("button", name="Remove key laptop").click()
        expect(row).to_have_count(0)
        expect(page.locator("[data-testid=ssh-key-news]")).to_contain_text("Removed key laptop")
        expect(page.locator("[data-testid=no-ssh-keys]")).to_be_visible()
        assert kim.get("/api/v1/ssh-keys").json() == []
    finally:
        kim.close()
