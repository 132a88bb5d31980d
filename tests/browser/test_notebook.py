"""A notebook from the dashboard, as a user would (docs/notebooks.md): the owner signs in, opens
the running Jupyter task (`shoal job template jupyter`) through the job page's Open link, which
reaches JupyterLab through the task proxy in a new tab with no second token, runs a cell `1+1`
over the kernel's WebSocket and reads `2`; the same address is refused to another signed-in
user and to a browser with no session."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ARTIFACTS, Watched, sign_in
from tests.browser.helpers import stop, submit, wait_state
from tests.envs import is_user_setting

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(importlib.util.find_spec(m) for m in ("jupyterlab", "ipykernel")),
        reason="jupyterlab and ipykernel are not installed (make setup: the dev extra)",
    ),
]

STARTED_MS = 120_000  # JupyterLab's start and first load on a busy 2-core machine


def _user(api: httpx.Client, name: str) -> httpx.Client:
    """A new user with the password ``NAME-password-1``; an API client of theirs."""
    made = api.post("/api/v1/users", json={"name": name, "password": f"{name}-password-1"})
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['token']}"}
    return httpx.Client(base_url=str(api.base_url), headers=headers, timeout=30)


def _jupyter_template() -> str:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    printed = subprocess.run(
        [sys.executable, "-m", "shoal", "job", "template", "jupyter"],
        capture_output=True, text=True, env=env, check=True, timeout=60,
    )  # fmt: skip
    return printed.stdout


def _wait_until_served(user: httpx.Client, url: str) -> None:
    deadline = time.monotonic() + STARTED_MS / 1000
    answer: httpx.Response | None = None
    while time.monotonic() < deadline:
        answer = user.get(url)
        if answer.status_code == 200:
            return
        time.sleep(0.5)
    said = f"{answer.status_code} {answer.text[:300]}" if answer is not None else "nothing"
    raise AssertionError(f"Jupyter did not answer at {url} in time: {said}")


def _run_a_cell(lab: object) -> None:
    """A new Python notebook from JupyterLab's launcher; ``1+1`` run in its first cell."""
    lab.locator(".jp-LauncherCard[data-category=Notebook]").first.click(timeout=STARTED_MS)
    editor = lab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    editor.click(timeout=STARTED_MS)
    editor.type("1+1")
    # the kernel is up when the toolbar's status says so; then run the cell
    lab.locator(".jp-NotebookPanel [data-status=idle]").first.wait_for(timeout=STARTED_MS)
    output = lab.locator(".jp-NotebookPanel .jp-OutputArea-output").first
    prompt = lab.locator(".jp-NotebookPanel .jp-Cell .jp-InputPrompt").first
    for _ in range(3):  # as a user would: JupyterLab may report idle before the kernel is
        editor.click()  # attached to the notebook, and then a run does nothing; run it again
        editor.press("Shift+Enter")
        try:
            expect(prompt).not_to_have_text("[ ]:", timeout=20_000)
            break
        except AssertionError:
            continue
    expect(output).to_have_text("2", timeout=STARTED_MS)


def test_the_owner_opens_jupyter_from_the_job_page_and_runs_a_cell(
    open_page: object, api: httpx.Client, request: pytest.FixtureRequest
) -> None:
    nina = _user(api, "nina")
    job = submit(nina, _jupyter_template())
    try:
        wait_state(api, job, {"RUNNING"}, timeout_s=120)
        watched: Watched = open_page()
        page = watched.page
        sign_in(watched, user="nina", password="nina-password-1")
        page.goto(f"{watched.base}/ui/#/jobs/{job}")
        link = page.locator("[data-task='notebook/0'] [data-testid=open-port][data-label=http]")
        expect(link).to_have_attribute("target", "_blank", timeout=30_000)
        proxy_port = api.get("/api/v1/cluster").json()["proxyPort"]
        address = f"http://127.0.0.1:{proxy_port}/proxy/{job}/notebook/0/http/"
        expect(link).to_have_attribute("href", address)
        _wait_until_served(nina, address + "api/status")  # RUNNING is started, not listening
        with page.context.expect_page() as opened:
            link.click()
        lab = opened.value
        lab.wait_for_load_state()
        try:
            _run_a_cell(lab)
        finally:
            lab.screenshot(path=str(_artifact(f"{request.node.name}-jupyter.png")))
        lab.close()
        _refused(open_page, address, api)
    finally:
        stop(api, job)
        nina.close()


def _refused(open_page: object, address: str, api: httpx.Client) -> None:
    """The same address for a browser with no session (401) and another user's (403)."""
    stranger = open_page()
    stranger.allow("status of 401")
    answer = stranger.page.goto(address)
    assert answer is not None and answer.status == 401
    expect(stranger.page.locator("body")).to_contain_text("sign in to the dashboard")
    other = open_page()
    other.allow("status of 403")
    _user(api, "omar").close()
    sign_in(other, user="omar", password="omar-password-1")
    answer = other.page.goto(address)
    assert answer is not None and answer.status == 403
    expect(other.page.locator("body")).to_contain_text("ForbiddenUserError")


def _artifact(name: str) -> Path:
    folder = ARTIFACTS / "browser"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
