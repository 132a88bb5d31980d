"""Browser tests: Debian's chromium, headless, driven by Playwright for Python against a real
local cluster (server and agent processes). No browser is downloaded: the tests use
/usr/bin/chromium (`make system-deps` installs it) and skip, saying why, without it or without
the built dashboard (`make web`).

Every page a test opens is watched: a console error, an uncaught exception or a request to
anything but the cluster's loopback address fails the test (a test names the refusals it
provokes itself), and each test leaves a screenshot in test-artifacts/browser/."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from shoal.local.supervisor import stop_local
from shoal.server.routers.web import DIST
from tests.browser.chromium import CHROMIUM, launch
from tests.integration.conftest import LocalCluster, start_cluster

ARTIFACTS = Path(
    os.environ.get("SHOAL_TEST_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts")
)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if not CHROMIUM.exists():
    pytest.skip("Debian's chromium is not installed (make system-deps)", allow_module_level=True)
if not (DIST / "index.html").exists():
    pytest.skip("the dashboard is not built (make web)", allow_module_level=True)


@pytest.fixture(scope="module")
def ui_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    home = tmp_path_factory.mktemp("browser") / "shoal-home"
    running = start_cluster(home)
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


@pytest.fixture(scope="module")
def admin_token(ui_cluster: LocalCluster) -> str:
    return (ui_cluster.home / "admin.token").read_text().strip()


@pytest.fixture(scope="module")
def api(ui_cluster: LocalCluster, admin_token: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=ui_cluster.info.url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as driver:
        launched = launch(driver)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Watched:
    """A page and what it did that a test may not: console errors, page errors, requests that
    left loopback. ``allow`` takes patterns of console errors a test provokes on purpose."""

    page: object
    base: str
    console: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)

    def allow(self, pattern: str) -> None:
        self.allowed.append(pattern)

    def problems(self) -> list[str]:
        errors = [e for e in self.console if not any(re.search(p, e) for p in self.allowed)]
        return errors + [f"request left loopback: {u}" for u in self.outside]


def _watch(context: object, base: str) -> Watched:
    page = context.new_page()
    watched = Watched(page, base)

    def on_console(message: object) -> None:
        if message.type == "error":
            where = message.location.get("url", "")
            watched.console.append(f"{message.text} at {where}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: watched.console.append(f"uncaught: {error}"))

    def route(route: object, request: object) -> None:
        host = urlparse(request.url).hostname or ""
        if request.url.startswith("data:") or host in LOOPBACK:
            route.continue_()
        else:
            watched.outside.append(request.url)
            route.abort()

    context.route("**/*", route)
    return watched


@pytest.fixture
def open_page(
    browser: object, ui_cluster: LocalCluster, request: pytest.FixtureRequest
) -> Iterator[object]:
    """``open_page()`` gives a new watched page in a fresh browser context (its own cookies: a
    second user). Each is checked and photographed when the test ends. ``bypass_csp=True``
    lets a test inject a script of its own (axe-core) past the page's Content-Security-Policy."""
    contexts: list[object] = []
    pages: list[Watched] = []

    def make(bypass_csp: bool = False) -> Watched:
        context = browser.new_context(
            viewport={"width": 1280, "height": 900}, bypass_csp=bypass_csp
        )
        contexts.append(context)
        watched = _watch(context, ui_cluster.info.url)
        pages.append(watched)
        return watched

    yield make
    folder = ARTIFACTS / "browser"
    folder.mkdir(parents=True, exist_ok=True)
    for number, watched in enumerate(pages):
        suffix = "" if number == 0 else f"-{number + 1}"
        try:
            watched.page.screenshot(
                path=str(folder / f"{request.node.name}{suffix}.png"), full_page=True
            )
        except Exception as exc:  # a closed page: say so, the checks below still run
            (folder / f"{request.node.name}{suffix}.txt").write_text(f"no screenshot: {exc}\n")
    for context in contexts:
        context.close()
    problems = [p for w in pages for p in w.problems()]
    assert not problems, "the page misbehaved:\n" + "\n".join(problems)


def sign_in(watched: Watched, token: str | None = None, user: str = "", password: str = "") -> None:
    page = watched.page
    page.goto(watched.base + "/")
    if token is not None:
        page.fill("input[name=token]", token)
    else:
        page.click("text=User and password")
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=who]")
