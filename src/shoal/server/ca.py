"""The cluster's certificate authority on the server's disk (``HOME/pki``): the CA, the server's
certificate and the node certificates it signs at join.

- ``ca.key`` (0600) and ``ca.crt``: made once by ``shoal server init``, never replaced silently
  (a new CA would orphan every joined node and every token);
- ``server.key`` (0600) and ``server.crt``: the server's certificate, whose subject alternative
  names are the hosts given to ``init`` plus ``localhost`` and ``127.0.0.1``; issued again when
  the hosts change;
- node certificates: CN and DNS SAN are the node's name, extended key usage client auth only,
  signed from the node's certificate signing request (its key never leaves the node).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shoal.pki import ca_public_key_hash, key_pem, new_private_key, write_private

ALWAYS_NAMED = ("localhost", "127.0.0.1")
CA_DAYS = 3650
SERVER_DAYS = 825
NODE_DAYS = 365


class CertificateRequestError(ValueError):
    """A node's certificate signing request that cannot be signed (says why)."""


@dataclass(frozen=True, slots=True)
class PkiFiles:
    directory: Path

    @classmethod
    def of(cls, home: Path) -> PkiFiles:
        return cls(home / "pki")

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.crt"

    def exists(self) -> bool:
        return all(
            p.exists() for p in (self.ca_key, self.ca_cert, self.server_key, self.server_cert)
        )

    def ca_hash(self) -> str:
        return ca_public_key_hash(self.ca_cert.read_bytes())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def create_ca(files: PkiFiles) -> None:
    key = new_private_key()
    now = _now()
    subject = _name("shoal cluster CA")
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    write_private(files.ca_key, key_pem(key))
    files.ca_cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


def _load_ca(files: PkiFiles) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{files.ca_key} is not an EC private key")
    return key, x509.load_pem_x509_certificate(files.ca_cert.read_bytes())


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def server_hosts(files: PkiFiles) -> list[str]:
    """The names and addresses the current server certificate is valid for."""
    certificate = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(v) for v in names.get_values_for_type(x509.IPAddress)] + list(
        names.get_values_for_type(x509.DNSName)
    )


def wanted_hosts(hosts: list[str]) -> list[str]:
    return list(dict.fromkeys([*hosts, *ALWAYS_NAMED]))


def issue_server_certificate(files: PkiFiles, hosts: list[str]) -> None:
    ca_key, ca = _load_ca(files)
    key = new_private_key()
    now = _now()
    certificate = (
        _signed_by(ca, key.public_key(), _name(hosts[0]), now, SERVER_DAYS)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write_private(files.server_key, key_pem(key))
    files.server_cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


def _signed_by(
    ca: x509.Certificate,
    public_key: ec.EllipticCurvePublicKey,
    subject: x509.Name,
    now: datetime.datetime,
    days: int,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )


@dataclass(frozen=True, slots=True)
class NodeCertificate:
    pem: str
    serial: str  # hex
    fingerprint: str  # SHA-256 of the DER, hex
    expires_at: float


def sign_node_csr(files: PkiFiles, csr_pem: str, node: str) -> NodeCertificate:
    """Sign a node's request: its own key signed it, and it names ``node`` (and nothing else)."""
    try:
        request = x509.load_pem_x509_csr(csr_pem.encode())
    except ValueError as exc:
        raise CertificateRequestError(
            f"csr: not a PEM certificate signing request ({exc})"
        ) from None
    if not request.is_signature_valid:
        raise CertificateRequestError("csr: its signature does not match its public key")
    public_key = request.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        raise CertificateRequestError("csr: the key must be an EC (P-256) key")
    names = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names or names[0].value != node:
        raise CertificateRequestError(f"csr: its common name must be the node's name {node!r}")
    ca_key, ca = _load_ca(files)
    now = _now()
    certificate = (
        _signed_by(ca, public_key, _name(node), now, NODE_DAYS)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return NodeCertificate(
        pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        serial=f"{certificate.serial_number:x}",
        fingerprint=certificate.fingerprint(hashes.SHA256()).hex(),
        expires_at=certificate.not_valid_after_utc.timestamp(),
    )
