"""The cluster's certificate authority on the server's disk (``HOME/pki``): the CA, the server's
certificate and the node certificates it signs at join and at renewal.

- ``ca.key`` (0600) and ``ca.crt``: made once by ``shoal server init``, never replaced silently
  (a new CA would orphan every joined node and every token); replaced only by a rotation's
  finish (``shoal admin ca finish``);
- ``ca-next.key`` (0600) and ``ca-next.crt``: the CA a rotation staged (``shoal admin ca
  rotate``). While it is there, node certificates are signed by it, clients are trusted if either
  CA signed them (the trust bundle: ``ca.crt`` then ``ca-next.crt``), and the server's own
  certificate is still the current CA's, so agents that have not renewed yet still trust it.
  ``finish`` moves it over ``ca.crt``/``ca.key`` (the old certificate is kept under ``retired/``,
  its key is deleted) and issues the server's certificate again from it;
- ``server.key`` (0600) and ``server.crt``: the server's certificate, whose subject alternative
  names are the hosts given to ``init`` plus ``localhost`` and ``127.0.0.1``; issued again when
  the hosts change;
- node certificates: CN and DNS SAN are the node's name, extended key usage client auth only,
  signed from the node's certificate signing request (its key never leaves the node).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shoal.pki import (
    ca_public_key_hash,
    key_matches,
    key_pem,
    load_certificates,
    load_private_key,
    new_private_key,
    public_key_sha256,
    write_private,
)

ALWAYS_NAMED = ("localhost", "127.0.0.1")
CA_DAYS = 3650
SERVER_DAYS = 825
NODE_DAYS = 365
NODE_LIFETIME_S = NODE_DAYS * 86400.0
CA_NAME = "shoal cluster CA"
# Certificates are valid from a little before they are made (clocks differ between machines):
# five minutes, or a twentieth of a short lifetime (a test's 20-second certificate).
BACKDATE_S = 300.0
# The CA files change only under this lock, and certificates are signed under it: two rotations
# (or a rotation and a signature) in the API's worker threads never see the files half-moved.
_FILES = threading.RLock()


class CertificateRequestError(ValueError):
    """A node's certificate signing request that cannot be signed (says why)."""


class RotationError(ValueError):
    """A CA rotation step that does not fit the state the files are in (says why)."""


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
    def next_ca_key(self) -> Path:
        return self.directory / "ca-next.key"

    @property
    def next_ca_cert(self) -> Path:
        return self.directory / "ca-next.crt"

    @property
    def retired(self) -> Path:
        return self.directory / "retired"

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
        """The current CA's public-key hash: the one join tokens pin (it signs the server's
        certificate, which a joining agent checks against it)."""
        return ca_public_key_hash(self.ca_cert.read_bytes())

    def rotating(self) -> bool:
        """A rotation is under way: a next CA is staged (its key written first, its certificate
        last, so the certificate says it is complete)."""
        return self.next_ca_cert.exists() and self.next_ca_key.exists()

    def signing_hash(self) -> str:
        """The public-key hash of the CA that signs node certificates now."""
        path = self.next_ca_cert if self.rotating() else self.ca_cert
        return ca_public_key_hash(path.read_bytes())

    def bundle(self) -> str:
        """The CA certificates to trust (PEM): the current one, then the staged one if any."""
        parts = [self.ca_cert.read_text()]
        if self.rotating():
            parts.append(self.next_ca_cert.read_text())
        return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def create_ca(files: PkiFiles) -> None:
    _make_ca(files.ca_key, files.ca_cert, CA_NAME)


def _make_ca(key_path: Path, cert_path: Path, common_name: str) -> None:
    """A self-signed CA: its key first (0600), its certificate last (its presence says the pair
    is complete)."""
    key = new_private_key()
    now = _now()
    subject = _name(common_name)
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
    write_private(key_path, key_pem(key))
    _write_public(cert_path, certificate.public_bytes(serialization.Encoding.PEM))


def _write_public(path: Path, data: bytes) -> None:
    """A certificate, written whole or not at all (a temporary file renamed over it)."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_bytes(data)
    os.replace(temp, path)


def _load_ca(
    files: PkiFiles, signing: bool = False
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The current CA's key and certificate; with ``signing``, the CA that signs node
    certificates now (the staged one during a rotation)."""
    key_path, cert_path = (
        (files.next_ca_key, files.next_ca_cert)
        if signing and files.rotating()
        else (files.ca_key, files.ca_cert)
    )
    try:
        key = load_private_key(key_path.read_bytes())
    except ValueError:
        raise ValueError(f"{key_path} is not an EC private key") from None
    return key, x509.load_pem_x509_certificate(cert_path.read_bytes())


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
    """The server's certificate, signed by the current CA (never by a staged one: agents that
    have not renewed during a rotation trust the current CA only)."""
    ca_key, ca = _load_ca(files)
    key = new_private_key()
    now = _now()
    certificate = (
        _signed_by(ca, key.public_key(), _name(hosts[0]), now, SERVER_DAYS * 86400.0)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write_private(files.server_key, key_pem(key))
    _write_public(files.server_cert, certificate.public_bytes(serialization.Encoding.PEM))


def _signed_by(
    ca: x509.Certificate,
    public_key: ec.EllipticCurvePublicKey,
    subject: x509.Name,
    now: datetime.datetime,
    lifetime_s: float,
) -> x509.CertificateBuilder:
    backdate = min(BACKDATE_S, lifetime_s / 20)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(seconds=backdate))
        .not_valid_after(now + datetime.timedelta(seconds=lifetime_s))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # which CA signed it, for verifiers holding two (a rotation's trust bundle)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    )


@dataclass(frozen=True, slots=True)
class NodeCertificate:
    pem: str
    serial: str  # hex
    fingerprint: str  # SHA-256 of the DER, hex
    expires_at: float
    ca_sha256: str  # the public-key hash of the CA that signed it
    key_sha256: str  # the public-key hash of the node's key it certifies


def sign_node_csr(
    files: PkiFiles, csr_pem: str, node: str, lifetime_s: float = NODE_LIFETIME_S
) -> NodeCertificate:
    """Sign a node's request: its own key signed it, and it names ``node`` (and nothing else).
    Signed by the CA that signs now (the staged one during a rotation), valid ``lifetime_s``."""
    with _FILES:
        return _sign_node_csr(files, csr_pem, node, lifetime_s)


def _sign_node_csr(files: PkiFiles, csr_pem: str, node: str, lifetime_s: float) -> NodeCertificate:
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
    ca_key, ca = _load_ca(files, signing=True)
    now = _now()
    certificate = (
        _signed_by(ca, public_key, _name(node), now, lifetime_s)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return NodeCertificate(
        pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        serial=f"{certificate.serial_number:x}",
        fingerprint=certificate.fingerprint(hashes.SHA256()).hex(),
        expires_at=certificate.not_valid_after_utc.timestamp(),
        ca_sha256=public_key_sha256(ca.public_key()),
        key_sha256=public_key_sha256(public_key),
    )


# ---- CA rotation (docs/cluster.md, "Rotating the CA") ----


def stage_next_ca(files: PkiFiles) -> None:
    """``shoal admin ca rotate``: make the next CA beside the current one. Its name differs
    from every earlier CA's (TLS libraries look an issuer up by name)."""
    with _FILES:
        settle(files)
        if files.rotating():
            raise RotationError(
                f"a CA rotation is under way already (next CA {files.signing_hash()[:16]}...); "
                "finish it first (`shoal admin ca finish`)"
            )
        _make_ca(files.next_ca_key, files.next_ca_cert, f"{CA_NAME} {secrets.token_hex(4)}")


def promote_next_ca(files: PkiFiles) -> Path:
    """``shoal admin ca finish``: the staged CA becomes the current one, and the server's
    certificate is issued again from it. The old CA's certificate is kept under ``retired/``
    (returned); its key is deleted. Each step can be repeated: ``settle`` completes a finish a
    crash cut short."""
    with _FILES:
        settle(files)
        if not files.rotating():
            raise RotationError(
                "no CA rotation is under way: start one with `shoal admin ca rotate`"
            )
        files.retired.mkdir(mode=0o700, exist_ok=True)
        kept = files.retired / f"ca-{files.ca_hash()[:16]}.crt"
        shutil.copyfile(files.ca_cert, kept)
        os.replace(files.next_ca_key, files.ca_key)  # from here on, settle() completes the rest
        os.replace(files.next_ca_cert, files.ca_cert)
        issue_server_certificate(files, server_hosts(files))
        return kept


def settle(files: PkiFiles) -> None:
    """Put files a crash left half-changed right: a staged CA whose key was never completed by
    its certificate is dropped; a finish cut short after moving the key is completed; a server
    certificate that does not match its key, or that the current CA did not sign, is issued
    again for the same hosts."""
    with _FILES:
        _settle(files)


def _settle(files: PkiFiles) -> None:
    if files.next_ca_key.exists() and not files.next_ca_cert.exists():
        files.next_ca_key.unlink()  # a rotate that never wrote its certificate
    if (
        files.next_ca_cert.exists()
        and not files.next_ca_key.exists()
        and files.ca_key.exists()
        and key_matches(files.ca_key.read_bytes(), files.next_ca_cert.read_bytes())
    ):
        os.replace(files.next_ca_cert, files.ca_cert)  # a finish cut short after the key
    if not (files.server_cert.exists() and files.ca_cert.exists() and files.ca_key.exists()):
        return
    server = files.server_cert.read_bytes()
    signed = issued_by(server.decode(), [files.ca_cert.read_text()])
    if not signed or not (
        files.server_key.exists() and key_matches(files.server_key.read_bytes(), server)
    ):
        issue_server_certificate(files, server_hosts(files))


def issued_by(cert_pem: str, ca_pems: list[str]) -> bool:
    """Whether one of the CA certificates signed the certificate."""
    certificate = load_certificates(cert_pem)[0]
    for ca_pem in ca_pems:
        for ca in load_certificates(ca_pem):
            try:
                certificate.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                continue
            return True
    return False


@dataclass(frozen=True, slots=True)
class CaInfo:
    sha256: str  # public-key hash (a join token's pin)
    subject: str
    not_after: float


def ca_info(path: Path) -> CaInfo:
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    return CaInfo(
        sha256=public_key_sha256(certificate.public_key()),
        subject=certificate.subject.rfc4514_string(),
        not_after=certificate.not_valid_after_utc.timestamp(),
    )
