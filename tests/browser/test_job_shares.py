"""Sharing a job's ports from its page (docs/proxy.md "Sharing a job's ports", docs/dashboard.md):
its owner adds a user and a group and sees the list change (and the API has it), an unknown user
is refused with the API's reason under the user field and nothing changes, and a share is
removed. The control is the owner's and admins': an admin sees it on another's job."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in
from tests.browser.helpers import job_file, stop, submit, wait_state

pytestmark = pytest.mark.slow


def _user(api: httpx.Client, name: str) -> httpx.Client:
    made = api.post("/api/v1/users", json={"name": name, "password": f"{name}-password-1"})
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['token']}"}
    return httpx.Client(base_url=str(api.base_url), headers=headers, timeout=30)


def _shares(api: httpx.Client, job: str) -> dict[str, list[str]]:
    body = api.get(f"/api/v1/jobs/{job}/shares").json()
    return {"users": body["users"], "groups": body["groups"]}


def test_the_owner_shares_a_job_and_an_unknown_user_is_refused(
    open_page: object, api: httpx.Client, admin_token: str
) -> None:
    olga = _user(api, "olga")
    _user(api, "sam").close()
    job = submit(olga, job_file("shared"))
    try:
        wait_state(api, job, {"RUNNING"})
        watched = open_page()
        page = watched.page
        sign_in(watched, user="olga", password="olga-password-1")
        page.goto(f"{watched.base}/ui/#/jobs/{job}")
        control = page.locator("[data-testid=job-shares]")
        expect(control.locator("h2")).to_have_text("Ports shared with")
        expect(control.locator("[data-testid=shares-none]")).to_be_visible()
        user_field = control.get_by_label("Share with user")
        group_field = control.get_by_label("Share with group")

        # a user, then a group: each appears, and the API has both
        user_field.fill("sam")
        control.get_by_role("button", name="Add user").click()
        expect(control.locator("li[data-share='user:sam']")).to_be_visible()
        expect(user_field).to_have_value("")
        group_field.fill("default")
        control.get_by_role("button", name="Add group").click()
        expect(control.locator("li[data-share='group:default']")).to_be_visible()
        assert _shares(olga, job) == {"users": ["sam"], "groups": ["default"]}

        # an unknown user: the API's 422 under the user field, the list as it was
        watched.allow(r"status of 422")
        user_field.fill("nobody-here")
        control.get_by_role("button", name="Add user").click()
        refusal = control.locator(".field-error[data-field=users]")
        expect(refusal).to_contain_text("no such user: nobody-here")
        expect(refusal).to_contain_text("InvalidParametersError")
        expect(user_field).to_have_attribute("aria-invalid", "true")
        expect(control.locator(".field-error[data-field=groups]")).to_have_count(0)
        expect(control.locator("li[data-share]")).to_have_count(2)
        assert _shares(olga, job) == {"users": ["sam"], "groups": ["default"]}

        # removed: gone from the page and from the API, the refusal cleared
        control.get_by_role("button", name="Remove user sam from the shares").click()
        expect(control.locator("li[data-share='user:sam']")).to_have_count(0)
        expect(refusal).to_have_count(0)
        assert _shares(olga, job) == {"users": [], "groups": ["default"]}

        # an admin sees the control on olga's job, with her list
        admin = open_page()
        sign_in(admin, admin_token)
        admin.page.goto(f"{admin.base}/ui/#/jobs/{job}")
        shown = admin.page.locator("[data-testid=job-shares] li[data-share]")
        expect(shown).to_have_count(1)
        expect(shown).to_have_attribute("data-share", "group:default")
    finally:
        stop(api, job)
        olga.close()


def test_others_do_not_see_the_control(open_page: object, api: httpx.Client) -> None:
    """A job shared with a user gives them its ports only: its page stays refused to them, with
    no sharing control on it."""
    owner = _user(api, "petra")
    _user(api, "quinn").close()
    job = submit(owner, job_file("not-yours"))
    try:
        put = owner.put(f"/api/v1/jobs/{job}/shares", json={"users": ["quinn"], "groups": []})
        assert put.status_code == 200, put.text
        watched = open_page()
        watched.allow(r"status of 403")
        page = watched.page
        sign_in(watched, user="quinn", password="quinn-password-1")
        page.goto(f"{watched.base}/ui/#/jobs/{job}")
        expect(page.locator("[role=alert]")).to_contain_text("ForbiddenUserError")
        expect(page.locator("[data-testid=job-shares]")).to_have_count(0)
    finally:
        stop(api, job)
        owner.close()
