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
    certificate = x509.load_pem_x509_certificate(ca_pem)
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).hexdigest()


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
