"""A bounded load generator for a shoal server on loopback (issue #15, item 3).

``clients`` threads, each with one keep-alive ``httpx`` connection, submit jobs, list jobs, read
the logs of and stop jobs of their own, until their share of ``submissions`` is sent or
``seconds`` have passed (every loop is bounded by both). Each client records every ACKNOWLEDGED
submission (the id the server answered 201 with, its name, latency and when) and every error,
classified by kind: the crash tests check that nothing acknowledged is lost and that no error
but those a dead server causes was seen.

Used by tests/crash/ while servers and agents are killed, and on its own for the plain load
figures (no crash)::

    .venv/bin/python -m tests.crash.loadgen --submissions 500 --clients 20
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from shoal.local.supervisor import stop_local
from tests.integration.conftest import start_cluster

# What a dead or restarting server causes: refused connections, connections dropped under a
# request, answers that never came. Anything else (a 5xx, a 4xx the client did not expect) is not.
CONNECT_REFUSED = "connect-refused"
DROPPED = "connection-dropped"
TIMEOUT = "timeout"
TRANSPORT_KINDS = frozenset({CONNECT_REFUSED, DROPPED, TIMEOUT})
# After a transport error a client waits (doubling from BACKOFF_S up to BACKOFF_MAX_S while they
# go on), as a client retrying a dead server would; it gives up after MAX_UNANSWERED of them.
BACKOFF_S = 0.05
BACKOFF_MAX_S = 0.5
MAX_UNANSWERED = 200


@dataclass(frozen=True, slots=True)
class Ack:
    """A submission the server acknowledged (201)."""

    id: str
    name: str
    kind: str
    latency_s: float
    at: float  # time.monotonic() of the answer


@dataclass(frozen=True, slots=True)
class Failure:
    op: str  # submit, list, logs, stop
    kind: str  # one of TRANSPORT_KINDS, or "http STATUS CODE"
    detail: str
    at: float  # time.monotonic()


@dataclass
class ClientLog:
    acks: list[Ack] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)  # names sent without an answer
    ops: Counter[str] = field(default_factory=Counter)


# (client number, submission number, random) -> (kind, job file text)
JobMaker = Callable[[int, int, random.Random], tuple[str, str]]


@dataclass(frozen=True)
class LoadConfig:
    url: str
    token: str
    make_job: JobMaker
    submissions: int = 500  # in all, shared by the clients
    clients: int = 20
    seconds: float = 120.0  # whatever is left unsent then is not sent
    prefix: str = "load"  # job names: PREFIX-cCLIENT-N (unique per run)
    # each client's other operations, per submission
    lists: float = 0.2
    logs: float = 0.15
    stops: float = 0.05
    timeout_s: float = 10.0
    seed: int = 0


@dataclass
class LoadResult:
    started: float  # time.monotonic()
    ended: float
    logs: list[ClientLog]

    @property
    def acks(self) -> list[Ack]:
        return [a for log in self.logs for a in log.acks]

    @property
    def failures(self) -> list[Failure]:
        return [f for log in self.logs for f in log.failures]

    @property
    def unanswered(self) -> list[str]:
        return [n for log in self.logs for n in log.unanswered]

    def summary(self) -> dict[str, Any]:
        latencies = [a.latency_s for a in self.acks]
        wall = self.ended - self.started
        ops: Counter[str] = Counter()
        for log in self.logs:
            ops.update(log.ops)
        return {
            "acknowledged": len(latencies),
            "seconds": round(wall, 2),
            "per_second": round(len(latencies) / wall, 1) if wall > 0 else 0.0,
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 1) if latencies else None,
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 1) if latencies else None,
            "errors": dict(Counter(f"{f.op}: {f.kind}" for f in self.failures)),
            "unanswered_submissions": len(self.unanswered),
            "ops": dict(ops),
        }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json().get("code", ""))
    except (ValueError, AttributeError):
        return ""


def classify(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return CONNECT_REFUSED
    if isinstance(exc, httpx.TimeoutException):
        return TIMEOUT
    return DROPPED  # RemoteProtocolError, ReadError, WriteError: the server went away mid-call


class _Client:
    def __init__(self, config: LoadConfig, number: int, quota: int, deadline: float) -> None:
        self.config = config
        self.number = number
        self.quota = quota
        self.deadline = deadline
        self.rng = random.Random(config.seed * 1000 + number)
        self.log = ClientLog()
        self.backoff = BACKOFF_S
        self.http = httpx.Client(
            base_url=config.url,
            headers={"Authorization": f"Bearer {config.token}"},
            timeout=config.timeout_s,
        )

    def run(self, stop: threading.Event) -> None:
        """Until ``quota`` submissions were answered (or ``quota + MAX_UNANSWERED`` tried: a dead
        server's refusals count too), the deadline, or ``stop``."""
        try:
            answered = tried = 0
            while (
                answered < self.quota
                and tried < self.quota + MAX_UNANSWERED
                and time.monotonic() < self.deadline
                and not stop.is_set()
            ):
                answered += self._submit(tried)
                tried += 1
                self._maybe("list", self.config.lists, self._list)
                self._maybe("logs", self.config.logs, self._logs)
                self._maybe("stop", self.config.stops, self._stop)
        finally:
            self.http.close()

    def _maybe(self, op: str, chance: float, do: Callable[[], None]) -> None:
        if self.rng.random() < chance and time.monotonic() < self.deadline:
            do()

    def _call(self, op: str, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        self.log.ops[op] += 1
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            self.log.failures.append(Failure(op, classify(exc), repr(exc)[:200], time.monotonic()))
            time.sleep(self.backoff)
            self.backoff = min(self.backoff * 2, BACKOFF_MAX_S)
            return None
        self.backoff = BACKOFF_S
        return response

    def _refused(self, op: str, response: httpx.Response) -> None:
        code = _code(response)
        detail = response.text[:200]
        kind = f"http {response.status_code} {code}".strip()
        self.log.failures.append(Failure(op, kind, detail, time.monotonic()))

    def _submit(self, n: int) -> int:
        """1 if the server answered (whatever it said), else 0."""
        name = f"{self.config.prefix}-c{self.number}-{n}"
        kind, text = self.config.make_job(self.number, n, self.rng)
        started = time.perf_counter()
        response = self._call("submit", "POST", "/api/v1/jobs", json={"spec": text, "name": name})
        if response is None:
            self.log.unanswered.append(name)
            return 0
        if response.status_code != 201:
            self._refused("submit", response)
            return 1
        job_id = str(response.json()[0]["id"])
        latency = time.perf_counter() - started
        self.log.acks.append(Ack(job_id, name, kind, latency, time.monotonic()))
        return 1

    def _list(self) -> None:
        response = self._call("list", "GET", "/api/v1/jobs", params={"limit": 50})
        if response is not None and response.status_code != 200:
            self._refused("list", response)

    def _own(self) -> Ack | None:
        return self.rng.choice(self.log.acks) if self.log.acks else None

    def _logs(self) -> None:
        ack = self._own()
        if ack is None:
            return
        response = self._call("logs", "GET", f"/api/v1/jobs/{ack.id}/logs", params={"index": 0})
        if response is None or response.status_code == 200:
            return
        if response.status_code != 404 or _code(response) != "NoTaskError":
            self._refused("logs", response)  # 404 NoTaskError: not placed yet, no logs

    def _stop(self) -> None:
        ack = self._own()
        if ack is None:
            return
        response = self._call("stop", "POST", f"/api/v1/jobs/{ack.id}/stop")
        # 409: it had ended already (a stop of a final job is refused with a reason)
        if response is not None and response.status_code not in (200, 202, 409):
            self._refused("stop", response)


class Load:
    """The clients in threads of their own: ``start``, watch ``acknowledged``, ``join``."""

    def __init__(self, config: LoadConfig) -> None:
        self.config = config
        self.stop = threading.Event()
        self.started = time.monotonic()
        deadline = self.started + config.seconds
        shares = [config.submissions // config.clients] * config.clients
        for k in range(config.submissions % config.clients):
            shares[k] += 1
        self._clients = [_Client(config, k, shares[k], deadline) for k in range(config.clients)]
        self._threads = [
            threading.Thread(target=c.run, args=(self.stop,), name=f"load-{c.number}", daemon=True)
            for c in self._clients
        ]

    def start(self) -> Load:
        self.started = time.monotonic()
        for thread in self._threads:
            thread.start()
        return self

    def acknowledged(self) -> int:
        return sum(len(c.log.acks) for c in self._clients)

    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def join(self) -> LoadResult:
        limit = time.monotonic() + self.config.seconds + 2 * self.config.timeout_s + 5
        for thread in self._threads:
            thread.join(timeout=max(0.0, limit - time.monotonic()))
        if self.running():
            raise RuntimeError("load clients did not end in time")
        return LoadResult(self.started, time.monotonic(), [c.log for c in self._clients])


def run_load(config: LoadConfig) -> LoadResult:
    """Run the load to its end (quota or time); the clients' records."""
    return Load(config).start().join()


def trivial_job(_client: int, _n: int, _rng: random.Random) -> tuple[str, str]:
    """A one-task job that prints a line (the plain load's job)."""
    return "quick", (
        "version: 1\nname: load\nroles:\n  w:\n    resources: {cpu: 0.25, memory: 64}\n"
        "    command: echo ok\n"
    )


def main() -> None:
    """The plain load figures (no crash) on a throwaway local cluster of 2 nodes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--submissions", type=int, nargs="+", default=[500, 1000])
    parser.add_argument("--clients", type=int, default=20)
    args = parser.parse_args()
    for count in args.submissions:
        with tempfile.TemporaryDirectory(prefix="shoal-load-") as scratch:
            home = Path(scratch) / "home"
            cluster = start_cluster(home)
            try:
                token = (home / "admin.token").read_text().strip()
                config = LoadConfig(
                    cluster.info.url, token, trivial_job, count, args.clients, seconds=600
                )
                with open("/proc/loadavg") as handle:
                    before = handle.read().split()[0]
                result = run_load(config)
                with open("/proc/loadavg") as handle:
                    after = handle.read().split()[0]
            finally:
                cluster.client.close()
                stop_local(home, grace_s=10)
            print({"submissions": count, **result.summary(), "load": f"{before} -> {after}"})


if __name__ == "__main__":
    main()
