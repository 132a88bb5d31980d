"""Debian's chromium as the browser tests, the screenshots (scripts/screenshots.py) and the
dashboard benchmark (bench/dashboard.py) launch it: headless, no sandbox (root in CI), nothing
fetched from the network by the browser itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def launch(driver: Playwright) -> Browser:
    return driver.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
