"""The dashboard at size (issue #13): 2,000 jobs on 50 nodes.

Measures, against a real local cluster (one server, one agent with 50 simulated nodes of 4 cores;
200 jobs running `sleep`, 1,800 waiting), in Debian's chromium driven by Playwright:

- time to first render: from navigation to the overview's capacity cards and jobs by state, and
  to the job list's first page (25 rows), each in a fresh page with the session cookie set;
- the server's CPU per second (its process and the scheduler's, from /proc through psutil) over
  30 s, with 0 and then 5 open pages following live updates on the job list, while a job is
  stopped every second (so every page is told of changes and reloads its page of jobs).

Prints a table and rewrites the part of docs/benchmarks.md between ``<!-- dashboard:begin -->``
and ``<!-- dashboard:end -->``. Not a test: numbers depend on the machine."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from playwright.sync_api import Browser, sync_playwright
from rich.console import Console
from rich.table import Table

from launch import machine, percentile, replace_region  # bench/launch.py, beside this script
from shoal.local.supervisor import UpOptions, start_local, stop_local

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.browser.chromium: the browser as the tests launch it
DOC = ROOT / "docs" / "benchmarks.md"

from tests.browser import chromium  # noqa: E402

BEGIN, END = "<!-- dashboard:begin -->", "<!-- dashboard:end -->"
JOB = (
    "version: 1\nname: d{n}\nroles:\n  w:\n"
    "    resources: {{cpu: 1, memory: 64Mi}}\n    command: sleep 3600\n"
)


def seed(client: httpx.Client, jobs: int) -> list[str]:
    ids: list[str] = []
    for n in range(jobs):
        answer = client.post("/api/v1/jobs", json={"spec": JOB.format(n=n)})
        answer.raise_for_status()
        ids.append(str(answer.json()[0]["id"]))
    return ids


def first_render(
    browser: Browser, base: str, cookie: dict[str, str], route: str, ready: str
) -> float:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{**cookie, "url": base}])
    page = context.new_page()
    started = time.perf_counter()
    page.goto(f"{base}/ui/#/{route}")
    page.locator(ready).first.wait_for(timeout=60_000)
    took = time.perf_counter() - started
    context.close()
    return took


def server_cpu(pid: int) -> float:
    process = psutil.Process(pid)
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        try:
            times = p.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def cpu_per_second(pid: int, client: httpx.Client, victims: list[str], seconds: int) -> float:
    """Server CPU seconds per second while one job is stopped each second (bounded)."""
    before = server_cpu(pid)
    started = time.monotonic()
    for second in range(seconds):
        if victims:
            client.post(f"/api/v1/jobs/{victims.pop()}/stop")
        time.sleep(max(0.0, started + second + 1 - time.monotonic()))
    return (server_cpu(pid) - before) / (time.monotonic() - started)


def run(jobs: int, nodes: int, pages: int, seconds: int, renders: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="shoal-bench-dash-") as tmp:
        home = Path(tmp) / "home"
        options = UpOptions(
            home=home, port=0, nodes=nodes, cpus=4.0, memory_mib=16384, gpus=0, port_base=30000
        )
        info = start_local(options, timeout_s=120)
        try:
            token = (home / "admin.token").read_text().strip()
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=info.url, headers=headers, timeout=60) as client:
                t0 = time.perf_counter()
                ids = seed(client, jobs)
                seeding = time.perf_counter() - t0
                session = httpx.post(f"{info.url}/api/v1/session", json={"token": token})
                cookie = {"name": "shoal_session", "value": session.cookies["shoal_session"]}
                running = [
                    j["id"]
                    for j in client.get(
                        "/api/v1/jobs", params={"state": "RUNNING", "limit": 10000}
                    ).json()
                ]
                with sync_playwright() as driver:
                    browser = chromium.launch(driver)
                    overview = [
                        first_render(
                            browser, info.url, cookie, "overview", "[data-testid=jobs-by-state]"
                        )
                        for _ in range(renders)
                    ]
                    job_list = [
                        first_render(
                            browser, info.url, cookie, "jobs", "[data-testid=jobs-table] tbody tr"
                        )
                        for _ in range(renders)
                    ]
                    idle = cpu_per_second(info.server_pid, client, running, seconds)
                    context = browser.new_context(viewport={"width": 1280, "height": 900})
                    context.add_cookies([{**cookie, "url": info.url}])
                    opened = []
                    for _ in range(pages):
                        page = context.new_page()
                        page.goto(f"{info.url}/ui/#/jobs")
                        page.locator("[data-testid=jobs-table] tbody tr").first.wait_for()
                        opened.append(page)
                    watched = cpu_per_second(info.server_pid, client, running, seconds)
                    context.close()
                    browser.close()
        finally:
            stop_local(home, grace_s=10)
    return {
        "jobs": jobs,
        "nodes": nodes,
        "pages": pages,
        "seconds": seconds,
        "seeding_s": seeding,
        "running_at_start": len(running) + 2 * seconds,
        "overview_ms": [1000 * t for t in overview],
        "jobs_ms": [1000 * t for t in job_list],
        "cpu_idle": idle,
        "cpu_watched": watched,
        "ids": len(ids),
    }


def rows(data: dict[str, object]) -> list[list[str]]:
    def timing(name: str, key: str) -> list[str]:
        values: list[float] = data[key]  # type: ignore[assignment]
        return [name, f"{statistics.median(values):.0f}", f"{percentile(values, 0.95):.0f}", "-"]

    return [
        timing("overview: first render (ms)", "overview_ms"),
        timing("job list: first render, 25 rows (ms)", "jobs_ms"),
        ["server CPU, no page open (s/s)", "-", "-", f"{data['cpu_idle']:.3f}"],
        [
            f"server CPU, {data['pages']} pages following (s/s)",
            "-",
            "-",
            f"{data['cpu_watched']:.3f}",
        ],
    ]


HEADER = ["measure", "median", "p95", "CPU seconds per second"]


def markdown(data: dict[str, object], where: str) -> str:
    lines = [
        f"Measured on {where}: {data['jobs']} jobs on {data['nodes']} simulated nodes of 4 cores "
        f"(about 200 running `sleep`, the rest waiting), one job stopped per second during the "
        f"{data['seconds']} s CPU windows; {len(data['overview_ms'])} renders each "  # type: ignore[arg-type]
        "in a fresh browser context (Debian chromium, headless). Seeding took "
        f"{data['seeding_s']:.0f} s.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(data)]
    lines += [
        "",
        "No peer is measured beside it: OpenPAI's web portal needs its Kubernetes deployment "
        "and MARO's dashboard its Redis and Docker stack, neither of which runs on this machine.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--renders", type=int, default=5)
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args()
    data = run(args.jobs, args.nodes, args.pages, args.seconds, args.renders)
    table = Table(title=f"dashboard, {args.jobs} jobs, {args.nodes} nodes")
    for column in HEADER:
        table.add_column(column, justify="right")
    for row in rows(data):
        table.add_row(*row)
    Console().print(table)
    if not args.no_doc:
        replace_region(DOC, BEGIN, END, markdown(data, machine()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
