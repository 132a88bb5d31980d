"""The SDK's errors and its HTTP transport: one httpx client per server (TLS verified against the
pinned cluster CA, or none for plain http:// on loopback), and the messages that say why a call
was refused. Nothing here imports the server, the store or pydantic, and httpx loads with the
first client (tests/cli/test_cli_imports.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx


class ShoalError(Exception):
    """The server said no (``status`` >= 400), with its code and message."""

    def __init__(self, status: int, code: str, message: str, problems: list[Any] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = problems or []


class UntrustedServer(ShoalError):
    """The server's certificate is not signed by a CA this client trusts (or names another
    host): a different server, or the client was not given the cluster's CA."""

    def __init__(self, url: str, detail: str, ca: str | None) -> None:
        pinned = f"the CA in {ca}" if ca else "the system's CAs (no cluster CA is pinned)"
        super().__init__(
            0,
            "UntrustedServer",
            f"the server at {url} presented a certificate that {pinned} does not trust "
            f"({detail}); pin the cluster's CA (SERVER_HOME/pki/ca.crt on the server): "
            f"`shoal config set-context NAME --server {url} --ca CA_FILE`, or $SHOAL_CA with "
            "$SHOAL_URL",
        )


class ServerUnavailable(ShoalError):
    """No server took the request (``sent`` False), or the connection was lost after it was
    sent: then it is not sent again (it may have been carried out), and the message says so."""

    def __init__(self, url: str, sent: bool = False) -> None:
        message = (
            f"the connection to {url} was lost before the server answered; the request was not "
            "sent again, as it may have been carried out: check (e.g. `shoal job list`) before "
            "repeating it"
            if sent
            else f"no shoal server answers at {url}; start one with `shoal up`"
        )
        super().__init__(0, "ServerUnavailable", message)


def _http_client(
    url: str, headers: dict[str, str], timeout: float, ca: str | None = None
) -> httpx.Client:
    import httpx

    # A plain http:// server (local mode, on loopback) involves no TLS, so the CA bundle is not
    # loaded (~50 ms of every CLI call); https:// verifies against the pinned cluster CA (``ca``)
    # or else the system's CAs.
    verify: Any = url.startswith("https://")
    if verify and ca is not None:
        import ssl

        try:
            verify = ssl.create_default_context(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise ShoalError(
                0,
                "BadCaFile",
                f"the CA file {ca} cannot be loaded ({exc}); give the cluster's "
                "CA (SERVER_HOME/pki/ca.crt) with `shoal config set-context NAME --ca FILE`",
            ) from None
    from shoal.net.failover import client_settings

    return httpx.Client(**client_settings(url, verify, headers=headers, timeout=timeout))


def _untrusted(exc: BaseException) -> str | None:
    """The certificate-verification failure behind a transport error, if that is what it is."""
    import ssl

    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for link in chain:
        if isinstance(link, ssl.SSLCertVerificationError):
            return str(link.verify_message or link)
    return next((str(link) for link in chain if "CERTIFICATE_VERIFY_FAILED" in str(link)), None)


def _refused(status: int, message: str, url: str, token_source: str | None, sent: bool) -> str:
    """A 401 that says which token was refused and where it came from."""
    if status != 401:
        return message
    if not sent:
        return (
            f"{message}: no token was sent to {url}; set $SHOAL_TOKEN, run `shoal login`, or give "
            "the context one (`shoal config set-context NAME --token-file FILE`)"
        )
    source = f"the token from {token_source}" if token_source else "the token"
    return f"{source} was refused by {url}: {message}"
