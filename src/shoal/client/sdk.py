"""The SDK's one class, :class:`ShoalClient`: jobs, virtual clusters, accounting, code and
data, the cluster; the other calls are its mixins (``shoal.client`` lists them)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from shoal import __version__
from shoal.client.accounts import AccountCalls
from shoal.client.cluster_admin import ClusterAdminCalls
from shoal.client.images import ImageCalls
from shoal.client.interactive import InteractiveCalls
from shoal.client.metrics import MetricsCalls
from shoal.client.transport import (
    ServerUnavailable,
    ShoalError,
    UntrustedServer,
    _http_client,
    _refused,
    _untrusted,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "TERMINAL",
    "Endpoint",
    "ServerUnavailable",
    "ShoalClient",
    "ShoalError",
    "UntrustedServer",
    "discover",
]
# The CLI imports this module at start-up: nothing here may import the server, the store or
# pydantic (tests/cli/test_cli_imports.py), and httpx loads with the first client.


TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
_OCTETS = {"Content-Type": "application/octet-stream"}


@dataclass(frozen=True)
class Endpoint:
    url: str
    token: str | None
    token_source: str | None = None  # "$SHOAL_TOKEN", "context lab (file ...)", a token file
    context: str | None = None  # the context's name ("local": the cluster under $SHOAL_HOME)
    url_source: str = "the caller"  # "$SHOAL_URL", "context lab", "the local cluster under ..."
    ca: str | None = None  # the cluster CA file an https:// server is verified against


def discover(home: Path | None = None, context: str | None = None) -> Endpoint:
    """The server and token to use: ``--context``/``$SHOAL_CONTEXT``, ``$SHOAL_URL``/
    ``$SHOAL_TOKEN``, the current context, the local cluster under ``$SHOAL_HOME``, in this order
    (see :mod:`shoal.client.config`); raises :class:`ShoalError` if none is configured."""
    from shoal.client.config import resolve

    return resolve(context, home)


class ShoalClient(ImageCalls, MetricsCalls, AccountCalls, ClusterAdminCalls, InteractiveCalls):
    def __init__(
        self,
        url: str,
        token: str | None,
        timeout: float = 30.0,
        token_source: str | None = None,
        ca: str | None = None,
    ) -> None:
        """``ca``: the cluster's CA file, to verify an https:// server against (pinned)."""
        self.url = url.rstrip("/")
        self.token_source = token_source
        self.ca = ca
        self._sends_token = bool(token)
        headers = {"User-Agent": f"shoal/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = _http_client(self.url, headers, timeout, ca)

    @classmethod
    def from_environment(cls, home: Path | None = None, context: str | None = None) -> ShoalClient:
        return cls.for_endpoint(discover(home, context))

    @classmethod
    def for_endpoint(cls, endpoint: Endpoint, timeout: float = 30.0) -> ShoalClient:
        """A client for a discovered endpoint: its URL, token and pinned CA, as every command."""
        return cls(
            endpoint.url,
            endpoint.token,
            timeout=timeout,
            token_source=endpoint.token_source,
            ca=endpoint.ca,
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx  # loaded by the constructor already: a dictionary lookup

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            detail = _untrusted(exc)
            if detail is not None:
                raise UntrustedServer(self.url, detail, self.ca) from None
            unsent = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
            raise ServerUnavailable(self.url, sent=not isinstance(exc, unsent)) from None
        self._raise_for(response)
        if response.status_code == 204 or not response.content:
            return None
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def _raise_for(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            body = response.json()
        except ValueError:
            body = {"code": "HttpError", "message": response.text[:500]}
        message = str(body.get("message", body.get("detail", response.reason_phrase)))
        raise ShoalError(
            response.status_code,
            str(body.get("code", "HttpError")),
            _refused(response.status_code, message, self.url, self.token_source, self._sends_token),
            body.get("problems"),
        )

    def _download(self, path: str, sink: BinaryIO) -> dict[str, str]:
        """Stream the body at ``path`` into ``sink``; returns the response's headers."""
        import httpx

        try:
            with self._http.stream("GET", path) as response:
                if response.status_code >= 400:
                    response.read()
                    self._raise_for(response)
                for chunk in response.iter_bytes(1 << 20):
                    sink.write(chunk)
                return dict(response.headers)
        except httpx.TransportError:
            raise ServerUnavailable(self.url) from None

    # ---- jobs ----

    def submit(
        self,
        spec: str,
        format: str = "auto",
        params: dict[str, str] | None = None,
        name: str | None = None,
        virtual_cluster: str | None = None,
        code_archive: str | None = None,
        env: dict[str, str] | None = None,
        environment: dict[str, str] | None = None,
        workdir: str | None = None,
        code_hash: str | None = None,
        array: str | None = None,
        runtime: str | None = None,
        strict_images: bool = False,
    ) -> list[dict[str, Any]]:
        """``env``: variables over the job file's; ``environment``: the variables the tasks
        start from (None: the agent's minimal set); ``workdir``: where tasks of a job without
        code start; ``code_hash``: the sha256 of a code archive uploaded with ``upload_code``
        (``code_archive``: base64 of a small one, sent inline); ``array``: submit it as a job
        array (``0-999%50``, docs/arrays.md); ``runtime``: process or container when the file
        does not say; ``strict_images``: refuse it if an image it needs is not pushed."""
        body: dict[str, Any] = {
            "spec": spec,
            "format": format,
            "params": params or {},
            "name": name,
            "virtual_cluster": virtual_cluster,
            "code_archive": code_archive,
        }
        if env:
            body["env"] = env
        if environment is not None:
            body["environment"] = environment
        if workdir is not None:
            body["workdir"] = workdir
        if code_hash is not None:
            body["code_hash"] = code_hash
        if array is not None:
            body["array"] = array
        if runtime is not None:
            body["runtime"] = runtime
        if strict_images:
            body["strict_images"] = True
        result: list[dict[str, Any]] = self._call("POST", "/api/v1/jobs", json=body)
        return result

    def jobs(
        self,
        states: list[str] | None = None,
        limit: int = 100,
        all_users: bool = False,
        since: float | None = None,
    ) -> list[dict[str, Any]]:
        """Newest first; ``all_users``: everyone's (summaries); ``since``: submitted at/after."""
        params: dict[str, Any] = {"limit": limit}
        if states:
            params["state"] = states
        if all_users:
            params["allUsers"] = "true"
        if since is not None:
            params["since"] = since
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/jobs", params=params)
        return result

    def job(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/api/v1/jobs/{ref}")
        return result

    def plan(
        self,
        spec: str,
        format: str = "auto",
        params: dict[str, str] | None = None,
        virtual_cluster: str | None = None,
        task: str | None = None,
    ) -> list[dict[str, Any]]:
        """Dry run on the server's cluster as it is now; nothing is stored."""
        body = {
            "spec": spec,
            "format": format,
            "params": params or {},
            "virtual_cluster": virtual_cluster,
            "task": task,
        }
        result: list[dict[str, Any]] = self._call("POST", "/api/v1/jobs/plan", json=body)
        return result

    def why(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/api/v1/jobs/{ref}/pending-reason")
        return result

    def stop(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/api/v1/jobs/{ref}/stop")
        return result

    def events(self, ref: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/api/v1/jobs/{ref}/events")
        return result

    def logs(
        self,
        ref: str,
        role: str | None = None,
        index: int = 0,
        stream: str = "stdout",
        offset: int = 0,
        attempt: int | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"index": index, "stream": stream, "offset": offset}
        if role is not None:
            params["role"] = role
        if attempt is not None:
            params["attempt"] = attempt
        result: dict[str, Any] = self._call("GET", f"/api/v1/jobs/{ref}/logs", params=params)
        return result

    def log_lines(
        self,
        ref: str,
        *,
        attempt: str | None = None,
        previous: bool = False,
        role: str | None = None,
        index: int | None = None,
        stream: str | None = None,
        tail: int | None = None,
        since: str | None = None,
        cursors: list[str] | None = None,
    ) -> dict[str, Any]:
        """Lines with their times, of every task (or one) of a job attempt; see the REST docs."""
        params: dict[str, Any] = {
            "attempt": attempt,
            "role": role,
            "index": index,
            "stream": stream,
            "tail": tail,
            "since": since,
        }
        params = {k: v for k, v in params.items() if v is not None}
        if previous:
            params["previous"] = "true"
        if cursors:
            params["cursor"] = cursors
        result: dict[str, Any] = self._call("GET", f"/api/v1/jobs/{ref}/logs/lines", params=params)
        return result

    def follow_logs(
        self,
        ref: str,
        role: str | None = None,
        index: int = 0,
        stream: str = "stdout",
        poll_s: float = 0.3,
        timeout_s: float | None = None,
    ) -> Iterator[str]:
        """Yield log text as it arrives until the task has finished and all of it was read."""
        offset = 0
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                chunk = self.logs(ref, role, index, stream, offset)
            except ShoalError as exc:
                if exc.code != "NoTaskError":
                    raise
                chunk = {"data": "", "nextOffset": 0, "complete": False}  # not placed yet
            if chunk["data"]:
                yield chunk["data"]
            offset = chunk["nextOffset"]
            if chunk["complete"]:
                return
            if deadline is not None and time.monotonic() > deadline:
                return
            if not chunk["data"]:
                time.sleep(poll_s)

    def wait(self, ref: str, timeout_s: float = 3600.0, poll_s: float = 0.2) -> dict[str, Any]:
        """Poll until the job reaches SUCCEEDED, FAILED or STOPPED."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(ref)
            if job["state"] in TERMINAL:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {ref} is still {job['state']} after {timeout_s}s")
            time.sleep(poll_s)

    # ---- virtual clusters ----

    def vcs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/virtual-clusters")
        return result

    def save_vc(self, name: str, settings: dict[str, Any], create: bool) -> dict[str, Any]:
        method = "POST" if create else "PUT"
        result: dict[str, Any] = self._call(
            method, f"/api/v1/virtual-clusters/{name}", json=settings
        )
        return result

    def vc(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/api/v1/virtual-clusters/{name}")
        return result

    def patch_vc(self, name: str, changes: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Change only the settings in ``changes`` (None: back to the default); the answer
        has ``before``, ``after`` and ``changes``."""
        result: dict[str, Any] = self._call(
            "PATCH",
            f"/api/v1/virtual-clusters/{name}",
            json=changes,
            params={"dryRun": "true"} if dry_run else None,
        )
        return result

    def delete_vc(self, name: str) -> None:
        self._call("DELETE", f"/api/v1/virtual-clusters/{name}")

    # ---- accounting ----

    def usage(self, by: str = "user", since: str | None = None) -> dict[str, Any]:
        params = {"by": by} | ({"since": since} if since is not None else {})
        result: dict[str, Any] = self._call("GET", "/api/v1/usage", params=params)
        return result

    # ---- code and data ----

    def has_code(self, sha256: str) -> bool:
        try:
            self._call("GET", f"/api/v1/code/{sha256}")
        except ShoalError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def upload_code(self, sha256: str, archive: Path) -> dict[str, Any]:
        """Upload a code archive (.tar.gz) under its sha256, streamed from the file."""
        with open(archive, "rb") as body:
            result: dict[str, Any] = self._call(
                "PUT", f"/api/v1/code/{sha256}", content=body, headers=_OCTETS
            )
        return result

    def push_data(
        self, owner: str, name: str, source: Path, kind: str, sha256: str, replace: bool = False
    ) -> dict[str, Any]:
        """Upload a data set (a file, or a directory as a tar: ``kind`` dir), streamed."""
        params = {"sha256": sha256, "kind": kind, "replace": str(replace).lower()}
        with open(source, "rb") as body:
            result: dict[str, Any] = self._call(
                "PUT", f"/api/v1/data/{owner}/{name}", params=params, content=body, headers=_OCTETS
            )
        return result

    def data_sets(self, all_users: bool = False) -> list[dict[str, Any]]:
        params = {"all": "true"} if all_users else {}
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/data", params=params)
        return result

    def data_set(self, owner: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/api/v1/data/{owner}/{name}")
        return result

    def pull_data(self, owner: str, name: str, sink: BinaryIO) -> dict[str, str]:
        """Stream the data set's bytes into ``sink``; returns the headers (``x-shoal-sha256``,
        ``x-shoal-data-kind``)."""
        return self._download(f"/api/v1/data/{owner}/{name}/content", sink)

    def remove_data(self, owner: str, name: str) -> None:
        self._call("DELETE", f"/api/v1/data/{owner}/{name}")

    def share_data(
        self, owner: str, name: str, who: dict[str, list[str]], share: bool = True
    ) -> dict[str, Any]:
        action = "share" if share else "unshare"
        result: dict[str, Any] = self._call(
            "POST", f"/api/v1/data/{owner}/{name}/{action}", json=who
        )
        return result

    # ---- cluster ----

    def health(self) -> bool:
        try:
            return bool(self._call("GET", "/api/v1/health").get("status") == "ok")
        except ShoalError:
            return False

    def cluster(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/api/v1/cluster")
        return result

    def nodes(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/nodes")
        return result

    def node_action(self, name: str, action: str) -> dict[str, Any]:
        """``cordon``, ``drain`` or ``uncordon`` a node (admins); the node as it is after."""
        result: dict[str, Any] = self._call("POST", f"/api/v1/nodes/{name}/{action}")
        return result

    def node_events(self, name: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/api/v1/nodes/{name}/events")
        return result
