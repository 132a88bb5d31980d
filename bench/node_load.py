"""Simulated nodes for ``bench/nodes.py``: N agents in one asyncio process, each doing what
``shoal agent`` does at rest (``src/shoal/agent/main.py``): a heartbeat report at the interval
the server's answer advises (``heartbeat_s``; 2 s when it says none) and an orders long poll
held open. Each node has its own connection for its long poll and shares a pool for reports.

    .venv/bin/python bench/node_load.py PORT AGENT_TOKEN NODES SECONDS OUT.json [--start N]
        [--heartbeat S]

Writes how many reports and polls were sent and answered, and the errors seen, to OUT.json.
Started as a process of its own so that its CPU is not the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION

DEFAULT_HEARTBEAT_S = 2.0
ORDER_WAIT_S = 10.0


def node_body(name: str, index: int) -> dict[str, Any]:
    return {
        "name": name,
        "address": f"198.19.{index // 250}.{index % 250 + 1}",
        "cpu_millis": 8000,
        "memory_mib": 32768,
        "gpu_indices": list(range(8)),
        "port_low": 20000,
        "port_high": 21000,
        "usage": {"cpu_percent": 1.0, "memory_mib": 512},
    }


class Tally:
    def __init__(self) -> None:
        self.reports = 0
        self.polls = 0
        self.errors: dict[str, int] = {}
        self.heartbeat_s: float | None = None

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def reporter(
    client: httpx.AsyncClient,
    name: str,
    index: int,
    until: float,
    tally: Tally,
    fixed: float | None,
) -> None:
    body = {"agent_id": name, "nodes": [node_body(name, index)], "agent_version": "bench"}
    every = fixed or DEFAULT_HEARTBEAT_S
    await asyncio.sleep(random.uniform(0, every))
    while time.monotonic() < until:
        try:
            answer = await client.post("/api/v1/agent/report", json=body)
            if answer.status_code == 200:
                tally.reports += 1
                advised = answer.json().get("heartbeat_s")
                every = fixed or float(advised or DEFAULT_HEARTBEAT_S)
                tally.heartbeat_s = every
            else:
                tally.error(f"report {answer.status_code}")
        except httpx.HTTPError as exc:
            tally.error(f"report {type(exc).__name__}")
        await asyncio.sleep(every)


async def poller(port: int, headers: dict[str, str], name: str, until: float, tally: Tally) -> None:
    body = {"agent_id": name, "nodes": [name], "wait_s": ORDER_WAIT_S}
    limits = httpx.Limits(max_connections=1)
    timeout = httpx.Timeout(ORDER_WAIT_S + 30)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=headers, limits=limits, timeout=timeout
    ) as client:
        while time.monotonic() < until:
            try:
                answer = await client.post("/api/v1/agent/orders", json=body)
                tally.polls += 1
                if answer.status_code != 200:
                    tally.error(f"orders {answer.status_code}")
                    await asyncio.sleep(1.0)
            except httpx.HTTPError as exc:
                tally.error(f"orders {type(exc).__name__}")
                await asyncio.sleep(1.0)


async def run(
    port: int,
    token: str,
    nodes: int,
    seconds: float,
    start: int,
    fixed: float | None,
    tally: Tally,
) -> Tally:
    headers = {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: str(PROTOCOL_VERSION)}
    until = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=headers, limits=limits, timeout=60
    ) as shared:
        tasks = []
        for i in range(start, start + nodes):
            name = f"sim-{i:05d}"
            tasks.append(asyncio.create_task(reporter(shared, name, i, until, tally, fixed)))
            tasks.append(asyncio.create_task(poller(port, headers, name, until, tally)))
        everything = asyncio.gather(*tasks)
        # the bench ends it with SIGTERM: every node stops, and the tally is still written
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, everything.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await everything
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("token")
    parser.add_argument("nodes", type=int)
    parser.add_argument("seconds", type=float)
    parser.add_argument("out", type=Path)
    parser.add_argument("--start", type=int, default=0, help="the first node's number")
    parser.add_argument(
        "--heartbeat", type=float, help="report this often whatever the server advises"
    )
    args = parser.parse_args(argv)
    tally = Tally()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            run(args.port, args.token, args.nodes, args.seconds, args.start, args.heartbeat, tally)
        )
    args.out.write_text(
        json.dumps(
            {
                "reports": tally.reports,
                "polls": tally.polls,
                "errors": tally.errors,
                "heartbeat_s": tally.heartbeat_s,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
