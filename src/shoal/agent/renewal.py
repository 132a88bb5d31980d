"""A joined node's certificate, renewed before it expires (docs/cluster.md, "Certificate renewal
and CA rotation").

One thread per agent of a joined node. It renews the node's certificate once a share of its
lifetime has passed (``RENEW_FRACTION``, two thirds, or ``$SHOAL_CERT_RENEW_FRACTION``), and at
once when the server says so: every ``$SHOAL_CERT_CHECK_S`` seconds (default 300) it asks
``GET /api/v1/agent/certificate``, whose answer says renew while the cluster's CA rotates and the
certificate is the old CA's.

A renewal makes a new key on this machine, saves it (``node.key.next``, 0600) before sending
anything, and sends a signing request for it over mutual TLS with the current certificate
(``POST /api/v1/agent/certificate``). The answer's certificate and trust bundle are written
whole and swapped in (``IdentityFiles.install``); then ``on_renewed`` gets a ``Connection`` with
the new pair, and the agent makes its new connections with it. Calls under way finish on their
own connections, whose certificate stays valid until it expires.

Failures (the server away, a refusal) are logged and retried with a doubling wait, at most a
twentieth of the lifetime (between 1 s and 5 min); nothing here touches the agent's running
connections. An answer that was lost is asked for again with the saved key, which the server
recognises.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import httpx

from shoal.agent.identity import Connection, Identity
from shoal.pki import (
    RENEW_FRACTION,
    certificate_validity,
    key_pem,
    load_private_key,
    new_private_key,
    node_csr,
    renewal_time,
)
from shoal.pki import write_private as _write_private
from shoal.protocol import CertificateStatus, RenewalRequest, RenewalResponse

log = logging.getLogger("shoal.agent.renewal")

FRACTION_ENV = "SHOAL_CERT_RENEW_FRACTION"
CHECK_ENV = "SHOAL_CERT_CHECK_S"
CHECK_S = 300.0  # how often the server is asked whether to renew now (a CA rotation)
RETRY_MIN_S = 1.0
RETRY_MAX_S = 300.0
TIMEOUT_S = 30.0


class RenewalFailed(Exception):
    """One renewal attempt failed (the message says why); it is retried."""


def _env_float(name: str, default: float, low: float, high: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low < value < high:
        log.warning("ignoring $%s=%r: not a number above %g and below %g", name, text, low, high)
        return default
    return value


def renew_fraction() -> float:
    return _env_float(FRACTION_ENV, RENEW_FRACTION, 0.0, 1.0)


def check_interval() -> float:
    return _env_float(CHECK_ENV, CHECK_S, 0.0, float("inf"))


class CertificateRenewer:
    """Keeps ``identity``'s certificate renewed; ``on_renewed`` gets the new connection."""

    def __init__(
        self,
        identity: Identity,
        on_renewed: Callable[[Connection], None],
        fraction: float | None = None,
        check_s: float | None = None,
    ) -> None:
        self.identity = identity
        self.files = identity.files
        self.on_renewed = on_renewed
        self.fraction = renew_fraction() if fraction is None else fraction
        self.check_s = check_interval() if check_s is None else check_s
        self.stopping = threading.Event()
        self.renewals = 0  # renewals done by this renewer (for logs and tests)
        self._thread = threading.Thread(target=self._run, name="agent-renewal", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(timeout=1.0)

    # ---- the schedule ----

    def _validity(self) -> tuple[float, float]:
        return certificate_validity(self.files.cert.read_bytes())

    def due_at(self) -> float:
        """When the certificate on disk is due for renewal (a Unix time)."""
        not_before, not_after = self._validity()
        return renewal_time(not_before, not_after, self.fraction)

    def _retry_cap(self) -> float:
        not_before, not_after = self._validity()
        return min(RETRY_MAX_S, max(RETRY_MIN_S, (not_after - not_before) / 20))

    def _run(self) -> None:
        asked = False  # the server asked for a renewal now
        next_check = time.monotonic() + min(self.check_s, 5.0)  # soon after start, then less
        backoff = 0.0
        while not self.stopping.is_set():
            try:
                if asked or self.due_at() <= time.time():
                    self.renew()
                    asked, backoff = False, 0.0
                    continue
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + self.check_s
                    status = self.check()
                    backoff = 0.0  # the server answers again
                    if status.renew:
                        log.info("the server asks for a new certificate: %s", status.reason)
                        asked = True
                        continue
                until_due = self.due_at() - time.time()
                self.stopping.wait(max(0.05, min(until_due, next_check - time.monotonic())))
            except Exception as exc:  # never end the thread: retry with a doubling wait
                backoff = min(max(backoff * 2, RETRY_MIN_S), self._safe_retry_cap())
                log.warning(
                    "certificate renewal of node %s failed (%s); retrying in %.0fs",
                    self.identity.node,
                    exc,
                    backoff,
                )
                self.stopping.wait(backoff)

    def _safe_retry_cap(self) -> float:
        try:
            return self._retry_cap()
        except (OSError, ValueError, IndexError):
            return RETRY_MAX_S

    # ---- the calls ----

    def _client(self) -> httpx.Client:
        """A client presenting the certificate on disk now."""
        return httpx.Client(**Connection.mutual_tls(self.identity).httpx_settings(TIMEOUT_S))

    def check(self) -> CertificateStatus:
        with self._client() as client:
            response = client.get("/api/v1/agent/certificate")
        _raise_for(response)
        return CertificateStatus.model_validate(response.json())

    def renew(self) -> None:
        """One renewal: new key (saved first), request, answer written and swapped in."""
        self.files.settle()
        if self.files.next_key.exists():  # an earlier attempt's: its answer may have been lost
            key = load_private_key(self.files.next_key.read_bytes())
        else:
            key = new_private_key()
            _write_private(self.files.next_key, key_pem(key))
        request = RenewalRequest(csr=node_csr(key, self.identity.node).decode())
        with self._client() as client:
            response = client.post("/api/v1/agent/certificate", json=request.model_dump())
        _raise_for(response)
        renewed = RenewalResponse.model_validate(response.json())
        self.files.install(renewed.certificate, renewed.ca)
        self.renewals += 1
        until = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(renewed.expires_at))
        log.info("node %s has a new certificate, valid until %s UTC", self.identity.node, until)
        self.on_renewed(Connection.mutual_tls(self.identity))


def _raise_for(response: httpx.Response) -> None:
    if response.status_code == 200:
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = body.get("code", response.status_code)
    raise RenewalFailed(f"{code}: {body.get('message') or response.text[:200]}")
