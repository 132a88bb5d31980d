"""A task's ports through the server (docs/proxy.md), with real server and agent processes: the
proxy on its own port carries HTTP (whole path, bodies past the API's limit, the app's cookies
but never shoal's session) and WebSockets to a task's labelled port and gives the app the
attempt's proxy token; only the owner and admins get through; `shoal job port-forward` carries
HTTP from a local port and from stdin/stdout."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.envs import is_user_setting
from tests.integration.conftest import LocalCluster, running_cluster
from tests.integration.conftest import local_cli as shoal
from tests.integration.test_network_join import Network, network, worker  # noqa: F401

APP = """\
import asyncio, json, os
from http import HTTPStatus
from websockets.asyncio.server import serve
from websockets.datastructures import Headers
from websockets.http11 import Response

async def echo(ws):
    async for message in ws:
        await ws.send(message)

def answer(connection, request):
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return None
    body = json.dumps({
        "path": request.path,
        "headers": {k.lower(): v for k, v in request.headers.raw_items()},
        "token": os.environ["SHOAL_PROXY_TOKEN"],
        "prefix": os.environ["SHOAL_PROXY_PREFIX"],
    }).encode()
    headers = Headers([("Content-Type", "application/json"), ("Set-Cookie", "app=1; Path=/"),
                       ("Set-Cookie", "second=2; Path=/"), ("Content-Length", str(len(body)))])
    return Response(200, "OK", headers, body)

async def main():
    async with serve(echo, "0.0.0.0", int(os.environ["SHOAL_PORT"]), process_request=answer):
        print("serving", flush=True)
        await asyncio.Future()

asyncio.run(main())
"""

UPLOAD = """\
import os, socket
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        size = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(size)
        answer = f"{len(data)} {sum(data) % 65536}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

HTTPServer(("0.0.0.0", int(os.environ["SHOAL_PORT_upload"])), Handler).serve_forever()
"""


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("proxy") / "shoal-home", nodes=1) as running:
        yield running


@pytest.fixture(scope="module")
def app_job(local: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    scripts = tmp_path_factory.mktemp("proxy-app")
    for directory in (scripts, *scripts.parents[:2]):  # the task's user reads the scripts
        directory.chmod(directory.stat().st_mode | 0o755)
    (scripts / "app.py").write_text(APP)
    (scripts / "upload.py").write_text(UPLOAD)
    python = sys.executable
    job_id = local.submit(
        textwrap.dedent(
            f"""\
            version: 1
            name: web
            roles:
              web:
                resources: {{cpu: 1, memory: 256, ports: {{upload: 1}}}}
                command: {python} {scripts / "upload.py"} & exec {python} {scripts / "app.py"}
            """
        )
    )
    try:
        local.wait_for(lambda: "serving" in local.output_so_far(job_id, "web"), 60)
    except AssertionError:
        job = local.client.job(job_id)
        stderr = local.log(job_id, "web", stream="stderr")
        raise AssertionError(f"the app did not start: {job['state']}: {stderr[-2000:]}") from None
    return job_id


def proxy_url(local: LocalCluster, path: str = "") -> str:
    port = local.client.cluster()["proxyPort"]
    assert port, "the local server has no task proxy"
    return f"http://127.0.0.1:{port}{path}"


def admin_headers(local: LocalCluster) -> dict[str, str]:
    return {"Authorization": f"Bearer {(local.home / 'admin.token').read_text().strip()}"}


def test_http_reaches_the_tasks_port_with_its_whole_path(local: LocalCluster, app_job: str) -> None:
    prefix = f"/proxy/{app_job}/web/0/http/"
    answer = httpx.get(
        proxy_url(local, prefix + "some/page?x=1"),
        headers={**admin_headers(local), "Cookie": "shoal_session=secret; theirs=kept"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["path"] == prefix + "some/page?x=1"
    assert seen["prefix"] == prefix
    assert seen["headers"]["authorization"] == f"token {seen['token']}"  # not the user's Bearer
    assert seen["headers"]["cookie"] == "theirs=kept"  # shoal's session never reaches the task
    assert seen["headers"]["x-forwarded-proto"] == "http"
    assert answer.headers.get_list("set-cookie") == ["app=1; Path=/", "second=2; Path=/"]
    # the port's root without its slash is sent to it with one
    root = httpx.get(proxy_url(local, prefix.rstrip("/")), headers=admin_headers(local))
    assert root.status_code == 307 and root.headers["location"].endswith(prefix)


def test_a_body_larger_than_the_apis_limit_is_carried(local: LocalCluster, app_job: str) -> None:
    body = os.urandom(3 * 1024 * 1024)
    answer = httpx.post(
        proxy_url(local, f"/proxy/{app_job}/web/0/upload/"),
        content=body,
        headers=admin_headers(local),
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert answer.text == f"{len(body)} {sum(body) % 65536}"


def test_a_websocket_echoes_through_the_proxy(local: LocalCluster, app_job: str) -> None:
    url = proxy_url(local, f"/proxy/{app_job}/web/0/http/ws").replace("http://", "ws://")
    with connect(url, additional_headers=admin_headers(local), open_timeout=30) as ws:
        for message in ("hello", "x" * 200_000):
            ws.send(message)
            assert ws.recv(timeout=30) == message
        ws.send(b"\x00\x01binary")
        assert ws.recv(timeout=30) == b"\x00\x01binary"


def test_only_the_owner_and_admins_get_through(local: LocalCluster, app_job: str) -> None:
    page = f"/proxy/{app_job}/web/0/http/"
    anonymous = httpx.get(proxy_url(local, page), headers={"Accept": "text/html"})
    assert anonymous.status_code == 401 and "sign in" in anonymous.text
    carol = local.client.create_user("carol", False, [], None)["token"]
    other = httpx.get(proxy_url(local, page), headers={"Authorization": f"Bearer {carol}"})
    assert other.status_code == 403 and other.json()["code"] == "ForbiddenUserError"
    ws_url = proxy_url(local, page + "ws").replace("http://", "ws://")
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {carol}"}) as ws:
        first = ws.recv(timeout=30)  # the error frame, then the close
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)
    assert json.loads(first)["code"] == "ForbiddenUserError" and ws.close_code == 4403
    nope = proxy_url(local, f"/proxy/{app_job}/web/0/nope/")
    wrong = httpx.get(nope, headers=admin_headers(local))
    assert wrong.status_code == 422 and "http" in wrong.json()["message"]


def test_each_port_answers_its_own_paths(local: LocalCluster, app_job: str) -> None:
    on_api = httpx.get(
        f"{local.info.url}/proxy/{app_job}/web/0/http/", headers=admin_headers(local)
    )
    assert on_api.status_code == 404 and "proxy's port" in on_api.json()["message"]
    on_proxy = httpx.get(proxy_url(local, "/api/v1/cluster"), headers=admin_headers(local))
    assert on_proxy.status_code == 404 and "serves tasks' ports only" in on_proxy.json()["message"]
    with pytest.raises(InvalidStatus):  # the API's WebSockets are not on the proxy's port
        connect(proxy_url(local, f"/api/v1/jobs/{app_job}/exec").replace("http", "ws", 1))


def cli(local: LocalCluster, *args: str, **options: object) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not is_user_setting(k)}
    env.update(SHOAL_HOME=str(local.home), SHOAL_CONFIG=str(local.home / "no-config.yaml"))
    return subprocess.Popen(
        [sys.executable, "-m", "shoal", "--context", "local", *args],
        text=True,
        env=env,
        start_new_session=True,
        **options,  # type: ignore[call-overload]
    )


def test_port_forward_carries_http_from_a_local_port(local: LocalCluster, app_job: str) -> None:
    proc = cli(local, "job", "port-forward", app_job, ":http", stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> http", line)
        assert found, line
        answer = httpx.get(f"http://127.0.0.1:{found.group(1)}/direct", timeout=30)
        assert answer.status_code == 200 and answer.json()["path"] == "/direct"
        again = httpx.get(f"http://127.0.0.1:{found.group(1)}/again", timeout=30)
        assert again.json()["path"] == "/again"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_port_forward_stdio_and_its_refusals(local: LocalCluster, app_job: str) -> None:
    # the end of stdin half-closes the connection; the answer still comes back (an app that
    # reads to its request's end, as http.server does: an asyncio server may close at EOF)
    request = "POST /over-stdio HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc"
    proc = cli(
        local, "job", "port-forward", app_job, "--stdio", "upload",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = proc.communicate(request, timeout=60)
    assert proc.returncode == 0, err
    assert out.startswith("HTTP/1.0 200") and out.endswith(f"3 {sum(b'abc')}"), out
    typo = cli(
        local, "job", "port-forward", app_job, "8999:nope",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = typo.communicate(timeout=60)
    assert typo.returncode == 1 and "not one of task web/0's ports" in err, err
    bad = cli(local, "job", "port-forward", app_job, "x:y:z:", stderr=subprocess.PIPE)
    assert bad.wait(timeout=60) == 2


def test_sharing_a_job_lets_others_reach_its_ports_and_nothing_else(
    local: LocalCluster, app_job: str
) -> None:
    page = proxy_url(local, f"/proxy/{app_job}/web/0/http/")
    dave = local.client.create_user("dave", False, ["ml"], None)["token"]
    erin = local.client.create_user("erin", False, [], None)["token"]

    def status(token: str) -> int:
        return httpx.get(page, headers={"Authorization": f"Bearer {token}"}).status_code

    assert (status(dave), status(erin)) == (403, 403)
    shared = shoal(local, "job", "share", app_job, "--group", "ml", "--user", "erin")
    assert shared.returncode == 0, shared.stderr
    assert "shared with user erin, group ml" in shared.stdout
    assert (status(dave), status(erin)) == (200, 200)
    # the job itself stays its owner's: no details, no exec for those it is shared with
    details = httpx.get(
        f"{local.info.url}/api/v1/jobs/{app_job}", headers={"Authorization": f"Bearer {erin}"}
    )
    assert details.status_code == 403
    removed = shoal(local, "job", "share", app_job, "--user", "erin", "--remove", "-o", "json")
    assert json.loads(removed.stdout) == {"id": app_job, "users": [], "groups": ["ml"]}
    assert (status(dave), status(erin)) == (200, 403)
    typo = shoal(local, "job", "share", app_job, "--user", "nobody-such")
    assert typo.returncode == 1 and "no such user: nobody-such" in typo.stderr
    # only the owner (or an admin) shares
    by_erin = httpx.put(
        f"{local.info.url}/api/v1/jobs/{app_job}/shares",
        json={"users": ["erin"]},
        headers={"Authorization": f"Bearer {erin}"},
    )
    assert by_erin.status_code == 403


def test_a_server_on_the_network_carries_both_over_tls_to_a_joined_node(
    network: Network,  # noqa: F811
    worker: str,  # noqa: F811
) -> None:
    """Cluster mode: the agent opens its tunnels with its node certificate; the proxy's port
    serves HTTPS with the server's certificate (docs/proxy.md)."""
    serve = (
        'mkdir -p ".$SHOAL_PROXY_PREFIX" && echo "on $SHOAL_NODE_NAME" > ".${SHOAL_PROXY_PREFIX}'
        f'index.html" && exec {sys.executable} -m http.server "$SHOAL_PORT"'
    )
    text = f"version: 1\nname: netweb\nroles:\n  a:\n    command: {json.dumps(serve)}\n"
    job_id = str(network.admin.submit(text)[0]["id"])
    prefix = f"/proxy/{job_id}/a/0/http/"
    proxy = f"https://127.0.0.1:{network.admin.cluster()['proxyPort']}"
    headers = {"Authorization": f"Bearer {network.admin_token}"}
    with httpx.Client(verify=str(network.ca), headers=headers, timeout=30) as client:
        deadline = time.monotonic() + 60
        while (page := client.get(proxy + prefix + "index.html")).status_code != 200:
            assert time.monotonic() < deadline, page.text
            time.sleep(0.2)
    assert page.text == f"on {worker}\n"
    request = f"GET {prefix}index.html HTTP/1.0\r\n\r\n"
    forwarded = subprocess.run(
        [sys.executable, "-m", "shoal", "job", "port-forward", job_id, "--stdio", "http"],
        input=request, env=network.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert forwarded.returncode == 0, forwarded.stderr
    assert forwarded.stdout.endswith(f"on {worker}\n"), forwarded.stdout
    assert network.admin.stop(job_id)
