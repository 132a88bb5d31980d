"""The agent's side of certificate renewal without a server process: the identity files swapped
whole (and repaired after a crash at any step), and the renewer's schedule, its request, its
retry with the same key after a lost answer, and the server asking for a renewal."""

from __future__ import annotations

import itertools
import json
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from shoal.agent import renewal
from shoal.agent.identity import Connection, Identity, IdentityFiles
from shoal.agent.renewal import CertificateRenewer, RenewalFailed
from shoal.pki import (
    csr_public_key_sha256,
    key_matches,
    key_pem,
    load_private_key,
    new_private_key,
    node_csr,
    public_key_sha256,
    write_private,
)
from shoal.server.ca import PkiFiles, create_ca, sign_node_csr

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def ca(tmp_path: Path) -> PkiFiles:
    files = PkiFiles.of(tmp_path / "server")
    create_ca(files)
    return files


def joined(ca: PkiFiles, home: Path, lifetime_s: float = 3600.0) -> Identity:
    """A node's identity on disk, as `shoal agent join` leaves it."""
    identity = Identity(home=str(home), server="https://127.0.0.1:9", node="n1")
    key = new_private_key()
    signed = sign_node_csr(ca, node_csr(key, "n1").decode(), "n1", lifetime_s)
    files = identity.files
    files.directory.mkdir(parents=True)
    files.key.write_bytes(key_pem(key))
    files.cert.write_text(signed.pem)
    files.ca.write_bytes(ca.ca_cert.read_bytes())
    identity.save()
    return identity


def answer_for(ca: PkiFiles, lifetime_s: float = 3600.0) -> Handler:
    """The server's renewal route, signing with the test CA."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"renew": False, "signing_ca": ca.ca_hash()})
        csr = json.loads(request.content)["csr"]
        signed = sign_node_csr(ca, csr, "n1", lifetime_s)
        return httpx.Response(
            200,
            json={
                "node": "n1",
                "certificate": signed.pem,
                "ca": ca.bundle(),
                "expires_at": signed.expires_at,
            },
        )

    return handle


def with_server(renewer: CertificateRenewer, handler: Handler) -> None:
    renewer._client = lambda: httpx.Client(  # type: ignore[method-assign]
        base_url="https://server", transport=httpx.MockTransport(handler)
    )


def test_install_swaps_key_and_certificate_whole_and_private(ca: PkiFiles, tmp_path: Path) -> None:
    identity = joined(ca, tmp_path / "home")
    files = identity.files
    key = new_private_key()
    write_private(files.next_key, key_pem(key))  # as the renewer saves it
    other = sign_node_csr(ca, node_csr(new_private_key(), "n1").decode(), "n1").pem
    with pytest.raises(ValueError, match="does not certify the key"):
        files.install(other, ca.bundle())
    signed = sign_node_csr(ca, node_csr(key, "n1").decode(), "n1").pem
    files.install(signed, ca.bundle())
    assert files.cert.read_text() == signed and key_matches(files.key.read_bytes(), signed.encode())
    assert not files.next_key.exists() and not files.next_cert.exists()
    for path in (files.key, files.cert, files.ca):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert Identity.load(tmp_path / "home") == identity


@pytest.mark.parametrize("crash", ["before the key", "between key and certificate", "stale"])
def test_settle_completes_a_swap_a_crash_cut_short(
    ca: PkiFiles, tmp_path: Path, crash: str
) -> None:
    identity = joined(ca, tmp_path / "home")
    files = identity.files
    old_cert = files.cert.read_bytes()
    key = new_private_key()
    signed = sign_node_csr(ca, node_csr(key, "n1").decode(), "n1").pem
    if crash == "before the key":  # node.crt.next written, nothing renamed yet
        files.next_key.write_bytes(key_pem(key))
        files.next_cert.write_text(signed)
    elif crash == "between key and certificate":  # node.key is new, node.crt still old
        files.key.write_bytes(key_pem(key))
        files.next_cert.write_text(signed)
    else:  # a certificate for no key on disk: dropped, the current pair kept
        files.next_cert.write_text(signed)
    Identity.load(tmp_path / "home")  # settles
    assert not files.next_cert.exists()
    assert key_matches(files.key.read_bytes(), files.cert.read_bytes())
    expected = old_cert if crash == "stale" else signed.encode()
    assert files.cert.read_bytes() == expected


def test_a_key_asked_for_but_never_answered_stays_for_the_next_attempt(
    ca: PkiFiles, tmp_path: Path
) -> None:
    identity = joined(ca, tmp_path / "home")
    renewer = CertificateRenewer(identity, lambda _: None, fraction=0.5, check_s=60)
    asked: list[str] = []

    def lost(request: httpx.Request) -> httpx.Response:
        asked.append(csr_public_key_sha256(json.loads(request.content)["csr"]))
        return httpx.Response(502, json={"code": "BadGateway", "message": "answer lost"})

    with_server(renewer, lost)
    with pytest.raises(RenewalFailed, match="BadGateway: answer lost"):
        renewer.renew()
    files = identity.files
    assert stat.S_IMODE(files.next_key.stat().st_mode) == 0o600  # saved before it was sent
    IdentityFiles(files.directory).settle()
    assert files.next_key.exists()
    renewed: list[Connection] = []
    renewer.on_renewed = renewed.append
    handle = answer_for(ca)

    def answered(request: httpx.Request) -> httpx.Response:
        asked.append(csr_public_key_sha256(json.loads(request.content)["csr"]))
        return handle(request)

    with_server(renewer, answered)
    renewer.renew()
    assert asked[0] == asked[1]  # the same new key, asked for again
    assert public_key_sha256(load_private_key(files.key.read_bytes()).public_key()) == asked[1]
    assert renewer.renewals == 1 and len(renewed) == 1
    assert renewed[0].identity == identity and renewed[0].verify is not False


def test_the_renewer_renews_when_due_and_when_the_server_asks(ca: PkiFiles, tmp_path: Path) -> None:
    identity = joined(ca, tmp_path / "home", lifetime_s=60.0)
    renewer = CertificateRenewer(identity, lambda _: None, fraction=0.5, check_s=0.2)
    not_before = time.time() - 3  # backdated by 3 s (1/20 of the lifetime)
    assert renewer.due_at() == pytest.approx(not_before + 0.5 * 63, abs=2)
    asks = {"renew": True}
    done = threading.Event()
    handle = answer_for(ca, lifetime_s=60.0)

    def server(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            body = {"renew": asks["renew"], "reason": "rotating", "signing_ca": ca.ca_hash()}
            return httpx.Response(200, json=body)
        asks["renew"] = False
        response = handle(request)
        done.set()
        return response

    with_server(renewer, server)
    first = identity.files.cert.read_bytes()
    renewer.start()
    try:
        assert done.wait(10), "the renewer did not renew when asked"
        deadline = time.monotonic() + 5
        while renewer.renewals < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert identity.files.cert.read_bytes() != first
    finally:
        renewer.stop()
    assert renewer.renewals == 1  # asked once, not due for another 30 s


def test_a_failing_server_is_retried_with_a_doubling_wait(
    ca: PkiFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = joined(ca, tmp_path / "home", lifetime_s=60.0)
    renewer = CertificateRenewer(identity, lambda _: None, fraction=0.01, check_s=60)
    monkeypatch.setattr(renewal, "RETRY_MIN_S", 0.1)
    calls: list[float] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        return httpx.Response(503, text="down")

    with_server(renewer, refuse)
    renewer.start()
    time.sleep(1.2)
    renewer.stop()
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert len(calls) >= 3 and gaps[-1] > gaps[0] >= 0.1, gaps  # 0.1, 0.2, 0.4 ...
    assert renewer.renewals == 0


def test_the_fraction_and_check_interval_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHOAL_CERT_RENEW_FRACTION", "0.8")
    monkeypatch.setenv("SHOAL_CERT_CHECK_S", "2")
    assert renewal.renew_fraction() == 0.8 and renewal.check_interval() == 2.0
    for bad in ("1", "0", "x", "1.5"):
        monkeypatch.setenv("SHOAL_CERT_RENEW_FRACTION", bad)
        assert renewal.renew_fraction() == pytest.approx(2 / 3)
    monkeypatch.delenv("SHOAL_CERT_RENEW_FRACTION")
    monkeypatch.delenv("SHOAL_CERT_CHECK_S")
    assert renewal.check_interval() == renewal.CHECK_S
