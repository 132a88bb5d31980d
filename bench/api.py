"""The API at load (issue #11, item 4): acknowledged submissions per second from concurrent clients,
read latency while the scheduler is busy, and the server's memory with a long history. Not a test:
it prints tables, writes bench/results/api.json and rewrites the part of docs/benchmarks.md
between ``<!-- api:begin -->`` and ``<!-- api:end -->``.

    .venv/bin/python bench/api.py [--submissions 5000] [--clients 20] [--nodes 5000]
        [--queue 10000] [--read-seconds 20] [--history 100000] [--only submit,reads,history]
        [--no-save]

Every server is a real ``shoal server`` process on loopback (SQLite, ``synchronous=FULL``) in a
temporary home; state is written straight into its store before it starts (``api_store.py``).
Three shapes (``api_server.py``): the scheduler in a process of its own (``--scheduler process``,
the default), in a thread of the API's process (``--scheduler thread``, as before issue #11 item
3), and the API alone (``create_app(run_scheduler=False)``).
"Server CPU" and "server RSS" are the API's process; the scheduler process is counted apart.

- **submit**: ``--clients`` clients (4 processes of threads, one keep-alive connection each, the
  standard library's ``http.client``) send ``--submissions`` trivial one-task jobs, one per
  request, as fast as answers come. Acknowledged = a 201; after the run every acknowledged id is
  looked up in the store. Two kinds of load: one job file submitted again and again with a new
  ``name`` each time (an ``sbatch`` loop) and a different job file each time. One fake node of 20
  cores (registered through the agent API, no agent process): the first 20 jobs are placed, the
  rest queue, so the scheduler works on a growing queue.
- **reads**: ``--nodes`` nodes of 8 GPUs and ``--queue`` queued jobs of ``bench/scheduler.py``'s
  mix (``bench/workload.py``: 1-8 GPUs, whole nodes, gangs, CPU-only, four priority classes), so
  every cycle works through a deep queue of many shapes; once the first cycle is done, 4
  readers alternate ``job list`` (``GET /api/v1/jobs?state=WAITING&state=RUNNING&state=STOPPING``,
  the first 100) and ``job status`` (``GET /api/v1/jobs/{id}``, random ids), each one request
  every 100 ms, for ``--read-seconds``; then the same reads on the same store with the
  scheduler in a thread, and with the API alone.
- **history**: ``--history`` finished jobs (tasks with usage, 5 events each) and a server with its
  scheduler process; the resident memory of both processes idle, then after listing, job
  details, events, the usage report, and 1,000 submissions (RSS now and its peak, VmHWM).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

import api_report
import api_store
from api_server import Server, register_node
from launch import machine, percentile, replace_region
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from shoal.server.app import prepare
from shoal.server.settings import ServerSettings
from shoal.store.models import Job

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results" / "api.json"
BEGIN, END = "<!-- api:begin -->", "<!-- api:end -->"
TRIVIAL = (
    "version: 1\nname: {name}\nroles:\n  t:\n    resources: {{cpu: 1, memory: 64}}\n"
    "    command: 'true'\n"
)
CLIENT_PROCESSES = 4
ACTIVE = "state=WAITING&state=RUNNING&state=STOPPING"
READ_INTERVAL_S = 0.1  # each reader sends a request every 100 ms


# ---- submissions --------------------------------------------------------------------------


def _client(port: int, token: str, bodies: list[str], out: Any) -> None:
    """One client: its share of the submissions, one request at a time on one connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies, ids, errors = [], [], []
    for body in bodies:
        started = time.perf_counter()
        connection.request("POST", "/api/v1/jobs", body, headers)
        answer = connection.getresponse()
        payload = answer.read()
        latencies.append(time.perf_counter() - started)
        if answer.status == 201:
            ids.append(json.loads(payload)[0]["id"])
        else:
            errors.append(f"{answer.status} {payload[:200]!r}")
    out.put((latencies, ids, errors))


def _client_process(port: int, token: str, shares: list[list[str]], out: Any) -> None:
    threads = [threading.Thread(target=_client, args=(port, token, s, out)) for s in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def bodies_for(count: int, same_file: bool, tag: str) -> list[str]:
    if same_file:  # one file, a new name each time: an sbatch loop
        spec = TRIVIAL.format(name="sweep")
        return [json.dumps({"spec": spec, "name": f"{tag}-{i}"}) for i in range(count)]
    return [json.dumps({"spec": TRIVIAL.format(name=f"{tag}-{i}")}) for i in range(count)]


def hammer(server: Server, bodies: list[str], clients: int) -> dict[str, Any]:
    """Send ``bodies`` from ``clients`` concurrent clients; what was acknowledged, how fast."""
    shares = [bodies[k::clients] for k in range(clients)]
    per_process = [shares[p::CLIENT_PROCESSES] for p in range(CLIENT_PROCESSES)]
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    cpu_before, children_before = server.cpu_s(), os.times()
    started = time.perf_counter()
    procs = [
        context.Process(target=_client_process, args=(server.port, server.token, part, out))
        for part in per_process
        if part
    ]
    for proc in procs:
        proc.start()
    latencies: list[float] = []
    ids: list[str] = []
    errors: list[str] = []
    for _ in range(clients):
        got = out.get(timeout=3600)
        latencies += got[0]
        ids += got[1]
        errors += got[2]
    for proc in procs:
        proc.join()
    wall = time.perf_counter() - started
    children = os.times()
    client_cpu = (children.children_user - children_before.children_user) + (
        children.children_system - children_before.children_system
    )
    return {
        "submissions": len(bodies),
        "acknowledged": len(ids),
        "errors": errors[:5],
        "error_count": len(errors),
        "seconds": round(wall, 2),
        "per_second": round(len(ids) / wall, 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "server_cpu_ms": round((server.cpu_s() - cpu_before) * 1000 / len(bodies), 3),
        "client_cpu_ms": round(client_cpu * 1000 / len(bodies), 3),
        "ids": ids,
    }


def durable(home: Path, ids: list[str]) -> int:
    """How many of the acknowledged ids the store holds (read after the run)."""
    db = api_store.database(home)
    found = 0
    with db.engine.connect() as connection:
        for start in range(0, len(ids), 5000):
            chunk = ids[start : start + 5000]
            found += len(connection.execute(select(Job.id).where(Job.id.in_(chunk))).all())
    db.dispose()
    return found


def measure_submit(args: argparse.Namespace, scratch: Path) -> list[dict[str, Any]]:
    runs = []
    for scheduler in ("process", None):
        for same_file in (True, False):
            home = Path(tempfile.mkdtemp(prefix="api-submit-", dir=scratch))
            server = Server(home, scheduler=scheduler)
            try:
                register_node(server, cores=20)
                hammer(server, bodies_for(200, same_file, "warm"), args.clients)  # warm-up
                run = hammer(server, bodies_for(args.submissions, same_file, "j"), args.clients)
            finally:
                server.stop()
            run["stored"] = durable(home, run.pop("ids"))
            run["scheduler"] = scheduler
            run["same_file"] = same_file
            api_report.log(
                f"submit: scheduler {scheduler or 'off'}, "
                f"{'one file' if same_file else 'a file each'}: {run['per_second']}/s, "
                f"server {run['server_cpu_ms']} ms CPU each, {run['stored']} stored"
            )
            runs.append(run)
    return runs


# ---- reads while the scheduler works ------------------------------------------------------


def _reader(server: Server, ids: list[str], until: float, seed: int, out: list[Any]) -> None:
    rng = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    headers = {"Authorization": f"Bearer {server.token}"}
    lists: list[float] = []
    status: list[float] = []
    turn = 0
    next_at = time.monotonic()
    while time.monotonic() < until:
        next_at += READ_INTERVAL_S  # paced, as people and scripts poll: not a saturating flood
        time.sleep(max(0.0, next_at - time.monotonic()))
        listing = turn % 2 == 0
        path = f"/api/v1/jobs?{ACTIVE}&limit=100" if listing else f"/api/v1/jobs/{rng.choice(ids)}"
        started = time.perf_counter()
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 200, answer.status
        (lists if listing else status).append(time.perf_counter() - started)
        turn += 1
    out.append((lists, status))


PROBE = {
    "name": "report-probe",  # too small for any job: its reports only ever say "still here"
    "address": "127.0.0.1",
    "cpu_millis": 1,
    "memory_mib": 1,
    "gpu_indices": [],
    "port_low": 21000,
    "port_high": 21010,
}


def _reporter(server: Server, until: float, out: list[Any]) -> None:
    """An agent's heartbeat report every 100 ms, timed: what a cycle may delay besides reads."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    headers = {
        "Authorization": f"Bearer {server.agent_token}",
        "Content-Type": "application/json",
        PROTOCOL_HEADER: str(PROTOCOL_VERSION),
    }
    body = json.dumps({"agent_id": "bench-probe", "nodes": [PROBE]})
    took: list[float] = []
    next_at = time.monotonic()
    while time.monotonic() < until:
        next_at += READ_INTERVAL_S
        time.sleep(max(0.0, next_at - time.monotonic()))
        started = time.perf_counter()
        connection.request("POST", "/api/v1/agent/report", body, headers)
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 200, answer.status
        took.append(time.perf_counter() - started)
    out.append(took)


def _pending_unmarked(server: Server) -> bool:
    """Whether the newest queued job has no pending reason yet (the first cycle is not done)."""
    _, jobs = server.get("/api/v1/jobs?state=WAITING&limit=1")
    return bool(jobs) and jobs[0]["pending"] is None


def read_load(server: Server, ids: list[str], seconds: float, readers: int = 4) -> dict[str, Any]:
    out: list[Any] = []
    cpu_before, scheduler_before = server.cpu_s(), server.scheduler_cpu_s()
    until = time.monotonic() + seconds
    reports: list[Any] = []
    threads = [
        threading.Thread(target=_reader, args=(server, ids, until, k, out)) for k in range(readers)
    ]
    threads.append(threading.Thread(target=_reporter, args=(server, until, reports)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lists = [x for part in out for x in part[0]]
    status = [x for part in out for x in part[1]]
    result: dict[str, Any] = {"seconds": seconds, "readers": readers}
    for name, values in (("list", lists), ("status", status), ("report", reports[0])):
        result[name] = {
            "count": len(values),
            "p50_ms": round(percentile(values, 0.5) * 1000, 1),
            "p99_ms": round(percentile(values, 0.99) * 1000, 1),
            "max_ms": round(max(values) * 1000, 1),
        }
    result["server_busy"] = round((server.cpu_s() - cpu_before) / seconds, 2)
    result["scheduler_busy"] = round((server.scheduler_cpu_s() - scheduler_before) / seconds, 2)
    return result


def measure_reads(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="api-reads-", dir=scratch))
    prepare(ServerSettings(home=home, node_timeout_s=3600)).db.dispose()
    now = time.time()
    api_store.add_nodes(home, args.nodes, now)
    api_store.add_queue(home, args.queue, now)
    ids = [str(i) for i in range(1, args.queue + 1)]
    results: dict[str, Any] = {"nodes": args.nodes, "queue": args.queue}
    for key, scheduler in (("busy", "process"), ("thread", "thread")):
        server = Server(home, scheduler=scheduler)
        try:
            started = time.monotonic()
            running = 0
            while running == 0 or _pending_unmarked(server):  # until the first cycle is applied
                time.sleep(1)
                running = server.get("/api/v1/cluster")[1]["jobs"]["RUNNING"]
            if key == "busy":  # the first server places them; the second finds them placed
                results["first_cycle_s"] = round(time.monotonic() - started, 1)
                results["placed"] = running
                took = results["first_cycle_s"]
                api_report.log(f"reads: the first cycle placed {running} jobs in {took} s")
            results[key] = read_load(server, ids, args.read_seconds)
            api_report.log(f"reads, scheduler {scheduler}: {results[key]}")
        finally:
            server.stop()
    server = Server(home, scheduler=None)
    try:
        results["alone"] = read_load(server, ids, args.read_seconds)
    finally:
        server.stop()
    return results


# ---- memory with a long history -----------------------------------------------------------


def measure_history(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="api-history-", dir=scratch))
    prepare(ServerSettings(home=home, node_timeout_s=3600)).db.dispose()
    now = time.time()
    nodes = api_store.add_nodes(home, 16, now)
    started = time.monotonic()
    tasks = api_store.add_history(home, args.history, now, nodes)
    result: dict[str, Any] = {
        "jobs": args.history,
        "tasks": tasks,
        "insert_s": round(time.monotonic() - started, 1),
        "db_mib": round((home / "shoal.db").stat().st_size / 2**20, 1),
    }
    server = Server(home, scheduler="process")
    try:
        time.sleep(2)
        scheduler = server.scheduler_pid()
        assert scheduler is not None, "the server has no scheduler process"
        result["idle_rss_mib"] = round(server.memory_mib()[0], 1)
        result["scheduler_idle_rss_mib"] = round(server.memory_mib(scheduler)[0], 1)
        result["calls"] = history_calls(server, args.history)
        hammer(server, bodies_for(1000, True, "late"), args.clients)
        rss, peak = server.memory_mib()
        result["rss_mib"], result["peak_rss_mib"] = round(rss, 1), round(peak, 1)
        rss, peak = server.memory_mib(scheduler)
        result["scheduler_rss_mib"] = round(rss, 1)
        result["scheduler_peak_rss_mib"] = round(peak, 1)
    finally:
        server.stop()
    return result


def history_calls(server: Server, count: int) -> dict[str, float]:
    """Typical reads of a server with a long history; each kind's median in ms."""
    rng = random.Random(3)
    calls = {
        "job list (active)": lambda: f"/api/v1/jobs?{ACTIVE}",
        "job list --all (100)": lambda: "/api/v1/jobs?limit=100",
        "job list --all --limit 10000": lambda: "/api/v1/jobs?limit=10000",
        "job status": lambda: f"/api/v1/jobs/{rng.randint(1, count)}",
        "job events": lambda: f"/api/v1/jobs/{rng.randint(1, count)}/events",
        "usage --by user (all time)": lambda: "/api/v1/usage?by=user",
        "status": lambda: "/api/v1/cluster",
    }
    medians = {}
    for name, path in calls.items():
        times = []
        for _ in range(3 if "usage" in name or "10000" in name else 20):
            started = time.perf_counter()
            code, _ = server.get(path())
            assert code == 200, (name, code)
            times.append(time.perf_counter() - started)
        medians[name] = round(percentile(times, 0.5) * 1000, 1)
    return medians


# ---- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--submissions", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--queue", type=int, default=10000)
    parser.add_argument("--read-seconds", type=float, default=20.0)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--only", default="submit,reads,history")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--no-save", action="store_true", help="print only")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(args.parts) - {"submit", "reads", "history"}
    if unknown or not args.parts:
        parser.error(f"--only takes a comma list of submit, reads, history; got {args.only!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="shoal-bench-api-"))
    data: dict[str, Any] = {
        "generated_at": time.strftime("%Y-%m-%d %H:%M %Z"),
        "commit": api_report.commit(ROOT),
        "machine": machine(),
        "loadavg_before": list(os.getloadavg()),
        "parameters": {k: v for k, v in vars(args).items() if k not in ("json", "parts")},
    }
    measure = {"submit": measure_submit, "reads": measure_reads, "history": measure_history}
    for part in args.parts:
        data[part] = measure[part](args, scratch)
    data["loadavg_after"] = list(os.getloadavg())
    api_report.print_tables(data)
    if not args.no_save:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2) + "\n")
        if set(args.parts) == {"submit", "reads", "history"}:
            replace_region(DOC, BEGIN, END, api_report.markdown(data))
            api_report.log(f"wrote {args.json} and the api region of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
