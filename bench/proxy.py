"""The task proxy's cost (docs/proxy.md): HTTP latency and WebSocket throughput to a task's port
through the server's proxy, next to reaching the same port directly, in the same run.

Starts a real local cluster (server + agent processes, one node) in a temporary SHOAL_HOME,
runs one task serving HTTP and a WebSocket echo (the ``websockets`` library) on its ``http`` port,
then:

- HTTP: ``--requests`` GETs of a 2-byte answer, one after the other on one kept-alive connection
  (httpx), directly and through the proxy (its pool keeps the tunnel open);
- WebSocket: ``--messages`` binary messages of 64 KiB, each echoed before the next is sent.

    .venv/bin/python bench/proxy.py [--requests 1000] [--messages 400]

Prints a table, writes bench/results/proxy.json and rewrites the part of docs/benchmarks.md
between ``<!-- proxy:begin -->`` and ``<!-- proxy:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from websockets.sync.client import connect

from launch import machine, percentile, replace_region  # bench/launch.py, beside this script
from shoal.client import ShoalClient, ShoalError
from shoal.local.supervisor import UpOptions, start_local, stop_local

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results" / "proxy.json"
BEGIN, END = "<!-- proxy:begin -->", "<!-- proxy:end -->"
MESSAGE = 64 * 1024

APP = """\
import asyncio, os, socket, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from websockets.asyncio.server import serve

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept-alive connections, as a real app's

    def setup(self):
        super().setup()  # headers and body are two writes: no Nagle wait between them
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass

async def echo(ws):
    async for message in ws:
        await ws.send(message)

async def main():
    http = ThreadingHTTPServer(("0.0.0.0", int(os.environ["SHOAL_PORT"])), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    async with serve(echo, "0.0.0.0", int(os.environ["SHOAL_PORT_ws"]), max_size=None):
        print("serving", flush=True)
        await asyncio.Future()

asyncio.run(main())
"""


def http_latencies(url: str, headers: dict[str, str], count: int) -> list[float]:
    with httpx.Client(headers=headers, timeout=30) as client:
        for _ in range(20):  # the connection (and the proxy's tunnel) opened, caches warm
            client.get(url).raise_for_status()
        times = []
        for _ in range(count):
            start = time.perf_counter()
            answer = client.get(url)
            times.append((time.perf_counter() - start) * 1000)
            assert answer.status_code == 200 and answer.content == b"ok", answer.text
    return times


def ws_throughput(url: str, headers: dict[str, str], count: int) -> float:
    """MiB/s of echoed payload (each way)."""
    payload = os.urandom(MESSAGE)
    with connect(url, additional_headers=headers, max_size=None, open_timeout=30) as ws:
        ws.send(payload)
        assert ws.recv(timeout=30) == payload
        start = time.perf_counter()
        for _ in range(count):
            ws.send(payload)
            assert len(ws.recv(timeout=30)) == MESSAGE
        elapsed = time.perf_counter() - start
    return count * MESSAGE / elapsed / (1024 * 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shoal-bench-proxy-") as tmp:
        home = Path(tmp) / "home"
        scripts = Path(tmp) / "app"
        scripts.mkdir()
        (scripts / "app.py").write_text(APP)
        for directory in (Path(tmp), scripts):
            directory.chmod(0o755)
        info = start_local(UpOptions(home=home, port=0, nodes=1, cpus=2.0, gpus=0))
        try:
            rows = run(info.url, home, scripts / "app.py", args)
        finally:
            stop_local(home)
    report(rows, args)


def run(url: str, home: Path, app: Path, args: argparse.Namespace) -> dict[str, object]:
    token = (home / "admin.token").read_text().strip()
    client = ShoalClient(url, token)
    text = (
        "version: 1\nname: bench-proxy\nroles:\n  web:\n"
        f"    resources: {{cpu: 1, memory: 256, ports: {{ws: 1}}}}\n"
        f"    command: {sys.executable} {app}\n"
    )
    job_id = str(client.submit(text)[0]["id"])
    deadline = time.monotonic() + 60
    while not _serving(client, job_id):
        if time.monotonic() > deadline:
            raise SystemExit(f"the task did not start: {client.job(job_id)}")
        time.sleep(0.2)
    ports = client.job(job_id)["tasks"][0]["ports"]
    proxy = f"127.0.0.1:{client.cluster()['proxyPort']}/proxy/{job_id}/web/0"
    auth = {"Authorization": f"Bearer {token}"}
    results: dict[str, object] = {}
    for name, http, ws, headers in (
        ("direct", f"127.0.0.1:{ports['http'][0]}", f"127.0.0.1:{ports['ws'][0]}", {}),
        ("proxy", f"{proxy}/http", f"{proxy}/ws", auth),
    ):
        times = http_latencies(f"http://{http}/x", headers, args.requests)
        mib_s = ws_throughput(f"ws://{ws}/echo", headers, args.messages)
        results[name] = {
            "p50_ms": round(percentile(times, 0.50), 3),
            "p99_ms": round(percentile(times, 0.99), 3),
            "mean_ms": round(statistics.fmean(times), 3),
            "ws_mib_s": round(mib_s, 1),
        }
    client.stop(job_id)
    return results


def _serving(client: ShoalClient, job_id: str) -> bool:
    try:
        return "serving" in client.logs(job_id, "web", 0)["data"]
    except ShoalError:  # not placed yet
        return False


def report(results: dict[str, object], args: argparse.Namespace) -> None:
    direct, proxy = results["direct"], results["proxy"]
    assert isinstance(direct, dict) and isinstance(proxy, dict)
    lines = [
        f"Machine: {machine()}. One local node; the task and the server on the same machine "
        f"(loopback). {args.requests} sequential GETs on one kept-alive connection; "
        f"{args.messages} WebSocket messages of 64 KiB, each echoed before the next.",
        "",
        "| path | HTTP p50 (ms) | HTTP p99 (ms) | HTTP mean (ms) | WebSocket echo (MiB/s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in (("task port, direct", direct), ("through the proxy", proxy)):
        lines.append(
            f"| {name} | {row['p50_ms']} | {row['p99_ms']} | {row['mean_ms']} | {row['ws_mib_s']} |"
        )
    added50 = proxy["p50_ms"] - direct["p50_ms"]
    added99 = proxy["p99_ms"] - direct["p99_ms"]
    lines += ["", f"Added by the proxy: p50 +{added50:.2f} ms, p99 +{added99:.2f} ms."]
    region = "\n".join(lines)
    print(region)
    RESULTS.write_text(json.dumps({"machine": machine(), **results}, indent=2) + "\n")
    replace_region(DOC, BEGIN, END, region)


if __name__ == "__main__":
    main()
