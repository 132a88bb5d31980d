"""CLI latency: how long `shoal` takes to answer, next to curl making the same API call.

Starts a real local cluster (server + agent processes) in a temporary SHOAL_HOME on a free port,
submits one trivial job, then runs each command N times in a fresh process, as a user would:

    .venv/bin/python bench/cli.py [--runs 20] [--baseline-src DIR --baseline-runs 5]

Commands run as ``python -m shoal ...`` with the interpreter running this script (what the
``shoal`` script does). Each is run twice first, untimed, so its bytecode is cached as it is after
installation ($PYTHONDONTWRITEBYTECODE is dropped, the cache goes to $PYTHONPYCACHEPREFIX in the
temporary home). ``--baseline-src`` times the
same commands with another source tree first on PYTHONPATH (e.g. a checkout of an older
commit's ``src``), in the same run, against the same cluster. Prints a table, writes
bench/results/cli.json and rewrites the part of docs/benchmarks.md between
``<!-- cli:begin -->`` and ``<!-- cli:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from launch import (  # bench/launch.py, beside this script
    machine,
    percentile,
    replace_region,
    start_cluster,
)
from shoal.client import ShoalClient
from shoal.local.supervisor import stop_local

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results" / "cli.json"
BEGIN, END = "<!-- cli:begin -->", "<!-- cli:end -->"
TARGETS_MS = {"--version": 150, "--help": 150, "job list": 300}
TRIVIAL = "version: 1\nname: bench-cli\nroles:\n  t:\n    command: 'true'\n"


def timed(cmd: list[str], env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system of the child) milliseconds of ``runs`` fresh processes."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.decode()[-500:]}")
        walls.append(wall * 1000)
        cpus.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    return walls, cpus


def summary(walls: list[float], cpus: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(walls), 1),
        "p95_ms": round(percentile(walls, 0.95), 1),
        "cpu_median_ms": round(statistics.median(cpus), 1),
    }


def commands(job_id: str) -> dict[str, tuple[list[str], str | None]]:
    """What is timed: the CLI's arguments and the API path curl fetches for the same answer."""
    return {
        "--version": (["--version"], None),
        "--help": (["--help"], None),
        "job list": (["job", "list", "--all"], "/api/v1/jobs?limit=100"),
        "job status": (["job", "status", job_id], f"/api/v1/jobs/{job_id}"),
        "status": (["status"], "/api/v1/cluster"),
    }


def cli_env(home: Path, src: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")  # cached, but never inside a source tree
    env["SHOAL_HOME"] = str(home)
    env["SHOAL_CONFIG"] = str(home / "no-config.yaml")  # the user's contexts play no part
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(":")
    return env


def measure(
    home: Path, url: str, token: str, job_id: str, runs: int, src: Path | None
) -> dict[str, dict[str, float]]:
    env = cli_env(home, src)
    curl = shutil.which("curl")
    results: dict[str, dict[str, float]] = {}
    for name, (args, path) in commands(job_id).items():
        cmd = [sys.executable, "-m", "shoal", *args]
        timed(cmd, env, 2)  # warm-up: bytecode cached, files in the page cache
        results[name] = summary(*timed(cmd, env, runs))
        if path is not None and curl is not None:
            fetch = [curl, "-sf", "-o", "/dev/null", "-H", f"Authorization: Bearer {token}"]
            timed([*fetch, url + path], env, 2)
            curl_walls, _ = timed([*fetch, url + path], env, runs)
            results[name]["curl_median_ms"] = round(statistics.median(curl_walls), 1)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per command")
    parser.add_argument("--baseline-src", type=Path, default=None, help="another src tree")
    parser.add_argument("--baseline-runs", type=int, default=5)
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite the docs")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-cli-"))
    load_before = os.getloadavg()
    url, token = start_cluster(home, 2)
    try:
        (home / "server.json").write_text(json.dumps({"url": url}))  # as `shoal up` leaves it
        client = ShoalClient(url, token)
        job_id = client.submit(TRIVIAL)[0]["id"]
        client.wait(job_id, timeout_s=60)
        results = measure(home, url, token, job_id, args.runs, None)
        baseline = None
        if args.baseline_src is not None:
            src = args.baseline_src.resolve()
            baseline = measure(home, url, token, job_id, args.baseline_runs, src)
    finally:
        stop_local(home)
        shutil.rmtree(home, ignore_errors=True)
    data = {
        "machine": machine(),
        "commit": _commit(),
        "runs": args.runs,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "results": results,
        "baseline_src": None if args.baseline_src is None else str(args.baseline_src),
        "baseline_commit": None if args.baseline_src is None else _commit(args.baseline_src),
        "baseline": baseline,
        "baseline_runs": args.baseline_runs,
    }
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    Console().print(f"machine: {data['machine']}")
    Console().print(table(data))
    if not args.no_docs:
        replace_region(DOC, BEGIN, END, markdown(data))


def _commit(tree: Path = ROOT) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def rows(data: dict[str, object]) -> list[list[str]]:
    results: dict[str, dict[str, float]] = data["results"]  # type: ignore[assignment]
    baseline: dict[str, dict[str, float]] | None = data["baseline"]  # type: ignore[assignment]
    out = []
    for name, r in results.items():
        target = TARGETS_MS.get(name)
        row = [
            f"`shoal {name}`",
            f"{r['median_ms']:.0f}",
            f"{r['p95_ms']:.0f}",
            f"{r['cpu_median_ms']:.0f}",
            f"{r['curl_median_ms']:.0f}" if "curl_median_ms" in r else "-",
            f"≤ {target}" if target else "-",
        ]
        if baseline is not None:
            before = baseline[name]
            row.append(f"{before['median_ms']:.0f} (CPU {before['cpu_median_ms']:.0f})")
        out.append(row)
    return out


HEADER = ["command", "median ms", "p95 ms", "CPU ms (median)", "curl ms (median)", "target ms"]


def table(data: dict[str, object]) -> Table:
    result = Table(title=f"shoal CLI latency, {data['runs']} runs each, load {data['load_before']}")
    for column in HEADER + (["baseline median ms"] if data["baseline"] else []):
        result.add_column(column, justify="right")
    for row in rows(data):
        result.add_row(*row)
    return result


def markdown(data: dict[str, object]) -> str:
    header = HEADER + (["baseline median ms"] if data["baseline"] else [])
    lines = [
        f"Measured at commit `{data['commit']}` on {data['machine']}; load average "
        f"{data['load_before']} before and {data['load_after']} after the run (1, 5, 15 min). "
        f"{data['runs']} timed runs per command, each a fresh `python -m shoal` process.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(data)]
    if data["baseline"]:
        lines += [
            "",
            f"Baseline: the same commands with `{data['baseline_src']}` (commit "
            f"`{data['baseline_commit']}`) first on PYTHONPATH, {data['baseline_runs']} runs each.",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
