"""The dashboard in a real browser against a real cluster: sign in and out, submit after fixing a
validation error, watch a job's states change live, logs during and after a run, stop, why a job
waits, and another user's job refused (conftest.py watches the console and the network)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.browser.conftest import Watched, sign_in
from tests.integration.conftest import LocalCluster

pytestmark = pytest.mark.slow

BLOCKER = """\
version: 1
name: blocker
roles:
  hog:
    instances: 2
    resources: {cpu: 4, memory: 256Mi}
    command: sleep 600
"""

BAD_JOB = """\
version: 1
name: from-the-browser
roles:
  main:
    instances: 1
    resources: {cpu: lots, memory: 128Mi}
    command: 'sleep 2; echo "hello from $SHOAL_TASK_ROLE"'
"""


def _submit(api: httpx.Client, spec: str) -> str:
    answer = api.post("/api/v1/jobs", json={"spec": spec})
    assert answer.status_code == 201, answer.text
    return str(answer.json()[0]["id"])


def _state(api: httpx.Client, job: str) -> str:
    return str(api.get(f"/api/v1/jobs/{job}").json()["state"])


def _wait_state(api: httpx.Client, job: str, states: set[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _state(api, job) in states:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job} did not reach {states} in {timeout_s}s")


def _one(name: str) -> str:
    """BLOCKER as a one-task job named ``name``."""
    return BLOCKER.replace("blocker", name).replace("instances: 2", "instances: 1")


def _badge(watched: Watched) -> object:
    return watched.page.locator(".titlebar .badge")


def test_sign_in_shows_who_and_sign_out_ends_the_session(
    open_page: object, admin_token: str
) -> None:
    watched = open_page()
    page = watched.page
    page.goto(watched.base + "/")
    page.fill("input[name=token]", "shoal_wrong")
    page.click("button[type=submit]")
    page.wait_for_selector("[role=alert]")
    assert "token:" in page.inner_text("[role=alert]")
    watched.allow(r"401 \(Unauthorized\)")  # the wrong token, on purpose
    sign_in(watched, admin_token)
    assert page.inner_text("[data-testid=who]") == "admin (admin)"
    page.click("text=Sign out")
    page.wait_for_selector("input[name=token]")
    page.reload()  # the cookie is gone: the page asks to sign in again
    page.wait_for_selector("input[name=token]")


def test_submit_after_fixing_an_error_and_watch_it_wait_run_and_succeed(
    open_page: object, admin_token: str, api: httpx.Client, ui_cluster: LocalCluster
) -> None:
    blocker = _submit(api, BLOCKER)
    _wait_state(api, blocker, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(watched.base + "/ui/#/submit")
    editor = page.locator(".cm-content")
    editor.filter(has_text="version").wait_for()  # the template is in
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(BAD_JOB)
    problems = page.locator("ul.problems")
    problems.wait_for()
    assert "roles.main.resources.cpu" in problems.inner_text()
    assert page.locator(".cm-lint-marker-error").count() >= 1  # marked at its line
    assert page.locator("button:text('Submit')").is_disabled()
    # fix it where the error was shown
    page.locator(".cm-line", has_text="cpu: lots").click()
    page.keyboard.press("End")
    for _ in range(len("lots, memory: 128Mi}")):
        page.keyboard.press("Backspace")
    page.keyboard.insert_text("1, memory: 128Mi}")
    page.locator("[data-testid=plan]").wait_for()
    assert "would wait" in page.inner_text("[data-testid=plan]")
    page.evaluate("window.__notReloaded = true")
    page.click("button:text('Submit')")
    page.wait_for_url("**/ui/#/jobs/*")
    job = page.url.rsplit("/", 1)[1]
    badge = _badge(watched)
    badge.filter(has_text="WAITING").wait_for()
    why = page.locator("[data-testid=why-waiting]")
    why.filter(has_text="position 1 in default's queue").wait_for()
    api.post(f"/api/v1/jobs/{blocker}/stop")
    badge.filter(has_text="RUNNING").wait_for(timeout=30_000)
    badge.filter(has_text="SUCCEEDED").wait_for(timeout=30_000)
    assert page.evaluate("window.__notReloaded") is True  # live updates, no reload
    log = page.locator("[data-testid=log-text]")
    log.filter(has_text="hello from main").wait_for(timeout=15_000)
    assert _state(api, job) == "SUCCEEDED"
    # after the end: the whole log, read again and downloaded
    page.reload()
    page.locator("[data-testid=log-text]").filter(has_text="hello from main").wait_for()
    with page.expect_download() as download:
        page.click("text=Download full log")
    assert "hello from main" in download.value.path().read_text()
    timeline = page.inner_text("[data-testid=timeline]")
    assert "queued" in timeline
    assert "started" in timeline


def test_stop_a_running_job_from_its_page(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    job = _submit(
        api, BLOCKER.replace("blocker", "to-stop").replace("instances: 2", "instances: 1")
    )
    _wait_state(api, job, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(f"{watched.base}/ui/#/jobs/{job}")
    _badge(watched).filter(has_text="RUNNING").wait_for()
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("button:text('Stop')")
    _badge(watched).filter(has_text="STOPPED").wait_for(timeout=30_000)
    assert _state(api, job) == "STOPPED"
    # clone and resubmit: the Submit page starts from the job's own file
    page.click("text=Clone and resubmit")
    page.locator(".cm-content").filter(has_text="name: to-stop").wait_for()
    page.locator("[data-testid=plan]").wait_for()


def test_another_users_job_is_refused(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    made = api.post("/api/v1/users", json={"name": "eve", "password": "eve-password-1"})
    assert made.status_code == 201, made.text
    job = _submit(
        api, BLOCKER.replace("blocker", "admins-job").replace("instances: 2", "instances: 1")
    )
    _wait_state(api, job, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, user="eve", password="eve-password-1")
    assert page.inner_text("[data-testid=who]") == "eve"
    watched.allow(r"403 \(Forbidden\)")  # the refusal this test provokes
    page.goto(f"{watched.base}/ui/#/jobs/{job}")
    alert = page.locator("[role=alert]")
    alert.wait_for()
    assert "ForbiddenUserError" in alert.inner_text()
    assert "belongs to admin" in alert.inner_text()
    page.goto(f"{watched.base}/ui/#/jobs")
    page.locator("[data-testid=jobs-table]").wait_for()
    assert page.locator(f"tr[data-job='{job}']").count() == 0  # not in eve's list either
    api.post(f"/api/v1/jobs/{job}/stop")


def test_a_nodes_load_chart_has_data_points(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    job = _submit(api, _one("busy").replace("sleep 600", "while :; do :; done"))
    _wait_state(api, job, {"RUNNING"})
    node = api.get(f"/api/v1/jobs/{job}").json()["tasks"][0]["node"]
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(f"{watched.base}/ui/#/nodes/{node}")
    chart = page.locator("[data-testid=node-charts] .chart").first
    chart.wait_for()
    points = 0
    for _ in range(60):  # bounded: the page reloads the series every 10 s
        points = int(chart.get_attribute("data-points") or 0)
        if points > 0:
            break
        page.wait_for_timeout(500)
    assert points > 0
    assert page.locator("[data-testid=node-charts] canvas").count() >= 2  # cpu, memory
    page.locator("[data-testid=node-tasks]").filter(has_text="busy").wait_for()
    api.post(f"/api/v1/jobs/{job}/stop")
    page.goto(f"{watched.base}/ui/#/overview")
    page.locator("[data-testid=cluster-charts]").wait_for()
    page.locator("[data-testid=jobs-by-state]").wait_for()


def _terminal_text(watched: Watched) -> str:
    return str(watched.page.locator(".xterm-rows").inner_text())


def test_the_terminal_runs_a_shell_in_the_task(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    job = _submit(api, _one("shell-host").replace("hog:", "learner:"))
    _wait_state(api, job, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(f"{watched.base}/ui/#/jobs/{job}")
    page.click("text=Terminal")
    page.wait_for_url("**/ui/#/terminal/*")
    page.locator("[data-testid=terminal-status]").filter(has_text="connected").wait_for()
    page.locator(".xterm-rows").wait_for()
    page.locator(".xterm").click()
    page.keyboard.type("echo role=$SHOAL_TASK_ROLE\n")
    for _ in range(100):  # bounded: the answer comes back through server and agent
        if "role=learner" in _terminal_text(watched):
            break
        page.wait_for_timeout(100)
    assert "role=learner" in _terminal_text(watched)
    sessions = api.get("/api/v1/exec-sessions", params={"limit": 5}).json()
    assert any(s["job"] == job and s["user"] == "admin" for s in sessions)
    page.goto(f"{watched.base}/ui/#/jobs/{job}")  # leaving the page ends the shell
    api.post(f"/api/v1/jobs/{job}/stop")


def test_another_users_terminal_is_refused(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    if api.get("/api/v1/users").json() and not any(
        u["name"] == "mallory" for u in api.get("/api/v1/users").json()
    ):
        made = api.post("/api/v1/users", json={"name": "mallory", "password": "mallory-pass-1"})
        assert made.status_code == 201, made.text
    job = _submit(api, _one("not-mallorys"))
    _wait_state(api, job, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, user="mallory", password="mallory-pass-1")
    page.goto(f"{watched.base}/ui/#/terminal/{job}?task=hog/0")
    status = page.locator("[data-testid=terminal-status]")
    status.filter(has_text="refused").wait_for()
    assert "ForbiddenUserError" in status.inner_text()
    sessions = api.get("/api/v1/exec-sessions", params={"limit": 50}).json()
    assert not any(s["job"] == job for s in sessions)  # nothing ran, nothing recorded
    api.post(f"/api/v1/jobs/{job}/stop")
