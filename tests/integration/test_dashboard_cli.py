"""`shoal ui` names the dashboard of the CLI's server, which that server serves."""

from __future__ import annotations

import httpx

from tests.integration.conftest import LocalCluster, local_cli


def test_shoal_ui_prints_the_address_the_server_serves(local: LocalCluster) -> None:
    done = local_cli(local, "ui")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first == f"dashboard: {local.info.url}/ui/"
    assert "admin.token" in done.stdout
    page = httpx.get(first.split(" ", 1)[1])
    assert page.status_code in (200, 503)  # 503: not built, and the page says `make web`
    assert "shoal" in page.text
