"""The overview's cloud pools (docs/dashboard.md, docs/cloud.md), against a real server started
with `shoal server start --cloud FILE` whose pool is served by the local cloud (`shoal cloud local
serve`: machines are network namespaces on a lab bridge that boot the real bootstrap and join
with their one-time tokens, tests/cloud/localcloud.py):

- a job that nothing fits waits, and its page says what it waits for from the pool ("waiting for
  1 node of pool cpu (launching, N s)"); the overview shows the pool, its machine by phase and
  age; the machine joins, the job runs there and succeeds; the pool's node-hours and cost and the
  VC's pool node-hours and cost are the API's;
- an admin's size above the pool's max is refused with the server's words under the field; a
  size within it is set and shown, and Auto gives the pool back to its file's min and max; a
  user who is not an admin sees no size control and their own jobs' cost only;
- on a server without pools (the usual local cluster) the overview shows nothing about pools,
  asks nothing about them, and shows no error.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from playwright.sync_api import expect

from shoal.local.supervisor import free_port
from tests.browser.axe import axe_file, blocking
from tests.browser.conftest import ARTIFACTS, Watched, sign_in
from tests.browser.helpers import job_file, submit, wait_state
from tests.cloud.localcloud import CloudDaemon, start_cloud
from tests.envs import without_shoal
from tests.multihost.netns import NetnsLab, namespaces_usable

pytestmark = pytest.mark.slow

CATALOG = """\
region: lab
instance_types:
  small: {cpus: 2, memory: 2Gi, price: 36}
zones:
  z1: {small: 3}
boot_delay: 8  # the job's page and the overview see the machine launching
"""
CLOUD = """\
cluster: ui
providers:
  lab: {{type: local, endpoint: "{endpoint}"}}
pools:
  - {{name: cpu, provider: lab, instance_type: small, max: 2, idle_timeout: 10m,
     join_timeout: 2m, install: preinstalled}}
"""
JOIN_S = 90  # boot, bootstrap and agent join of a namespace machine on a busy 2-core machine


@dataclass
class PoolServer:
    url: str
    ca: Path
    admin_token: str
    api: httpx.Client


def _started(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def pool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolServer]:
    """An HTTPS server on the lab's root address (where the machines reach it) with one pool,
    ``cpu`` (0-2 machines of 2 cores at 36 an hour), in the local cloud; no node of its own."""
    reason = namespaces_usable()
    if reason is not None:
        pytest.skip(f"no network namespaces: {reason}")
    root = tmp_path_factory.mktemp("pools")
    lab = NetnsLab.create(0, tag=f"shpp{os.getpid() % 100000}")
    cloud: CloudDaemon | None = None
    server: subprocess.Popen[bytes] | None = None
    api: httpx.Client | None = None
    try:
        cloud = start_cloud(lab, root, CATALOG)
        cloud_file = root / "cloud.yaml"
        cloud_file.write_text(CLOUD.format(endpoint=cloud.endpoint))
        env = without_shoal(os.environ)
        env["SHOAL_AUTOSCALE_S"] = "1"
        home, host, port = root / "server", lab.root_address, free_port(lab.root_address)
        shoal = [sys.executable, "-m", "shoal", "server"]
        init = subprocess.run(
            [*shoal, "init", "--home", str(home), "--host", host],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert init.returncode == 0, init.stderr
        server = _started(
            [*shoal, "start", "--home", str(home), "--host", host, "--port", str(port),
             "--cloud", str(cloud_file), "--kill-grace", "1"],
            root / "server.log", env,
        )  # fmt: skip
        token = (home / "admin.token").read_text().strip()
        ca = home / "pki" / "ca.crt"
        url = f"https://{host}:{port}"
        headers = {"Authorization": f"Bearer {token}"}
        trust = ssl.create_default_context(cafile=str(ca))
        api = httpx.Client(base_url=url, headers=headers, verify=trust, timeout=30)
        _until(lambda: _answers(api, server), 60, "the server's pools")
        yield PoolServer(url, ca, token, api)
    finally:
        if api is not None:
            api.close()
        if server is not None:
            _stop(server)
        if cloud is not None:
            cloud.close()  # --cleanup-on-exit: every machine terminated, its namespace gone
        lab.destroy()


def _answers(api: httpx.Client, server: subprocess.Popen[bytes]) -> bool:
    assert server.poll() is None, "the server exited (see server.log)"
    try:
        return api.get("/api/v1/pools").status_code == 200
    except httpx.TransportError:
        return False


def _until(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.2)


def _page(
    browser: object, server: PoolServer, pages: list[Watched], bypass_csp: bool = False
) -> Watched:
    """A watched page as conftest's, for this server's HTTPS address on the lab bridge (its
    certificate is of the cluster's own CA, which the browser does not know)."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, ignore_https_errors=True, bypass_csp=bypass_csp
    )
    page = context.new_page()
    watched = Watched(page, server.url)
    host = urlparse(server.url).hostname

    def on_console(message: object) -> None:
        if message.type == "error":
            watched.console.append(f"{message.text} at {message.location.get('url', '')}")

    def route(route: object, request: object) -> None:
        if request.url.startswith("data:") or urlparse(request.url).hostname == host:
            route.continue_()
        else:
            watched.outside.append(request.url)
            route.abort()

    page.on("console", on_console)
    page.on("pageerror", lambda error: watched.console.append(f"uncaught: {error}"))
    context.route("**/*", route)
    pages.append(watched)
    return watched


@pytest.fixture
def pool_pages(
    browser: object, pool_server: PoolServer, request: pytest.FixtureRequest
) -> Iterator[object]:
    pages: list[Watched] = []
    yield lambda bypass_csp=False: _page(browser, pool_server, pages, bypass_csp)
    folder = ARTIFACTS / "browser"
    folder.mkdir(parents=True, exist_ok=True)
    for number, watched in enumerate(pages):
        suffix = "" if number == 0 else f"-{number + 1}"
        watched.page.screenshot(
            path=str(folder / f"{request.node.name}{suffix}.png"), full_page=True
        )
        watched.page.context.close()
    problems = [p for w in pages for p in w.problems()]
    assert not problems, "the page misbehaved:\n" + "\n".join(problems)


def _amount(value: float) -> str:
    return "<0.01" if 0 < value < 0.005 else f"{value:.2f}"


def _pool(server: PoolServer) -> dict[str, object]:
    (pool,) = server.api.get("/api/v1/pools").json()
    return dict(pool)


def test_a_waiting_job_grows_the_pool_and_the_overview_shows_machines_and_cost(
    pool_pages: object, pool_server: PoolServer
) -> None:
    watched = pool_pages()
    page = watched.page
    sign_in(watched, pool_server.admin_token)
    pools = page.locator("[data-testid=cloud-pools]")
    row = pools.locator("tr[data-pool=cpu]")
    expect(row.locator("[data-testid=pool-price]")).to_have_text("36")
    expect(row.locator("[data-testid=pool-target]")).to_have_text("auto")
    expect(row.locator("[data-testid=pool-phases]")).to_have_text("none")

    job = submit(pool_server.api, job_file("on-cloud", command="sleep 3", cpu=1))
    page.goto(f"{pool_server.url}/ui/#/jobs/{job}")
    said = page.locator("[data-testid=why-pools] li").first
    expect(said).to_have_text(
        re.compile(r"waiting for 1 node of pool cpu \((to be launched|launching, \d+ s)\)"),
        timeout=10_000,  # the reason is asked again every 5 s while the job waits
    )
    lines = pool_server.api.get(f"/api/v1/jobs/{job}/pending-reason").json()["pools"]
    assert any(line.startswith("waiting for 1 node of pool cpu") for line in lines), lines

    page.goto(f"{pool_server.url}/ui/#/overview")
    machine = pools.locator("[data-testid=pool-machines] tbody tr").first
    expect(machine).to_have_attribute("data-phase", re.compile("launching|joined"), timeout=15_000)
    expect(machine.locator("[data-testid=machine-age]")).to_have_text(
        re.compile(r"^\d+s$|^\d+m\d\ds$")
    )
    expect(row.locator("[data-testid=pool-size]")).to_have_text("1")

    wait_state(pool_server.api, job, {"SUCCEEDED"}, timeout_s=JOIN_S)
    expect(machine).to_have_attribute("data-phase", "joined", timeout=10_000)
    expect(row.locator("[data-testid=pool-phases]")).to_have_text("1 joined")
    node = machine.get_attribute("data-node")
    expect(machine.locator(f"a[href='#/nodes/{node}']")).to_be_visible()

    usage = pool_server.api.get("/api/v1/usage", params={"by": "vc"}).json()
    (default,) = [r for r in usage["rows"] if r["key"] == "default"]
    assert default["poolCost"] > 0 and default["poolNodeHours"] > 0, default  # it ran there
    vc_row = pools.locator("[data-testid=pool-cost-by-vc] tr[data-vc=default]")
    expect(vc_row.locator("[data-testid=vc-pool-cost]")).to_have_text(_amount(default["poolCost"]))
    expect(vc_row.locator("[data-testid=vc-pool-node-hours]")).to_have_text(
        _amount(default["poolNodeHours"])
    )
    shown = float(row.locator("[data-testid=pool-cost]").inner_text())
    assert 0 < shown <= _pool(pool_server)["cost"] + 0.01  # it grows by the second: 36 an hour


def test_admins_set_a_pools_size_and_are_told_when_it_is_refused(
    pool_pages: object, pool_server: PoolServer
) -> None:
    axe_file()  # skips (no node) or fails (not installed) before anything else
    watched = pool_pages(bypass_csp=True)  # axe-core is injected
    page = watched.page
    watched.allow(r"status of 400")  # the size above the max, on purpose
    sign_in(watched, pool_server.admin_token)
    row = page.locator("[data-testid=cloud-pools] tr[data-pool=cpu]")
    size = row.get_by_label("Size of pool cpu")
    size.fill("5")
    row.get_by_role("button", name="Set").click()
    refusal = row.locator(".field-error[data-field=target]")
    expect(refusal).to_contain_text("target 5 is above pool cpu's max of 2")
    expect(refusal).to_contain_text("TargetAboveMax")
    expect(size).to_have_attribute("aria-invalid", "true")
    found = blocking(page)  # the pools and the refusal under the field
    assert not found, "axe findings:\n" + "\n".join(found)
    assert _pool(pool_server)["target"] is None  # nothing written

    size.fill("2")
    row.get_by_role("button", name="Set").click()
    expect(row.locator("[data-testid=pool-target]")).to_have_text("2")
    expect(refusal).to_have_count(0)
    assert _pool(pool_server)["target"] == 2
    expect(row.locator("[data-testid=pool-size]")).to_have_text("2", timeout=30_000)
    machines = page.locator("[data-testid=pool-machines] tbody tr")
    expect(machines).to_have_count(2)  # launched for the size asked, with no job waiting
    found = blocking(page)  # now with the machines' table
    assert not found, "axe findings:\n" + "\n".join(found)

    row.get_by_role("button", name="Auto").click()
    expect(row.locator("[data-testid=pool-target]")).to_have_text("auto")
    assert _pool(pool_server)["target"] is None


def test_a_user_sees_the_pools_without_the_size_control_and_only_their_own_cost(
    pool_pages: object, pool_server: PoolServer
) -> None:
    made = pool_server.api.post("/api/v1/users", json={"name": "dora"})
    assert made.status_code == 201, made.text
    watched = pool_pages()
    page = watched.page
    sign_in(watched, made.json()["token"])
    pools = page.locator("[data-testid=cloud-pools]")
    expect(pools.locator("tr[data-pool=cpu]")).to_be_visible()
    expect(pools.locator("th", has_text="Set size")).to_have_count(0)
    expect(pools.get_by_label("Size of pool cpu")).to_have_count(0)
    expect(pools).to_contain_text("your own jobs only")
    expect(pools.locator("[data-testid=pool-cost-by-vc] tbody tr")).to_have_count(0)  # no jobs


def test_a_server_without_pools_shows_nothing_about_them(
    open_page: object, admin_token: str
) -> None:
    watched = open_page()
    page = watched.page
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/pools" in r.url else None)
    sign_in(watched, admin_token)
    expect(page.locator("[data-testid=overview-vcs]")).to_be_visible()
    page.wait_for_timeout(1500)  # the overview's first answers are in
    expect(page.locator("[data-testid=cloud-pools]")).to_have_count(0)
    expect(page.get_by_text("Cloud pools")).to_have_count(0)
    expect(page.locator("[role=alert]")).to_have_count(0)
    assert not asked, asked
