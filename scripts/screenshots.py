"""Regenerate the dashboard's screenshots in docs/img/ (`make screenshots`).

Starts a throwaway local cluster (2 simulated nodes) under a temporary home, gives it something
to show (a running distributed job, a finished one, one waiting behind them), signs in with
Debian's chromium through Playwright and photographs each page at 1280x860. Nothing leaves
loopback; the cluster is stopped at the end."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright

from shoal.local.supervisor import UpOptions, start_local, stop_local

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.browser.chromium: the browser as the tests launch it
OUT = ROOT / "docs" / "img"

from tests.browser import chromium  # noqa: E402

LEARNER = """\
version: 1
name: rl-actor-learner
roles:
  learner:
    instances: 1
    resources: {cpu: 1, memory: 512Mi, gpu: 1}
    command: 'for i in $(seq 1 900); do echo "step $i loss $((1000 / i))"; sleep 1; done'
  actor:
    instances: 3
    resources: {cpu: 1, memory: 256Mi}
    command: 'for i in $(seq 1 900); do echo "episode $i reward $((i % 7))"; sleep 1; done'
"""
DONE = """\
version: 1
name: hello
roles:
  main:
    resources: {cpu: 1, memory: 128Mi}
    command: echo "hello from $SHOAL_TASK_ROLE"
"""
BIG = """\
version: 1
name: big-sweep
roles:
  trial:
    instances: 4
    resources: {cpu: 2, memory: 1Gi, gpu: 1}
    command: sleep 600
"""


def _wait(client: httpx.Client, job: str, states: set[str]) -> None:
    for _ in range(300):
        if client.get(f"/api/v1/jobs/{job}").json()["state"] in states:
            return
        time.sleep(0.1)
    raise SystemExit(f"job {job} never reached {states}")


def _seed(client: httpx.Client) -> str:
    def submit(text: str) -> str:
        answer = client.post("/api/v1/jobs", json={"spec": text})
        answer.raise_for_status()
        return str(answer.json()[0]["id"])

    _wait(client, submit(DONE), {"SUCCEEDED"})
    running = submit(LEARNER)
    _wait(client, running, {"RUNNING"})
    submit(BIG)
    return running


def _shoot(page: Page, base: str, route: str, name: str, ready: str) -> None:
    page.goto(f"{base}/ui/#/{route}")
    page.locator(ready).first.wait_for()
    page.wait_for_timeout(800)
    page.screenshot(path=str(OUT / f"{name}.png"))
    print(f"docs/img/{name}.png")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shoal-shots-") as tmp:
        home = Path(tmp) / "home"
        options = UpOptions(
            home=home, port=0, nodes=2, cpus=4.0, memory_mib=8192, gpus=2, port_base=29000
        )
        info = start_local(options, timeout_s=60)
        try:
            token = (home / "admin.token").read_text().strip()
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=info.url, headers=headers, timeout=30) as client:
                running = _seed(client)
                time.sleep(35)  # closed 10 s buckets: points for the charts
            with sync_playwright() as driver:
                browser = chromium.launch(driver)
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(info.url + "/")
                page.locator("input[name=token]").wait_for()
                page.screenshot(path=str(OUT / "sign-in.png"))
                page.fill("input[name=token]", token)
                page.click("button[type=submit]")
                page.wait_for_selector("[data-testid=who]")
                _shoot(page, info.url, "overview", "overview", ".chart canvas")
                _shoot(page, info.url, "jobs", "jobs", "[data-testid=jobs-table]")
                _shoot(page, info.url, f"jobs/{running}", "job", "[data-testid=log-text]")
                _shoot(page, info.url, "jobs/3", "job-waiting", "[data-testid=why-waiting] p")
                _shoot(page, info.url, "submit", "submit", "[data-testid=plan]")
                _shoot(page, info.url, "nodes", "nodes", "[data-testid=nodes-table]")
                _shoot(page, info.url, "nodes/node-0", "node", ".chart canvas")
                _shoot(page, info.url, "vcs", "virtual-clusters", "[data-testid=vcs-table]")
                page.goto(f"{info.url}/ui/#/terminal/{running}?task=learner/0")
                page.locator(".xterm-rows").wait_for()
                page.wait_for_timeout(1500)
                page.keyboard.type("echo $SHOAL_TASK_ROLE $SHOAL_TASK_INDEX; ls\n")
                page.wait_for_timeout(1500)
                page.screenshot(path=str(OUT / "terminal.png"))
                print("docs/img/terminal.png")
                browser.close()
        finally:
            stop_local(home, grace_s=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
