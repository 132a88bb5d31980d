"""What a job's pages say, tried as a user would (issue #25 item 9): the server's warnings on the
Submit page, a plan marked stale while a pasted file is checked, GPU counts told from GPU
indices, whose jobs a waiting job waits for, messages styled by kind, what an exit code means,
an empty log that says it waits for output, and durations that tick while a job runs."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Watched, sign_in
from tests.browser.helpers import job_file, stop, submit, wait_state
from tests.integration.conftest import LocalCluster

pytestmark = pytest.mark.slow

ERROR_BACKGROUND = "rgb(255, 245, 245)"  # .notice.error


def _user(api: httpx.Client, name: str) -> str:
    """A new user, with the password ``NAME-password-1``; their first token."""
    made = api.post("/api/v1/users", json={"name": name, "password": f"{name}-password-1"})
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def _ran(watched: Watched, table: str, row: str) -> str:
    """The "Ran" cell of a row of a table."""
    headers = watched.page.locator(f"{table} thead th").all_inner_texts()
    cell = watched.page.locator(f"{table} {row} td").nth(headers.index("Ran"))
    return str(cell.inner_text())


def _ticks(watched: Watched, table: str, row: str) -> None:
    """The duration in a row advances by itself (no reload, no change on the server)."""
    first = _ran(watched, table, row)
    assert re.fullmatch(r"\d+s|\d+m\d\ds", first), first
    watched.page.wait_for_timeout(2200)
    assert _ran(watched, table, row) != first, f"the duration stayed at {first}"


def _submit_page(watched: Watched, token: str) -> object:
    """The Submit page with its template checked; its Submit button."""
    page = watched.page
    sign_in(watched, token)
    page.goto(watched.base + "/ui/#/submit")
    page.locator("[data-testid=plan]").wait_for()
    button = page.locator("button:text-is('Submit')")
    expect(button).to_be_enabled()
    return button


def test_submit_shows_the_servers_warnings_also_on_the_submitted_jobs_page(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    watched = open_page()
    page = watched.page
    submit_button = _submit_page(watched, admin_token)
    # an OpenPAI job file: its dockerImage is not used (the job runs as processes), and says so
    page.select_option("select[aria-label=Template]", "pai")
    warnings = page.locator("[data-testid=warnings]")
    expect(warnings).to_contain_text("taskRoles.taskrole.dockerImage")
    expect(warnings).to_contain_text("is not used")
    assert warnings.get_attribute("data-kind") == "warning"
    page.locator(".cm-lint-marker-warning").first.wait_for()  # marked at its line too
    expect(page.locator("[data-testid=plan]")).to_contain_text("would start now")
    submit_button.click()
    page.wait_for_url("**/ui/#/jobs/*")
    job = page.url.rsplit("/", 1)[1]
    expect(page.locator("[data-testid=submit-warnings]")).to_contain_text("is not used")
    wait_state(api, job, {"SUCCEEDED", "FAILED"})


def test_a_pasted_files_plan_is_stale_and_submit_waits_until_it_is_checked(
    open_page: object, admin_token: str
) -> None:
    watched = open_page()
    page = watched.page
    submit_button = _submit_page(watched, admin_token)
    validation = page.locator("[data-testid=validation]")
    # the server's answers about the new text are held back until the stale state was seen
    held: list[object] = []

    def hold(route: object) -> None:
        held.append(route)

    page.route("**/api/v1/jobs/check", hold)
    page.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(job_file("pasted-job", "echo pasted"))
    # the template's plan is marked stale and Submit waits, also once the check is asked
    expect(submit_button).to_be_disabled()
    expect(validation).to_have_attribute("data-stale", "true")
    page.locator("[data-testid=checking]").wait_for()
    expect(page.locator("[data-testid=plan]")).to_contain_text("hello-shoal")  # the old one
    page.wait_for_timeout(1000)  # past the half second after the last keystroke: it was asked
    assert held, "the page did not ask the server to check the new text"
    expect(submit_button).to_be_disabled()
    for route in held:
        route.continue_()
    page.unroute("**/api/v1/jobs/check")
    # then the new text's plan, and Submit again
    expect(validation).to_have_attribute("data-stale", "false")
    expect(page.locator("[data-testid=plan]")).to_contain_text("pasted-job")
    expect(submit_button).to_be_enabled()


def test_gpu_count_on_the_jobs_list_and_gpu_indices_on_the_jobs_page(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    job = submit(api, job_file("two-gpus", gpu=2))
    wait_state(api, job, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(watched.base + "/ui/#/jobs")
    table = page.locator("[data-testid=jobs-table]")
    table.wait_for()
    headers = table.locator("thead th").all_inner_texts()
    assert "GPU count" in headers and "GPUs" not in headers, headers
    column = headers.index("GPU count")
    assert table.locator(f"tr[data-job='{job}'] td").nth(column).inner_text() == "2"
    page.goto(f"{watched.base}/ui/#/jobs/{job}")
    tasks = page.locator("[data-testid=tasks-table]")
    tasks.wait_for()
    headers = tasks.locator("thead th").all_inner_texts()
    assert "GPU indices" in headers and "GPUs" not in headers, headers
    assert tasks.locator("[data-testid=gpu-indices]").inner_text() == "0, 1"
    stop(api, job)


def test_running_durations_tick_every_second(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    job = submit(api, job_file("ticking"))
    wait_state(api, job, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(watched.base + "/ui/#/jobs")
    page.locator(f"tr[data-job='{job}']").wait_for()
    _ticks(watched, "[data-testid=jobs-table]", f"tr[data-job='{job}']")
    page.goto(f"{watched.base}/ui/#/jobs/{job}")
    page.locator("[data-testid=tasks-table]").wait_for()
    _ticks(watched, "[data-testid=tasks-table]", "tr[data-task='main/0']")
    stop(api, job)


def test_an_empty_log_says_it_waits_for_output(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    job = submit(api, job_file("silent"))
    wait_state(api, job, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(f"{watched.base}/ui/#/jobs/{job}")
    log = page.locator("[data-testid=log-text]")
    expect(log).to_contain_text("waiting for output on stdout")
    stop(api, job)
    expect(log).to_contain_text("the task wrote nothing to stdout", timeout=15_000)


def test_messages_are_styled_by_kind_and_exit_codes_say_what_they_mean(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    job = submit(api, job_file("to-be-stopped"))
    wait_state(api, job, {"RUNNING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(f"{watched.base}/ui/#/jobs/{job}")
    # stopped by its user: information, not an error; -210 says what it means
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("button:text('Stop')")
    page.locator(".titlebar .badge").filter(has_text="STOPPED").wait_for(timeout=30_000)
    diagnostics = page.locator("[data-testid=diagnostics]")
    expect(diagnostics).to_contain_text("stopped by admin")
    assert diagnostics.get_attribute("data-kind") == "info"
    assert diagnostics.evaluate("e => getComputedStyle(e).backgroundColor") != ERROR_BACKGROUND
    exit_code = page.locator("[data-testid=job-exit]")
    expect(exit_code).to_contain_text("-210")
    expect(exit_code).to_contain_text("stopped on request")
    task_exit = page.locator("[data-testid=tasks-table] .exit")  # the stop's signal, in words
    expect(task_exit).to_contain_text(re.compile(r"killed by signal \d+|stopped on request"))
    # a success is styled as one
    done = submit(api, job_file("says-nothing", "true"))
    wait_state(api, done, {"SUCCEEDED"})
    page.goto(f"{watched.base}/ui/#/jobs/{done}")
    diagnostics.wait_for()
    assert diagnostics.get_attribute("data-kind") == "success"
    assert diagnostics.evaluate("e => getComputedStyle(e).backgroundColor") != ERROR_BACKGROUND
    expect(page.locator("[data-testid=job-exit]")).to_contain_text("success")


def test_why_waiting_names_whose_jobs_are_ahead_and_links_only_what_the_viewer_may_open(
    open_page: object, admin_token: str, api: httpx.Client, ui_cluster: LocalCluster
) -> None:
    token = _user(api, "carol")
    blocker = submit(api, job_file("big-blocker", cpu=4, gpu=1, instances=2))
    wait_state(api, blocker, {"RUNNING"})
    with httpx.Client(
        base_url=ui_cluster.info.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as carol:
        waiting = submit(carol, job_file("carols-job", cpu=4))
    wait_state(api, waiting, {"WAITING"})
    watched = open_page()
    page = watched.page
    sign_in(watched, user="carol", password="carol-password-1")
    page.goto(f"{watched.base}/ui/#/jobs/{waiting}")
    ahead = page.locator(f"[data-testid=blockers] li[data-job='{blocker}']")
    expect(ahead).to_contain_text("admin's job big-blocker")
    expect(ahead).to_contain_text(f"id {blocker}")
    expect(ahead).to_contain_text("holding 2 GPUs")
    assert ahead.locator("a").count() == 0  # carol may not open the admin's job
    admin = open_page()
    sign_in(admin, admin_token)
    admin.page.goto(f"{admin.base}/ui/#/jobs/{waiting}")
    link = admin.page.locator(f"[data-testid=blockers] li[data-job='{blocker}'] a")
    expect(link).to_have_attribute("href", f"#/jobs/{blocker}")
    stop(api, blocker, waiting)
