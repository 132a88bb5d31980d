"""HTTPS for a server on the network: uvicorn with the server's certificate, asking clients for a
certificate signed by the cluster's CA (optional: users come with Bearer tokens and no
certificate), and the peer's certificate handed to the app.

Why a protocol subclass. uvicorn verifies a client certificate when ``ssl_cert_reqs`` asks for
one, but (in the versions shoal allows) it does not pass it to the application: the ASGI TLS
extension (``scope["extensions"]["tls"]``) is still an open pull request there
(Kludex/uvicorn#1119, #2586, #3043, #3132). Other ways were weighed and set aside:

- a reverse proxy (nginx, envoy) that verifies and forwards the certificate in a header: one more
  daemon to install and configure on the server, and a header that anything reaching the app
  directly could forge;
- patching uvicorn's scope builder (``handle_events``): its private internals change between
  releases;
- another ASGI server (hypercorn has the extension): a second server stack for one field.

So ``PeerCertH11Protocol`` extends uvicorn's h11 protocol at its stable edge: when a connection is
made (asyncio calls ``connection_made`` only after the TLS handshake, so the verified peer
certificate is known), it reads the certificate from the transport's ``ssl_object`` and wraps the
connection's app so every request scope of that connection carries the extension (and so does the
WebSocket protocol a request of it upgrades to, which loads the app anew), in the shape
the ASGI TLS spec defines (``client_cert_chain``: PEM strings, leaf first; ``tls_version``;
``cipher_suite``). Python's ``ssl`` with ``CERT_OPTIONAL`` and the CA loaded aborts the handshake
of a certificate that fails verification, so a certificate that reaches the app was signed by the
cluster's CA; whether it still belongs to a node is the app's question (``node_auth``).

Why the context is swapped per connection (``LiveTls``). A CA rotation changes, while the server
runs, which CAs client certificates may come from (both during the overlap, the new one alone
after it) and which certificate the server presents (the new CA's after it). An ``SSLContext``
can gain a CA but never lose one, and uvicorn hands its context to asyncio once, at start. So the
context uvicorn has gets an ``sni_callback``, which OpenSSL calls early in every handshake (with
or without a server name), and which gives the connection the context built from ``HOME/pki`` as
it is now (``SSLObject.context``, documented for choosing the server's certificate; the client's
certificate is then verified against that context's CAs). ``reload`` builds a new one after a
rotation step; connections already open keep theirs.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from shoal.server.ca import PkiFiles, settle

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def tls_extension(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> dict[str, Any] | None:
    """The ASGI TLS extension of a connection, or None for a plain one."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    cipher = ssl_object.cipher()
    return {
        "server_cert": None,  # not readable back from Python's ssl
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": None,
        "client_cert_error": None,  # a failed verification ends the handshake before the app
        "tls_version": ssl_object.version(),
        "cipher_suite": cipher[0] if cipher else None,
    }


def _with_tls(app: ASGIApp, tls: dict[str, Any]) -> ASGIApp:
    async def with_tls(scope: Scope, receive: Any, send: Any) -> None:
        scope["extensions"] = {**(scope.get("extensions") or {}), "tls": tls}
        await app(scope, receive, send)

    return with_tls


class PeerCertH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, adding ``scope["extensions"]["tls"]`` (see the module doc)."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        tls = tls_extension(transport.get_extra_info("ssl_object"))
        if tls is not None:
            self.app = _with_tls(self.app, tls)
            if self.ws_protocol_class is not None:  # an upgrade hands the connection over
                self.ws_protocol_class = _ws_with_tls(self.ws_protocol_class, tls)


def _ws_with_tls(protocol_class: Any, tls: dict[str, Any]) -> Any:
    """uvicorn's WebSocket protocol for a connection upgraded from this one: it runs the app it
    loads itself, so its app gets the same TLS extension (an agent's exec WebSocket is
    authenticated by its node certificate, docs/terminal.md)."""

    def make(**kwargs: Any) -> Any:
        protocol = protocol_class(**kwargs)
        protocol.app = _with_tls(protocol.app, tls)
        return protocol

    return make


def peer_certificate(scope: Scope) -> str | None:
    """The PEM of the client's (verified) certificate, if it sent one."""
    tls = (scope.get("extensions") or {}).get("tls") or {}
    chain = tls.get("client_cert_chain") or []
    return str(chain[0]) if chain else None


def https_options(files: PkiFiles) -> dict[str, Any]:
    """uvicorn.Config keywords: serve the server certificate, verify client certificates
    against the CA when sent (optional, for users without one), and pass them to the app.
    (``serve_live`` then makes the context follow a CA rotation.)"""
    settle(files)  # a CA rotation step a crash cut short is completed first
    return {
        "ssl_certfile": str(files.server_cert),
        "ssl_keyfile": str(files.server_key),
        "ssl_ca_certs": str(files.ca_cert),
        "ssl_cert_reqs": ssl.CERT_OPTIONAL,
        "http": PeerCertH11Protocol,
    }


class LiveTls:
    """The TLS context new connections get: the server's certificate and the trust bundle as
    ``HOME/pki`` holds them now (see the module doc)."""

    def __init__(self, files: PkiFiles) -> None:
        self.files = files
        self.current = self._build()

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.files.server_cert), str(self.files.server_key))
        context.load_verify_locations(cadata=self.files.bundle())
        context.verify_mode = ssl.CERT_OPTIONAL
        context.set_alpn_protocols(["http/1.1"])
        return context

    def reload(self) -> None:
        self.current = self._build()

    def install(self, base: ssl.SSLContext) -> None:
        """Every handshake on ``base`` (uvicorn's context) continues with ``current``."""
        base.sni_callback = self._choose

    def _choose(self, connection: ssl.SSLObject, _name: str | None, _base: ssl.SSLContext) -> None:
        connection.context = self.current


_live: dict[Path, LiveTls] = {}
_live_lock = threading.Lock()


def serve_live(base: ssl.SSLContext, files: PkiFiles) -> LiveTls:
    """Make ``base`` (the context the server listens with) follow ``HOME/pki``; ``reload_live``
    then applies a CA rotation's steps to new connections."""
    live = LiveTls(files)
    live.install(base)
    with _live_lock:
        _live[files.directory.resolve()] = live
    return live


def reload_live(files: PkiFiles) -> None:
    """New connections get the server certificate and trust bundle now on disk (no-op when
    this process serves no TLS for that home: a test's app without a server)."""
    with _live_lock:
        live = _live.get(files.directory.resolve())
    if live is not None:
        live.reload()
