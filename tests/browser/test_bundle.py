"""What the dashboard costs to load: its scripts arrive gzipped (the `.gz` twins `make web`
writes), and the big libraries come only with the pages that use them: the jobs list never
downloads the editor (CodeMirror), the terminal (xterm.js) or the charts (uPlot)."""

from __future__ import annotations

import re

import httpx
import pytest

from shoal.server.routers.web import DIST
from tests.browser.conftest import Watched

pytestmark = pytest.mark.slow

LAZY = re.compile(r"/assets/(editor|terminal|charts|submit|metrics)-[^/]*\.js$")


def _scripts(watched: Watched) -> list[object]:
    """Every script response the page gets from now on."""
    seen: list[object] = []
    watched.page.on(
        "response", lambda r: seen.append(r) if r.url.split("?")[0].endswith(".js") else None
    )
    return seen


def test_the_jobs_list_loads_gzipped_scripts_without_the_editor_terminal_or_charts(
    open_page: object, admin_token: str
) -> None:
    watched = open_page()
    page = watched.page
    scripts = _scripts(watched)
    page.goto(watched.base + "/ui/#/jobs")  # signed out: the sign-in form, then the jobs list
    page.fill("input[name=token]", admin_token)
    page.click("button[type=submit]")
    page.locator("[data-testid=jobs-table]").wait_for()
    page.wait_for_load_state("networkidle")
    assert scripts, "no script was loaded"
    names = [r.url.rsplit("/", 1)[1] for r in scripts]
    lazy = [n for n, r in zip(names, scripts, strict=True) if LAZY.search(r.url)]
    assert not lazy, f"the jobs list loaded {lazy}"
    sent = 0
    for name, response in zip(names, scripts, strict=True):
        headers = response.all_headers()
        assert headers.get("content-encoding") == "gzip", (name, headers)
        assert "accept-encoding" in headers.get("vary", "").lower(), (name, headers)
        transferred = response.request.sizes()["responseBodySize"]
        raw = (DIST / "assets" / name).stat().st_size
        assert transferred < raw / 2, f"{name}: {transferred} bytes sent for {raw}"
        sent += transferred
    assert sent < 60_000, f"the jobs list took {sent} bytes of script"
    # the editor is a chunk of its own, loaded by the page that shows it
    page.goto(watched.base + "/ui/#/submit")
    page.locator(".cm-content").wait_for()
    page.locator("[data-testid=plan]").wait_for()
    assert any(re.search(r"/assets/editor-[^/]*\.js$", r.url) for r in scripts)


def test_assets_are_sent_plain_to_clients_that_do_not_take_gzip(ui_cluster: object) -> None:
    index = (DIST / "index.html").read_text()
    script = re.search(r'src="/ui/(assets/index-[^"]+\.js)"', index)
    assert script, index
    with httpx.Client(base_url=ui_cluster.info.url, timeout=30) as client:
        plain = client.get(f"/ui/{script[1]}", headers={"Accept-Encoding": "identity"})
        refused = client.get(f"/ui/{script[1]}", headers={"Accept-Encoding": "gzip;q=0, br"})
        packed = client.get(f"/ui/{script[1]}", headers={"Accept-Encoding": "gzip, deflate"})
    raw = (DIST / script[1]).read_bytes()
    for answer in (plain, refused):
        assert answer.status_code == 200
        assert "content-encoding" not in answer.headers
        assert answer.headers["vary"] == "Accept-Encoding"
        assert answer.content == raw
    assert packed.headers["content-encoding"] == "gzip"
    assert packed.headers["content-type"].startswith("text/javascript")
    assert packed.content == raw  # httpx unpacks it: the same script
    assert int(packed.headers["content-length"]) < len(raw) / 2
