"""schemathesis over shoal's own OpenAPI (/openapi.json), in-process against the ASGI app.

Every operation of /api/v1 and of the OpenPAI API (/api/v2 and its signed /log-manager URLs) is
called with valid (positive) and invalid (negative) generated requests, as the admin and as a
plain user, then as a stateful sequence that follows the links schemathesis infers between
operations (a job submitted, then read, stopped and tagged by its id). Every response must be no
5xx and conform to the schema: a documented status code, a documented content type and a body
valid against the declared model. Failures are collected across all operations, so one run
reports every broken route at once, each with a curl line that reproduces it.

Not fuzzed, because it cannot run in-process: GET /api/v1/stream (Server-Sent Events: the stream
never ends, so the call never returns). The WebSocket routes (the terminal, `shoal job exec`,
the agents' channel) are not in the OpenAPI document, so schemathesis never sees them.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fuzz.conftest import DERANDOMIZE, EXAMPLES, Caller, FuzzServer

CHECKS = (
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
)
NOT_FUZZED = {
    ("GET", "/api/v1/stream"): "Server-Sent Events: never ends, so a call never returns",
}
# The one 5xx shoal answers on purpose: OpenPAI's contract describes 500 NoGroupError for deleting
# an unknown group and no 404 (docs/openpai-compat.md, "Answers the description decides"). It is
# an answer, not a crash; every other check still runs on it.
ANSWERED_5XX = {("DELETE /api/v2/groups/{group}", "NoGroupError")}
SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=DERANDOMIZE,
    phases=[Phase.explicit, Phase.generate],  # failures are collected, not shrunk
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Findings:
    """What a fuzz run saw: calls, statuses, and failures by operation."""

    calls: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failures: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    not_generated: set[str] = field(default_factory=set)
    operations: set[str] = field(default_factory=set)

    def report(self) -> str:
        lines = [f"{len(self.failures)} operations failed:"]
        for label, found in sorted(self.failures.items()):
            lines.append(label)
            lines.extend(f"    {text}" for text in sorted(found)[:5])
        return "\n".join(lines)


@pytest.fixture
def served(fuzz_server: FuzzServer) -> Iterator[FuzzServer]:
    yield fuzz_server
    asgi.shutdown_lifespans()  # the app's lifespan (its scheduler thread) ends with the test


def in_scope(api: str) -> Callable[[str], bool]:
    if api == "v1":
        return lambda path: path.startswith("/api/v1/")
    return lambda path: path.startswith(("/api/v2/", "/log-manager/"))


def send(case: schemathesis.Case, caller: Caller, findings: Findings) -> None:
    """One call, each check on its own so every kind of failure of a case is seen."""
    findings.calls += 1
    label = case.operation.label
    try:
        response = case.call(headers=caller.headers())
    except Exception as exc:  # the app raised: in a real server, a 500
        findings.failures[label].add(f"crash {type(exc).__name__}: {exc}"[:300])
        return
    findings.statuses[response.status_code] += 1
    if response.status_code == 401 and "revoked" in response.text:
        caller.renew()  # a case revoked the caller's own token: later cases get a new one
    for check in CHECKS:
        if check is not_a_server_error and (label, error_code(response)) in ANSWERED_5XX:
            continue
        try:
            case.validate_response(response, checks=[check], headers=caller.headers())
        except (AssertionError, BaseExceptionGroup) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            curl = case.as_curl_command(headers={"Authorization": "Bearer TOKEN"})
            findings.failures[label].add(
                f"{check.__name__}: {response.status_code} {first} "
                f"{response.text[:160]!r} <- {curl[:400]}"
            )


def error_code(response: schemathesis.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def fuzz_operations(server: FuzzServer, caller: Caller, api: str) -> Findings:
    schema = schemathesis.openapi.from_asgi("/openapi.json", server.app)
    findings = Findings()
    wanted = in_scope(api)
    for result in schema.get_all_operations():
        operation = result.ok()
        if not wanted(operation.path) or (operation.method.upper(), operation.path) in NOT_FUZZED:
            continue
        findings.operations.add(operation.label)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @SETTINGS
            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            def run(case: schemathesis.Case) -> None:
                send(case, caller, findings)

            try:
                run()
            except (hypothesis.errors.Unsatisfiable, hypothesis.errors.FailedHealthCheck):
                findings.not_generated.add(f"{operation.label} ({mode.value})")
    return findings


def fuzz_stateful(server: FuzzServer, caller: Caller, api: str) -> Findings:
    """Sequences of calls along the links schemathesis infers (the id a POST answers is the
    path parameter of the GETs, PUTs and DELETEs of that resource)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", server.app)
    wanted = in_scope(api)
    schema = schema.include(path_regex="^/(api/v2|log-manager)/" if api == "v2" else "^/api/v1/")
    schema = schema.exclude(path_regex="^/api/v1/stream$")
    findings = Findings()
    base = schema.as_state_machine()

    class Machine(base):  # type: ignore[misc,valid-type]
        def step(self, input: Any) -> Any:
            assert wanted(input.case.operation.path)
            findings.operations.add(input.case.operation.label)
            send(input.case, caller, findings)
            return None

    machine_settings = hypothesis.settings(
        SETTINGS, max_examples=max(3, EXAMPLES), stateful_step_count=10
    )
    Machine.run(settings=machine_settings)
    return findings


def assert_clean(findings: Findings, started: float, what: str) -> None:
    seconds = time.perf_counter() - started
    print(
        f"\n{what}: {len(findings.operations)} operations, {findings.calls} calls in "
        f"{seconds:.1f} s, statuses {dict(sorted(findings.statuses.items()))}, "
        f"not generated: {sorted(findings.not_generated)}"
    )
    report = os.environ.get("SHOAL_FUZZ_REPORT")  # `make fuzz` keeps every failure in a file
    if report:
        with open(report, "a", encoding="utf-8") as handle:
            handle.write(f"## {what}\n{findings.report()}\n")
    assert findings.calls > 0
    assert not findings.failures, findings.report()


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_every_operation_as_admin(served: FuzzServer, api: str) -> None:
    started = time.perf_counter()
    findings = fuzz_operations(served, served.admin, api)
    assert_clean(findings, started, f"admin {api}")


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_every_operation_as_plain_user(served: FuzzServer, api: str) -> None:
    started = time.perf_counter()
    findings = fuzz_operations(served, served.plain_user(), api)
    assert_clean(findings, started, f"user {api}")


@pytest.mark.parametrize("who", ["admin", "user"])
def test_stateful_sequences(served: FuzzServer, who: str) -> None:
    caller = served.admin if who == "admin" else served.plain_user()
    started = time.perf_counter()
    findings = Findings()
    for api in ("v1", "v2"):
        found = fuzz_stateful(served, caller, api)
        findings.calls += found.calls
        findings.statuses.update(found.statuses)
        findings.operations |= found.operations
        for label, texts in found.failures.items():
            findings.failures[label] |= texts
    assert_clean(findings, started, f"stateful {who}")
