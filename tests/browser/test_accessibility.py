"""axe-core on every main page of the dashboard, signed out and signed in as an admin: no
critical or serious finding (colour contrast, names of fields and of the job file editor, ...)
and an h1 on each page."""

from __future__ import annotations

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


def test_every_page_passes_axe(open_page: object, admin_token: str, api: httpx.Client) -> None:
    axe_file()  # skips (no node) or fails (not installed) before anything else
    running = submit(api, job_file("axe-running", 'echo "some output"; sleep 600', gpu=1))
    wait_state(api, running, {"RUNNING"})
    node = api.get(f"/api/v1/jobs/{running}").json()["tasks"][0]["node"]
    waiting = submit(api, job_file("axe-waiting", cpu=4, instances=2))  # behind the running one
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
        "job": (f"#/jobs/{running}", "[data-testid=log-text]:has-text('some output')"),
        "submit": ("#/submit", "[data-testid=plan]"),
        "nodes": ("#/nodes", "[data-testid=nodes-table]"),
        "waiting job": (f"#/jobs/{waiting}", "[data-testid=why-waiting] p"),
        "node": (f"#/nodes/{node}", "[data-testid=node-charts]", "[data-testid=node-tasks]"),
        "virtual clusters": ("#/vcs", "[data-testid=vcs-table]"),
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
    stop(api, running, waiting)
    assert not failures, _report(failures)
