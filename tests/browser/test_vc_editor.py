"""An admin edits virtual clusters on the dashboard: a preview lists what would change and writes
nothing, Save writes it and says so as a success, Cancel closes the editor, and the default VC
has an editor too, whose refusals (its guarantee is fixed) are shown as the server says them."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in

pytestmark = pytest.mark.slow


def _borrow_gpu(api: httpx.Client, vc: str) -> object:
    limit = api.get(f"/api/v1/virtual-clusters/{vc}").json()["borrowLimit"]
    return None if limit is None else limit.get("gpu")


def test_preview_save_and_cancel(open_page: object, admin_token: str, api: httpx.Client) -> None:
    made = api.post("/api/v1/virtual-clusters/team-x", json={"description": "for the test"})
    assert made.status_code == 201, made.text
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(watched.base + "/ui/#/vcs")
    row = page.locator("tr[data-vc=team-x]")
    row.locator("button", has_text="Edit").click()
    editor = page.locator("[data-testid=vc-editor]")
    editor.locator("input[name=borrow_gpu]").fill("1")
    editor.locator("button", has_text="Preview changes").click()
    preview = page.locator("[data-testid=vc-preview]")
    expect(preview).to_contain_text("May borrow GPUs: any → 1")
    expect(page.locator("[role=alert]")).to_have_count(0)
    assert _borrow_gpu(api, "team-x") is None  # a preview writes nothing
    editor.locator("button", has_text="Save").click()
    saved = page.locator("[data-testid=vc-saved]")
    expect(saved).to_contain_text("Saved virtual cluster team-x")
    expect(saved).to_contain_text("May borrow GPUs: any → 1")
    assert saved.get_attribute("data-kind") == "success"
    expect(page.locator("[role=alert]")).to_have_count(0)
    expect(editor).to_have_count(0)  # closed once saved
    assert _borrow_gpu(api, "team-x") == 1
    # Cancel: the editor closes and nothing is sent
    row.locator("button", has_text="Edit").click()
    editor.locator("input[name=borrow_gpu]").fill("2")
    editor.locator("button", has_text="Cancel").click()
    expect(editor).to_have_count(0)
    assert _borrow_gpu(api, "team-x") == 1
    # the idle timeout of interactive jobs (docs/notebooks.md), in minutes
    row.locator("button", has_text="Edit").click()
    editor.locator("input[name=idle_minutes]").fill("90")
    editor.locator("button", has_text="Save").click()
    expect(saved).to_contain_text("Idle timeout of interactive jobs: never → 90 min")
    vc = api.get("/api/v1/virtual-clusters/team-x").json()
    assert vc["idleTimeoutS"] == 5400
    assert api.delete("/api/v1/virtual-clusters/team-x").status_code == 204


def test_the_default_vc_has_an_editor_and_shows_the_servers_refusal(
    open_page: object, admin_token: str, api: httpx.Client
) -> None:
    watched = open_page()
    page = watched.page
    sign_in(watched, admin_token)
    page.goto(watched.base + "/ui/#/vcs")
    page.locator("tr[data-vc=default] button", has_text="Edit").click()
    editor = page.locator("[data-testid=vc-editor]")
    expect(editor.locator("[data-testid=default-note]")).to_contain_text("fixed")
    # what the API allows for default: its borrowing limits
    editor.locator("input[name=borrow_cpu]").fill("3")
    editor.locator("button", has_text="Preview changes").click()
    expect(page.locator("[data-testid=vc-preview]")).to_contain_text("May borrow CPUs: any → 3")
    # what it refuses: its guarantee, with the server's reason
    editor.locator("input[name=guarantee_cpu]").fill("1")
    editor.locator("button", has_text="Preview changes").click()
    alert = editor.locator("[role=alert]")
    expect(alert).to_contain_text("the default VC's guarantee_cpu cannot change")
    expect(alert).to_contain_text("InvalidParametersError")
    watched.allow(r"400 \(Bad Request\)")  # the refusal this test provokes
    expect(page.locator("[data-testid=vc-preview]")).to_have_count(0)
    editor.locator("button", has_text="Cancel").click()
    expect(editor).to_have_count(0)
    limit = api.get("/api/v1/virtual-clusters/default").json()["borrowLimit"]
    assert not limit or limit.get("cpu") is None  # previews only: nothing was written
