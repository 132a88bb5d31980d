"""axe-core on every main page of the dashboard, signed out and signed in as an admin: no
critical or serious finding (colour contrast, names of fields and of the job file editor, ...)
and an h1 on each page."""

from __future__ import annotations

import base64
import os
import struct

import httpx
import pytest

from tests.browser.axe import axe_file, blocking
from tests.browser.conftest import Watched, sign_in
from tests.browser.helpers import job_file, stop, submit, wait_state

pytestmark = pytest.mark.slow


def _check(watched: Watched, where: str, failures: dict[str, list[str]]) -> None:
    found = blocking(watched.page)
    if found:
        failures[where] = found


def _report(failures: dict[str, list[str]]) -> str:
    lines = "\n".join(f"{where}:\n  " + "\n  ".join(found) for where, found in failures.items())
    return "axe findings:\n" + lines


def _ed25519_line(comment: str) -> str:
    """A well-formed ed25519 public key line (random: no private half exists)."""
    blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + os.urandom(32)
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


def test_every_page_passes_axe(open_page: object, admin_token: str, api: httpx.Client) -> None:
    axe_file()  # skips (no node) or fails (not installed) before anything else
    running = submit(api, job_file("axe-running", 'echo "some output"; sleep 600', gpu=1))
    wait_state(api, running, {"RUNNING"})
    node = api.get(f"/api/v1/jobs/{running}").json()["tasks"][0]["node"]
    waiting = submit(api, job_file("axe-waiting", cpu=4, instances=2))  # behind the running one
    shared = {"users": [], "groups": ["default"]}
    assert api.put(f"/api/v1/jobs/{running}/shares", json=shared).status_code == 200
    key = {"public_key": _ed25519_line("admin@laptop"), "name": None}
    assert api.post("/api/v1/ssh-keys", json=key).status_code == 201
    watched = open_page(bypass_csp=True)
    page = watched.page
    failures: dict[str, list[str]] = {}
    page.goto(watched.base + "/ui/")
    page.wait_for_selector("input[name=token]")
    _check(watched, "sign in", failures)
    sign_in(watched, admin_token)
    pages = {
        "overview": ("#/overview", "[data-testid=cluster-charts]", "[data-testid=overview-vcs]"),
        "jobs": ("#/jobs", "[data-testid=jobs-table]"),
        "job": (
            f"#/jobs/{running}",
            "[data-testid=log-text]:has-text('some output')",
            "[data-testid=job-shares] li[data-share]",
        ),
        "submit": ("#/submit", "[data-testid=plan]"),
        "nodes": ("#/nodes", "[data-testid=nodes-table]"),
        "waiting job": (f"#/jobs/{waiting}", "[data-testid=why-waiting] p"),
        "node": (f"#/nodes/{node}", "[data-testid=node-charts]", "[data-testid=node-tasks]"),
        "virtual clusters": ("#/vcs", "[data-testid=vcs-table]"),
        "ssh keys": ("#/ssh-keys", "[data-testid=ssh-keys-table] [data-testid=fingerprint]"),
        "terminal": (
            f"#/terminal/{running}?task=main/0",
            "[data-testid=terminal-status]:has-text('connected')",
        ),
    }
    for where, (route, *ready) in pages.items():
        page.goto(f"{watched.base}/ui/{route}")
        for selector in ready:
            page.locator(selector).first.wait_for()
        _check(watched, where, failures)
    page.goto(f"{watched.base}/ui/#/jobs")  # leaving the terminal ends its shell
    assert not failures, _report(failures)
    # the VC editor, open
    page.goto(f"{watched.base}/ui/#/vcs")
    page.locator("tr[data-vc=default] button", has_text="Edit").click()
    page.locator("[data-testid=vc-editor]").wait_for()
    _check(watched, "virtual cluster editor", failures)
    _refusals_under_fields(watched, running, failures)
    stop(api, running, waiting)
    assert not failures, _report(failures)


def _refusals_under_fields(watched: Watched, job: str, failures: dict[str, list[str]]) -> None:
    """The SSH key form and a job's sharing control with a refusal shown under their fields."""
    page = watched.page
    watched.allow(r"status of 400")
    watched.allow(r"status of 422")
    page.goto(f"{watched.base}/ui/#/ssh-keys")
    form = page.locator("[data-testid=add-ssh-key]")
    form.locator("textarea").fill("not a key")
    form.locator("button[type=submit]").click()
    form.locator(".field-error").wait_for()
    _check(watched, "ssh keys, a refusal", failures)
    page.goto(f"{watched.base}/ui/#/jobs/{job}")
    control = page.locator("[data-testid=job-shares]")
    control.get_by_label("Share with user").fill("nobody-here")
    control.get_by_role("button", name="Add user").click()
    control.locator(".field-error").wait_for()
    _check(watched, "job's sharing, a refusal", failures)
