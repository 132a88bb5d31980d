"""What the server and the agent share of the cluster's trust chain: join tokens, the CA's
public-key hash that pins it, node keys and certificate signing requests, secret files.

The trust chain: ``shoal server init`` makes the cluster's CA; the CA signs the server's
certificate and, at join, each node's client certificate. A join token carries the SHA-256 of the
CA's public key (SubjectPublicKeyInfo, DER), as ``kubeadm join --discovery-token-ca-cert-hash``
does: the agent fetches the CA without trusting it, checks that hash, and from then on talks only
over TLS verified against that CA. The node's private key is made on the node and never leaves it.

Imported by the agent: nothing here may import the server, the store, the planner or the core.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import NameOID

TOKEN_PREFIX = "shoaljoin1"
TOKEN_ID_LENGTH = 8
NODE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
NODE_NAME_HINT = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
_ID = re.compile(r"^[a-z0-9]{8}$")
_SECRET = re.compile(r"^[A-Za-z0-9_-]{32,128}$")
_HASH = re.compile(r"^[0-9a-f]{64}$")
TOKEN_SHAPE = f"{TOKEN_PREFIX}.<id>.<secret>.<sha256 of the CA's public key>"


class BadJoinToken(ValueError):
    """The text given as a join token is not one (says which part is wrong)."""


@dataclass(frozen=True, slots=True)
class JoinToken:
    """``shoaljoin1.<id>.<secret>.<ca hash>``: the id names the token on the server (which keeps
    only the secret's SHA-256), the hash pins the CA the agent must find at the server."""

    token_id: str
    secret: str
    ca_hash: str  # hex SHA-256 of the CA's SubjectPublicKeyInfo

    def __str__(self) -> str:
        return f"{TOKEN_PREFIX}.{self.token_id}.{self.secret}.{self.ca_hash}"

    @classmethod
    def new(cls, ca_hash: str) -> JoinToken:
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        token_id = "".join(secrets.choice(alphabet) for _ in range(TOKEN_ID_LENGTH))
        return cls(token_id, secrets.token_urlsafe(32), ca_hash)

    @classmethod
    def parse(cls, text: str) -> JoinToken:
        parts = text.strip().split(".")
        if len(parts) != 4 or parts[0] != TOKEN_PREFIX:
            raise BadJoinToken(
                f"not a shoal join token: expected {TOKEN_SHAPE} (4 parts separated by '.'); "
                "copy the whole line `shoal node token create` printed"
            )
        _, token_id, secret, ca_hash = parts
        for value, pattern, what in (
            (token_id, _ID, "its id must be 8 lowercase letters or digits"),
            (secret, _SECRET, "its secret must be 32-128 URL-safe characters"),
            (ca_hash, _HASH, "its CA hash must be 64 hexadecimal digits"),
        ):
            if not pattern.match(value):
                raise BadJoinToken(f"the join token is damaged: {what}")
        return cls(token_id, secret, ca_hash)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def ca_public_key_hash(ca_pem: bytes) -> str:
    """Hex SHA-256 of the CA certificate's SubjectPublicKeyInfo (DER), kubeadm's pin."""
    return public_key_sha256(x509.load_pem_x509_certificate(ca_pem).public_key())


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def node_csr(key: ec.EllipticCurvePrivateKey, node: str) -> bytes:
    """A certificate signing request for ``node`` (CN and DNS SAN), signed by its own key."""
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(node)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM)


def certificate_identity(cert_pem: str) -> tuple[str, str, str]:
    """(serial as hex, common name, SHA-256 fingerprint of the DER as hex) of a certificate."""
    certificate = x509.load_pem_x509_certificate(cert_pem.encode())
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    common_name = str(names[0].value) if names else ""
    fingerprint = certificate.fingerprint(hashes.SHA256()).hex()
    return f"{certificate.serial_number:x}", common_name, fingerprint


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a file only its owner can read (0600 from creation), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(temp, 0o600)
    os.replace(temp, path)


# ---- renewal (docs/cluster.md, "Certificate renewal and CA rotation") ----

# A node renews its certificate once this share of its lifetime has passed (kubelet's certificate
# rotation renews at 70-90 %): a third of the lifetime is left to retry in if the server is away.
RENEW_FRACTION = 2 / 3


def public_key_sha256(public_key: PublicKeyTypes) -> str:
    """Hex SHA-256 of a public key's SubjectPublicKeyInfo (DER): the same key, the same hash,
    whatever certificate or request carries it (for a CA's certificate, the join token's pin)."""
    spki = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).hexdigest()


def load_private_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("not an EC private key")
    return key


def load_certificates(pem: bytes | str) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (a trust bundle holds two while the CA rotates)."""
    data = pem.encode() if isinstance(pem, str) else pem
    return x509.load_pem_x509_certificates(data)


def certificate_validity(pem: bytes | str) -> tuple[float, float]:
    """(not before, not after) of the first certificate in ``pem``, as Unix times."""
    certificate = load_certificates(pem)[0]
    return (
        certificate.not_valid_before_utc.timestamp(),
        certificate.not_valid_after_utc.timestamp(),
    )


def renewal_time(not_before: float, not_after: float, fraction: float = RENEW_FRACTION) -> float:
    """When a certificate valid from ``not_before`` to ``not_after`` is due for renewal: after
    ``fraction`` (0 < fraction < 1) of its lifetime."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the renewal fraction must be between 0 and 1, got {fraction:g}")
    return not_before + fraction * (not_after - not_before)


def key_matches(key_pem: bytes, cert_pem: bytes) -> bool:
    """Whether the private key is the one the (first) certificate certifies."""
    try:
        key = load_private_key(key_pem)
        certificate = load_certificates(cert_pem)[0]
    except (ValueError, IndexError):
        return False
    return public_key_sha256(key.public_key()) == public_key_sha256(certificate.public_key())


def csr_public_key_sha256(csr_pem: str) -> str:
    """The hash of the public key a certificate signing request asks to certify."""
    return public_key_sha256(x509.load_pem_x509_csr(csr_pem.encode()).public_key())
