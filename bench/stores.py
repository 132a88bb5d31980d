"""SQLite and PostgreSQL side by side (issue #28; docs/postgresql.md, docs/benchmarks.md "Stores"):
acknowledged submissions per second from 20 clients, and job-list latency while the scheduler
works the queue they made, the same run on each store. Not a test: it prints a table, writes
bench/results/stores.json and rewrites the region of docs/benchmarks.md between
``<!-- stores:begin -->`` and ``<!-- stores:end -->``.

    .venv/bin/python bench/stores.py [--submissions 5000] [--clients 20] [--read-seconds 20]

Each store is behind a real ``shoal server`` process on loopback with its scheduler process
(bench/api_server.py). SQLite: WAL, ``synchronous=FULL``, in the home. PostgreSQL: a throwaway
cluster of Debian's PostgreSQL on the same machine (tests/postgresql.py) with fsync and
synchronous commits on, as in production. One fake node of 20 cores: the first 20 jobs are
placed, the rest queue. Submissions: a different one-task job file each time. Reads: 4 readers
alternate the job list (first 100 active jobs) and a job's status, one request per 100 ms each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import bodies_for, durable, hammer, read_load  # noqa: E402
from bench.api_server import Server, register_node  # noqa: E402
from bench.launch import machine, replace_region  # noqa: E402
from tests.postgresql import start_cluster, unusable  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "stores.json"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- stores:begin -->", "<!-- stores:end -->"


def measure(
    name: str, store: str | None, args: argparse.Namespace, scratch: Path
) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"stores-{name}-", dir=scratch))
    server = Server(home, scheduler="process", store=store)
    try:
        register_node(server, cores=20)
        hammer(server, bodies_for(200, False, "warm"), args.clients)
        run = hammer(server, bodies_for(args.submissions, False, "j"), args.clients)
        ids = run.pop("ids")
        reads = read_load(server, ids, args.read_seconds)
    finally:
        server.stop()
    run["stored"] = durable(home, ids)
    return {"store": name, "submit": run, "reads": reads}


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| store | acknowledged/s (20 clients) | submit p50 / p99 ms | stored "
        "| job list p50 / p99 ms | job status p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        submit, reads = row["submit"], row["reads"]
        lines.append(
            f"| {row['store']} | {submit['per_second']:,.0f} | {submit['p50_ms']} / "
            f"{submit['p99_ms']} | {row['submit']['stored']:,} of {submit['acknowledged']:,} | "
            f"{reads['list']['p50_ms']} / {reads['list']['p99_ms']} | "
            f"{reads['status']['p99_ms']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--submissions", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--read-seconds", type=float, default=20.0)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    reason = unusable()
    if reason is not None:
        print(f"PostgreSQL cannot be started here: {reason}", file=sys.stderr)
        return 1
    scratch = Path(tempfile.mkdtemp(prefix="shoal-bench-stores-"))
    cluster = start_cluster(durable=True)
    try:
        rows = [
            measure("SQLite", None, args, scratch),
            measure("PostgreSQL 15", cluster.new_database("bench"), args, scratch),
        ]
    finally:
        cluster.stop()
    data = {
        "generated_at": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": machine(),
        "loadavg": list(os.getloadavg()),
        "parameters": vars(args),
        "rows": rows,
    }
    text = table(rows)
    print(text)
    if not args.no_save:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(data, indent=2) + "\n")
        region = (
            f"Measured {data['generated_at']} on {data['machine']}; {args.submissions:,} "
            f"submissions from {args.clients} clients, then {args.read_seconds:.0f} s of reads "
            f"(`bench/stores.py`).\n\n{text}"
        )
        replace_region(DOC, BEGIN, END, region)
    return 0


if __name__ == "__main__":
    sys.exit(main())
