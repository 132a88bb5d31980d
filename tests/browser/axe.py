"""axe-core, the accessibility checker, run inside a page. It comes from npm, pinned in
web/package.json (a devDependency that `make web`'s `npm ci` installs), and is injected from that
file on disk: nothing is fetched at test time. Without node or npm the dashboard is not built and
the browser tests skip; with them, a missing axe-core is a failure that says to run `make web`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

AXE = Path(__file__).resolve().parents[2] / "web" / "node_modules" / "axe-core" / "axe.min.js"
# What a page may not have: any finding this bad, and no page without its h1.
BLOCKING = {"critical", "serious"}
ALSO_REQUIRED = {"page-has-heading-one"}


def axe_file() -> Path:
    if AXE.is_file():
        return AXE
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node or npm is missing: axe-core (web/package.json) is not installed")
    pytest.fail(f"axe-core is not installed at {AXE}: run `make web` (npm ci in web/)")


def findings(page: Any) -> list[dict[str, Any]]:
    """axe's violations on the page as it is now: id, impact, help and the offending nodes."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(axe_file()))
    result = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ["violations"]});
            return r.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => n.target.join(" ") + " :: " + n.failureSummary),
            }));
        }"""
    )
    return list(result)


def blocking(page: Any) -> list[str]:
    """The findings that fail a page, one line each (empty when it passes)."""
    return [
        f"{f['impact']} {f['id']}: {f['help']}\n    " + "\n    ".join(f["nodes"][:5])
        for f in findings(page)
        if f["impact"] in BLOCKING or f["id"] in ALSO_REQUIRED
    ]
