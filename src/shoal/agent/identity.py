"""How an agent reaches its server: a ``Connection`` (URL, headers, TLS settings for httpx), and
a joined node's identity on disk (``HOME/identity``, every file 0600).

Two kinds of connection:

- **bearer** (local mode, ``shoal up``): plain HTTP on loopback with the agent token;
- **mutual TLS** (a server on the network): the server is verified against the cluster's CA
  and the agent presents its node certificate; no token.

``join`` is ``shoal agent join``: it fetches the CA without trust, checks the hash of its public
key against the one the join token carries (refusing loudly on a mismatch), makes a key that never
leaves this machine, and sends a certificate signing request over TLS verified against that CA.
The identity it writes is all ``shoal agent run`` needs; the join token is never needed again.

Renewal (``shoal.agent.renewal``) replaces the key and certificate in place: the new key is
written to ``node.key.next`` before it is asked for, the answer's certificate to ``node.crt.next``,
then each is renamed over the current one. ``settle`` (run by ``Identity.load``) completes a swap
that a crash cut short, so the pair on disk always matches.
"""

from __future__ import annotations

import json
import os
import ssl
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from shoal.net.failover import client_settings, primary
from shoal.pki import (
    JoinToken,
    ca_public_key_hash,
    key_matches,
    key_pem,
    new_private_key,
    node_csr,
)
from shoal.pki import write_private as _write_private
from shoal.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION, JoinRequest, JoinResponse

IDENTITY_DIR = "identity"


class JoinError(Exception):
    """Joining failed; the message says why and what to do."""


@dataclass(frozen=True)
class Connection:
    server: str
    headers: dict[str, str]
    verify: ssl.SSLContext | bool = False  # a context: the CA pinned, the node cert loaded
    # the joined node whose certificate this connection presents (None: a bearer connection);
    # the agent renews that certificate and reconnects with the new one
    identity: Identity | None = None

    @classmethod
    def bearer(cls, server: str, token: str) -> Connection:
        return cls(server, {"Authorization": f"Bearer {token}", **_protocol()})

    @classmethod
    def mutual_tls(cls, identity: Identity) -> Connection:
        files = identity.files
        context = ssl.create_default_context(cafile=str(files.ca))
        context.load_cert_chain(str(files.cert), str(files.key))
        return cls(identity.server, _protocol(), context, identity)

    def httpx_settings(self, timeout: float) -> dict[str, Any]:
        """Keywords for ``httpx.Client``: base URL, headers, and the TLS context (CA pinned,
        client certificate loaded) when there is one; several servers (commas) fail over
        (net/failover.py)."""
        return client_settings(self.server, self.verify, headers=self.headers, timeout=timeout)


def _protocol() -> dict[str, str]:
    return {PROTOCOL_HEADER: str(PROTOCOL_VERSION)}


@dataclass(frozen=True)
class IdentityFiles:
    directory: Path

    @property
    def key(self) -> Path:
        return self.directory / "node.key"

    @property
    def cert(self) -> Path:
        return self.directory / "node.crt"

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def settings(self) -> Path:
        return self.directory / "identity.json"

    @property
    def next_key(self) -> Path:
        """A renewal's new key, written before it is asked for (kept until the swap)."""
        return self.directory / "node.key.next"

    @property
    def next_cert(self) -> Path:
        """A renewal's new certificate, written before the swap."""
        return self.directory / "node.crt.next"

    def settle(self) -> None:
        """Complete a renewal's swap that a crash cut short: a ``node.crt.next`` whose key is
        ``node.key.next`` (or already ``node.key``) becomes the current pair; one that matches
        neither is dropped. ``node.key.next`` without a certificate stays: the next renewal asks
        again with that key (its answer may have been lost)."""
        if not self.next_cert.exists():
            return
        cert = self.next_cert.read_bytes()
        if self.next_key.exists() and key_matches(self.next_key.read_bytes(), cert):
            os.replace(self.next_key, self.key)
        if self.key.exists() and key_matches(self.key.read_bytes(), cert):
            os.replace(self.next_cert, self.cert)
        else:
            self.next_cert.unlink()

    def install(self, certificate: str, ca: str) -> None:
        """A renewal's answer: the certificate for ``node.key.next`` and the CAs to trust. Each
        file is written whole (0600, a temporary file renamed over it); the key and certificate
        are swapped last, key first (``settle`` finishes it after a crash)."""
        if not key_matches(self.next_key.read_bytes(), certificate.encode()):
            raise ValueError("the renewed certificate does not certify the key asked for")
        _write_private(self.next_cert, certificate.encode())
        _write_private(self.ca, ca.encode())
        os.replace(self.next_key, self.key)
        os.replace(self.next_cert, self.cert)
        _sync_directory(self.directory)


@dataclass(frozen=True)
class Identity:
    """A joined node: its server, name, labels and the resources it was told to offer (None:
    detected at each start)."""

    home: str
    server: str
    node: str
    labels: dict[str, str] = field(default_factory=dict)
    cpus: float | None = None
    memory_mib: int | None = None
    gpus: int | None = None
    address: str = "127.0.0.1"
    port_base: int = 20000

    @property
    def files(self) -> IdentityFiles:
        return IdentityFiles(Path(self.home) / IDENTITY_DIR)

    def save(self) -> None:
        data = {k: v for k, v in asdict(self).items() if k != "home"}
        _write_private(self.files.settings, (json.dumps(data, indent=2) + "\n").encode())

    @classmethod
    def load(cls, home: Path) -> Identity:
        files = IdentityFiles(home / IDENTITY_DIR)
        if files.directory.exists():
            files.settle()
        if not files.settings.exists():
            raise JoinError(
                f"no node identity under {home}: join first with `shoal agent join "
                f"https://SERVER:PORT --token TOKEN --home {home}`"
            )
        for path in (files.key, files.cert, files.ca):
            if not path.exists():
                raise JoinError(
                    f"{path} is missing: the identity under {home} is incomplete; "
                    "join again with a new token"
                )
        try:
            data = json.loads(files.settings.read_text())
            return cls(home=str(home), **data)
        except (ValueError, TypeError) as exc:
            raise JoinError(f"{files.settings} cannot be read ({exc}); join again") from None


def _sync_directory(directory: Path) -> None:
    """Make the renames in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fetch_pinned_ca(server: str, token: JoinToken, timeout: float = 15.0) -> bytes:
    """The server's CA, fetched without trust and accepted only if it is the one the token pins."""
    try:
        response = httpx.get(f"{server}/api/v1/join/ca", verify=False, timeout=timeout)
    except httpx.HTTPError as exc:
        raise JoinError(f"cannot reach {server} to fetch its CA: {exc}") from None
    if response.status_code != 200:
        raise JoinError(f"{server} gave no CA ({response.status_code}): {_message(response)}")
    ca_pem = response.content
    try:
        found = ca_public_key_hash(ca_pem)
    except ValueError:
        raise JoinError(f"{server} answered with something that is not a certificate") from None
    if found != token.ca_hash:
        raise JoinError(
            f"the server's CA does not match the token: possible impostor (the token pins CA "
            f"public key sha256 {token.ca_hash}, {server} presented {found}); check the URL and "
            "ask the admin for the join command again"
        )
    return ca_pem


def join(identity: Identity, token: JoinToken, timeout: float = 30.0) -> JoinResponse:
    """Join the server (the first of several: they share the CA and the store); writes the
    identity (key, certificate, CA, settings, every server's URL) under its home."""
    server = primary(identity.server)
    ca_pem = fetch_pinned_ca(server, token)
    files = identity.files
    key = new_private_key()
    request = JoinRequest(
        token_id=token.token_id,
        secret=token.secret,
        node=identity.node,
        csr=node_csr(key, identity.node).decode(),
        labels=identity.labels,
    )
    context = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        response = httpx.post(
            f"{server}/api/v1/join",
            json=request.model_dump(),
            headers=_protocol(),
            verify=context,
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        hint = ""
        if "CERTIFICATE_VERIFY_FAILED" in str(exc):  # the pinned CA signed it: the name differs
            host = httpx.URL(server).host
            hint = (
                f"; the server's certificate does not name {host}: the admin adds it with "
                f"`shoal server init --host {host}` and restarts the server"
            )
        raise JoinError(f"cannot join {server}: {exc}{hint}") from None
    if response.status_code != 200:
        body = _body(response)
        raise JoinError(f"{body.get('code', response.status_code)}: {_message(response)}")
    joined = JoinResponse.model_validate(response.json())
    _write_private(files.key, key_pem(key))
    _write_private(files.cert, joined.certificate.encode())
    _write_private(files.ca, joined.ca.encode())
    identity.save()
    return joined


def _body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _message(response: httpx.Response) -> str:
    return str(_body(response).get("message") or response.text[:300])
