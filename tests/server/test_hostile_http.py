"""Hostile requests at the HTTP envelope (docs/limits.md), through the real app (real SQLite):
bodies over their limits refused before they are read whole (in process and over a real
socket), bodies that are not UTF-8, not JSON or nested too deep, header injection, traversal in
log, code, data, image and job routes and in names, absurd log offsets. Never a 5xx, nothing
read or written outside the server's home."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from shoal.server.app import create_app, make_server, prepare
from shoal.server.routers.logs import attachment
from shoal.server.settings import ServerSettings
from tests.server.test_arrays import FakeAgent

JOB = (
    "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{cpu: 1, memory: 64}}\n"
    "    command: echo hi\n"
)
BIG = str(10**30)
SHA = "0" * 64


def admin_client(home: Path, **settings: Any) -> TestClient:
    ctx = prepare(ServerSettings(home=home, scheduler="thread", **settings))
    client = TestClient(create_app(ctx, run_scheduler=False), raise_server_exceptions=False)
    client.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
    return client


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    with admin_client(tmp_path / "home", max_upload_bytes=4096, max_push_bytes=4096) as client:
        yield client


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# --- sizes -------------------------------------------------------------------------------------


def test_a_body_announced_too_large_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    """At the ASGI level: the app asks for the body; with a Content-Length over the limit not
    one chunk is pulled, and chunked it stops at the first chunk past the limit."""
    ctx = prepare(ServerSettings(home=tmp_path / "home"))
    app = create_app(ctx, run_scheduler=False)
    token = (tmp_path / "home" / "admin.token").read_text().strip()

    def call(length: int | None) -> tuple[int, int, dict[str, Any]]:
        pulled = 0
        answer: dict[str, Any] = {}

        async def receive() -> dict[str, Any]:
            nonlocal pulled
            pulled += 1
            return {"type": "http.request", "body": b" " * 65536, "more_body": True}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body":
                answer["body"] = answer.get("body", b"") + message.get("body", b"")

        headers = [(b"authorization", f"Bearer {token}".encode())]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/api/v1/jobs",
            "raw_path": b"/api/v1/jobs",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8476),
        }
        asyncio.run(app(scope, receive, send))
        return answer["status"], pulled, answer

    status, pulled, answer = call(10 * 1024**3)  # 10 GiB announced
    assert (status, pulled) == (413, 0)
    assert b"BodyTooLarge" in answer["body"] and b"--max-body" in answer["body"]
    status, pulled, answer = call(None)  # chunked, endless
    assert status == 413 and pulled == 1024**2 // 65536 + 1, pulled
    assert b"sent without a length" in answer["body"]


def test_over_a_real_socket_the_client_reads_the_413(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home, port=port, scheduler="thread"))
    server = make_server(ctx, log_level="error")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        token = (home / "admin.token").read_text().strip()
        with httpx.Client(
            base_url=ctx.settings.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            json_type = {"Content-Type": "application/json"}
            sized = client.post("/api/v1/jobs", content=b" " * (8 << 20), headers=json_type)
            assert sized.status_code == 413 and sized.json()["code"] == "BodyTooLarge"
            sent = 0

            def endless() -> Iterator[bytes]:
                nonlocal sent
                for _ in range(1000):  # 1 GiB if it were all read
                    sent += 1
                    yield b" " * (1 << 20)

            chunked = client.post("/api/v1/jobs", content=endless(), headers=json_type)
            assert chunked.status_code == 413 and chunked.json()["code"] == "BodyTooLarge"
            assert sent < 100, sent  # what the sockets buffered, not the gigabyte
            assert client.get("/api/v1/jobs").status_code == 200  # the server is fine
    finally:
        server.close()
        thread.join(15)


def test_upload_and_push_limits_are_their_own(api: TestClient, tmp_path: Path) -> None:
    code = api.put(f"/api/v1/code/{SHA}", content=b"x" * 5000)
    assert code.status_code == 413 and "max_upload_bytes" in code.json()["message"]
    assert "--max-upload" in code.json()["message"]
    data = api.put(f"/api/v1/data/admin/d?sha256={SHA}", content=b"x" * 5000)
    assert data.status_code == 413 and "max_push_bytes" in data.json()["message"]
    chunked = api.put(f"/api/v1/data/admin/d?sha256={SHA}", content=iter([b"x" * 3000] * 2))
    assert chunked.status_code == 413 and chunked.json()["code"] == "BodyTooLarge"
    image = api.put("/api/v1/images/localhost/x:1", content=b"x" * 5000)
    assert image.status_code == 413 and "--max-push" in image.json()["message"]
    # a JSON body up to max_body_bytes (1 MiB) is not an upload: 5000 bytes are fine
    fine = api.post("/api/v1/jobs", json={"spec": JOB.format(name="j") + "#" * 5000})
    assert fine.status_code == 201, fine.text
    assert not list((tmp_path / "home" / "blobs" / "tmp").glob("*"))
    assert api.get("/api/v1/data").json() == []


def test_openpai_job_route_answers_the_same_413(api: TestClient) -> None:
    refused = api.post(
        "/api/v2/jobs", content=b"x" * (2 << 20), headers={"Content-Type": "text/yaml"}
    )
    assert refused.status_code == 413
    assert refused.json()["code"] == "InvalidParametersError"  # OpenPAI's list of codes
    assert "max_body_bytes" in refused.json()["message"]


# --- bodies that cannot be read ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        (b'{"spec": "\xff\xfe"}', "BodyNotUtf8", "not UTF-8"),
        (b'{"spec": ', "InvalidJsonBody", "not valid JSON"),
        (b'{"spec": "x",}', "InvalidJsonBody", "not valid JSON"),
        (b"[" * 1000 + b"]" * 1000, "BodyTooDeep", "nested too deeply"),
        (b"[" * 100_000 + b"]" * 100_000, "BodyTooDeep", "nested too deeply"),
        (b'{"spec": "x", "env": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, "BodyTooDeep", "deep"),
    ],
    ids=["not-utf8", "cut-short", "trailing-comma", "deep-1000", "deep-100000", "deep-objects"],
)
def test_unreadable_json_bodies_are_400s_naming_the_problem(
    api: TestClient, body: bytes, code: str, says: str
) -> None:
    answer = api.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == code and says in answer.json()["message"]
    v2 = api.put(
        "/api/v2/jobs/admin~x/executionType",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert v2.status_code == 400 and v2.json()["code"] == "InvalidParametersError", v2.text


def test_openpai_yaml_that_is_not_utf8_is_a_400(api: TestClient) -> None:
    answer = api.post("/api/v2/jobs", content=b"\xff\xfe", headers={"Content-Type": "text/yaml"})
    assert answer.status_code == 400 and "UTF-8" in answer.json()["message"]


# --- header injection --------------------------------------------------------------------------


def assert_bad_name(answer: httpx.Response) -> None:
    """A bad job name: 400 InvalidJobName, or 422 naming the field where the request's text
    check saw a NUL first."""
    body = answer.json()
    if answer.status_code == 422:
        assert body["problems"][0]["path"].endswith("name") or "name" in body["message"], body
    else:
        assert answer.status_code == 400 and body["code"] == "InvalidJobName", body


@pytest.mark.parametrize("name", ["a\r\nX-Evil: 1", "a\nSet-Cookie: x=1", 'a"; x="', "a\x00"])
def test_names_that_would_end_a_header_are_refused(api: TestClient, name: str) -> None:
    answer = api.post("/api/v1/jobs", json={"spec": JOB.format(name="ok"), "name": name})
    assert_bad_name(answer)
    assert "X-Evil" not in answer.headers and "set-cookie" not in answer.headers


def test_a_log_download_names_its_file_in_one_header(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ctx = prepare(ServerSettings(home=home, scheduler="thread", scheduler_interval_s=0.05))
    with TestClient(create_app(ctx)) as api:
        api.headers["Authorization"] = f"Bearer {(home / 'admin.token').read_text().strip()}"
        agent = FakeAgent(api, home)
        job = api.post("/api/v1/jobs", json={"spec": JOB.format(name="j-1.x")}).json()[0]
        (order,) = agent.launches(1)
        empty = api.get(f"/api/v1/jobs/{job['id']}/logs/download", params={"role": "w"})
        assert empty.status_code == 200 and empty.content == b""
        assert empty.headers["content-disposition"] == (
            'attachment; filename="j-1.x-w-0-try1.stdout.log"'
        )
        chunk = {"attempt_id": order["attempt_id"], "stream": "stdout", "offset": 0}
        chunk["data"] = base64.b64encode(b"hi\r\nX-Evil: 1\r\n").decode()
        shipped = api.post("/api/v1/agent/logs", json={"chunks": [chunk]}, headers=agent.headers)
        assert shipped.status_code == 200, shipped.text
        full = api.get(f"/api/v1/jobs/{job['id']}/logs/download", params={"role": "w"})
        assert full.content == b"hi\r\nX-Evil: 1\r\n" and "x-evil" not in full.headers
        assert full.headers["content-disposition"] == empty.headers["content-disposition"]
        injected = api.get(
            f"/api/v1/jobs/{job['id']}/logs/download", params={"role": "w\r\nX-Evil: 1"}
        )
        assert injected.status_code == 404 and "x-evil" not in injected.headers
    assert attachment('a"\r\nX: 1') == "attachment; filename*=utf-8''a%22%0D%0AX%3A%201"


# --- traversal ---------------------------------------------------------------------------------


TRAVERSALS = [
    ("GET", "/api/v1/jobs/..%2F..%2Fadmin.token"),
    ("GET", "/api/v1/jobs/%2e%2e"),
    ("GET", "/api/v1/jobs/%2e%2e%2f%2e%2e%2fadmin.token/logs?role=w"),
    ("GET", "/api/v1/jobs/a%00b"),
    ("GET", "/api/v1/jobs/admin~j%00/logs/download?role=w"),
    ("GET", "/api/v1/jobs/{job}/logs?role=..%2F..%2Fadmin.token"),
    ("GET", "/api/v1/jobs/{job}/logs?stream=..%2F..%2Fadmin.token"),
    ("GET", "/api/v1/jobs/{job}/logs/lines?role=..%2F..%2Fadmin.token"),
    ("GET", "/api/v1/jobs/{job}/logs/lines?cursor=..%2F..%2Fx/0/stdout/1:0"),
    ("GET", "/api/v1/jobs/{job}/logs/download?role=..%2F..%2Fadmin.token"),
    ("GET", "/api/v1/jobs/{job}/logs/download?role=w&stream=..%2Fadmin.token"),
    ("GET", "/api/v1/code/..%2F..%2Fadmin.token"),
    ("GET", "/api/v1/code/%2e%2e"),
    ("GET", "/api/v1/code/%2e%2e%2fadmin.token"),
    ("PUT", "/api/v1/code/..%2F..%2Fx"),
    ("PUT", "/api/v1/code/%2e%2e"),
    ("PUT", f"/api/v1/data/admin/..%2F..%2Fx?sha256={SHA}"),
    ("PUT", f"/api/v1/data/admin/%2e%2e?sha256={SHA}"),
    ("PUT", f"/api/v1/data/admin/a%00b?sha256={SHA}"),
    ("PUT", f"/api/v1/data/%2e%2e/x?sha256={SHA}"),
    ("GET", "/api/v1/data/admin/..%2F..%2Fadmin.token/content"),
    ("GET", "/api/v1/data/%2e%2e/%2e%2e/content"),
    ("DELETE", "/api/v1/data/admin/%2e%2e"),
    ("PUT", "/api/v1/images/..%2F..%2Fetc%2Fpasswd"),
    ("PUT", "/api/v1/images/%2e%2e%2f%2e%2e%2fx"),
    ("PUT", "/api/v1/images/a%00b"),
    ("DELETE", "/api/v1/images/..%2F..%2Fadmin.token"),
    ("GET", "/api/v1/agent/attempts/..%2F..%2Fx/code"),
    ("GET", "/api/v1/agent/attempts/x/data/..%2F..%2Fadmin.token"),
    ("GET", "/api/v1/agent/code/%2e%2e%2fadmin.token"),
    ("POST", "/api/v1/virtual-clusters/..%2Fx"),
    ("POST", "/api/v1/virtual-clusters/%2e%2e"),
    ("POST", "/api/v1/virtual-clusters/a%00b"),
    ("GET", "/api/v2/jobs/..%2F..%2Fx/config"),
    ("GET", "/api/v2/users/..%2F..%2Fx"),
    ("GET", "/api/v1/nodes/..%2Fx"),
    ("GET", "/static/..%2F..%2Fadmin.token"),
    ("GET", "/assets/..%2F..%2F..%2Fadmin.token"),
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Path, str]]:
    home = tmp_path_factory.mktemp("hostile") / "home"
    with admin_client(home, max_upload_bytes=4096) as client:
        job = client.post("/api/v1/jobs", json={"spec": JOB.format(name="j")}).json()[0]
        yield client, home, job["id"]


@pytest.mark.parametrize(("method", "path"), TRAVERSALS)
def test_traversal_is_a_4xx_and_touches_nothing(
    shared: tuple[TestClient, Path, str], method: str, path: str
) -> None:
    client, home, job = shared
    before = files_under(home.parent)
    body = {"content": b"x"} if method in ("PUT", "POST") else {}
    answer = client.request(method, path.format(job=job), **body)
    if "/logs/lines?role=" in path:  # a filter that matches no task: nothing to show
        assert answer.status_code == 200 and answer.json()["streams"] == []
    else:
        assert 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    assert "shoal_" not in answer.text and "BEGIN" not in answer.text  # no token, no key
    assert files_under(home.parent) - before <= {"home/blobs", "home/blobs/tmp"}


@pytest.mark.parametrize("name", ["../x", "..", ".", "a/b", "a\x00b", "a\r\nb", "a b", "x" * 300])
def test_names_with_slashes_dots_and_controls_are_refused(
    shared: tuple[TestClient, Path, str], name: str
) -> None:
    client, _, _ = shared
    user = client.post("/api/v1/users", json={"name": name})
    assert user.status_code == 400, user.text
    vc = client.put(f"/api/v1/virtual-clusters/{quote(name, safe='')}", json={"quota": {}})
    assert 400 <= vc.status_code < 500, vc.text
    job = client.post("/api/v1/jobs", json={"spec": JOB.format(name="ok"), "name": name})
    assert_bad_name(job)


# --- log offsets and limits --------------------------------------------------------------------


LOG_QUERIES = [
    ("logs?offset=-1", 422),
    (f"logs?offset={BIG}", 422),
    (f"logs?role=w&index={BIG}", 422),
    ("logs?role=w&index=-1", 422),
    (f"logs?attempt={BIG}", 422),
    ("logs?attempt=0", 422),
    ("logs/lines?limit=-1", 422),
    (f"logs/lines?limit={BIG}", 422),
    ("logs/lines?tail=-1", 422),
    (f"logs/lines?tail={BIG}", 422),
    (f"logs/lines?index={BIG}", 422),
    ("logs/lines?cursor=w/0/stdout/1:-5", 400),
    (f"logs/lines?cursor=w/0/stdout/1:{BIG}", 200),
    (f"logs/lines?cursor=w/{BIG}/stdout/{BIG}:0", 200),
    ("logs/lines?cursor=garbage", 400),
    ("logs/lines?since=-5m", 400),
    ("logs/lines?since=99999999999999999999d", 200),
    (f"logs/lines?attempt={BIG}", 404),
    (f"logs/lines?attempt=1.{BIG}", 404),
    ("logs/lines?attempt=-1", 400),
    (f"logs/download?role=w&index={BIG}", 422),
    (f"logs/download?role=w&attempt={BIG}", 422),
    (f"events?offset={BIG}", 200),
]


@pytest.mark.parametrize(("query", "status"), LOG_QUERIES)
def test_absurd_log_offsets_and_limits_are_4xx_or_empty(
    shared: tuple[TestClient, Path, str], query: str, status: int
) -> None:
    client, _, job = shared
    answer = client.get(f"/api/v1/jobs/{job}/{query}")
    assert answer.status_code == status, answer.text
    if status == 200 and query.startswith("logs/lines"):
        assert answer.json()["streams"] == []


@pytest.mark.parametrize(
    "query", [f"offset={BIG}", "offset=-1", f"limit={BIG}", "since=1e400", "since=nan"]
)
def test_absurd_list_offsets_are_4xx_or_empty(
    shared: tuple[TestClient, Path, str], query: str
) -> None:
    client, _, _ = shared
    for api in ("/api/v1/jobs", "/api/v2/jobs"):
        answer = client.get(f"{api}?{query}")
        assert answer.status_code < 500, (api, answer.text)
        if answer.status_code == 200 and "since" not in query:
            assert answer.json() == [], (api, query)


def test_sha256_is_checked_on_upload(api: TestClient) -> None:
    body = b"not the announced bytes"
    wrong = api.put(f"/api/v1/code/{hashlib.sha256(b'other').hexdigest()}", content=body)
    assert wrong.status_code == 400 and wrong.json()["code"] == "DigestMismatch"
