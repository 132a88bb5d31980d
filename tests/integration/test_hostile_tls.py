"""Hostile clients of a server on the network (issue 15, cluster mode in scope): a forged node
certificate, plaintext HTTP on the TLS port, garbage instead of a TLS handshake, connections that
never finish one and a flood of refused handshakes. Each is refused; the server keeps serving
its agents and users throughout, and nothing reaches the agent API without a certificate of the
cluster's CA. The server is the one `test_network_join` starts (`shoal server start`, HTTPS on
127.0.0.1)."""

from __future__ import annotations

import datetime
import socket
import ssl
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.test_network_join import PROTOCOL, Network, network, worker

assert network and worker  # fixtures, used by name


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def forged_identity(directory: Path, node: str) -> tuple[Path, Path]:
    """A CA of our own making, named like the cluster's, and a certificate for ``node`` from it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("shoal cluster CA"))
        .issuer_name(_name("shoal cluster CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(node))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "forged.crt", directory / "forged.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def _address(network: Network) -> tuple[str, int]:
    host, port = network.url.removeprefix("https://").rsplit(":", 1)
    return host, int(port)


def _still_serving(network: Network, worker: str) -> None:
    assert network.admin.health()
    assert network.wait_ready(worker, timeout_s=15)["state"] == "READY"


def test_a_forged_node_certificate_never_reaches_the_agent_api(
    network: Network, worker: str, tmp_path: Path
) -> None:
    cert, key = forged_identity(tmp_path, worker)
    context = ssl.create_default_context(cafile=str(network.ca))
    context.load_cert_chain(str(cert), str(key))
    with httpx.Client(base_url=network.url, verify=context, headers=PROTOCOL, timeout=10) as forged:
        try:
            answer = forged.post(
                "/api/v1/agent/report", json={"agent_id": "x", "nodes": [], "agent_version": "1"}
            )
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            answer = None  # the handshake was refused: the certificate is not of our CA
    assert answer is None or answer.status_code in (401, 403), answer and answer.text
    _still_serving(network, worker)


def test_plaintext_http_and_garbage_on_the_tls_port_are_dropped(
    network: Network, worker: str
) -> None:
    address = _address(network)
    for payload in (
        b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01\xff\xff" + b"\x00" * 64,  # a TLS record header announcing 64 KiB, then junk
        bytes(range(256)) * 4,
    ):
        with socket.create_connection(address, timeout=10) as raw:
            raw.sendall(payload)
            raw.settimeout(10)
            try:
                reply = raw.recv(4096)
            except (ConnectionResetError, TimeoutError):
                reply = b""
        assert b"200 OK" not in reply and b'"status"' not in reply, reply[:200]
    _still_serving(network, worker)


def test_connections_that_never_finish_a_handshake_do_not_stop_the_server(
    network: Network, worker: str
) -> None:
    address = _address(network)
    idle = [socket.create_connection(address, timeout=10) for _ in range(64)]
    half = []
    try:
        for _ in range(16):  # a ClientHello's first bytes, then silence
            sock = socket.create_connection(address, timeout=10)
            sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            half.append(sock)
        _still_serving(network, worker)
        for _ in range(50):  # refused handshakes, one after another: no client certificate trust
            context = ssl.create_default_context()  # does not trust the cluster's CA
            with (
                socket.create_connection(address, timeout=10) as sock,
                pytest.raises(ssl.SSLError),
            ):
                context.wrap_socket(sock, server_hostname="127.0.0.1")
        _still_serving(network, worker)
    finally:
        for sock in idle + half:
            sock.close()
