"""The trust chain's pieces without a network: join tokens, the CA pin, certificates."""

from __future__ import annotations

import ipaddress
import stat
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shoal.pki import (
    RENEW_FRACTION,
    BadJoinToken,
    JoinToken,
    ca_public_key_hash,
    certificate_identity,
    certificate_validity,
    csr_public_key_sha256,
    key_matches,
    key_pem,
    load_certificates,
    load_private_key,
    new_private_key,
    node_csr,
    public_key_sha256,
    renewal_time,
)
from shoal.server.ca import (
    CertificateRequestError,
    PkiFiles,
    create_ca,
    issue_server_certificate,
    issued_by,
    server_hosts,
    sign_node_csr,
    wanted_hosts,
)


@pytest.fixture
def pki(tmp_path: Path) -> PkiFiles:
    files = PkiFiles.of(tmp_path)
    create_ca(files)
    issue_server_certificate(files, wanted_hosts(["lab.example", "10.1.2.3"]))
    return files


def test_a_token_round_trips_and_carries_the_ca_hash() -> None:
    token = JoinToken.new("ab" * 32)
    text = str(token)
    assert text.startswith("shoaljoin1.") and text.count(".") == 3
    assert JoinToken.parse(text) == token
    assert JoinToken.parse(f"  {text}\n") == token
    assert JoinToken.new("ab" * 32).secret != token.secret


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "not a shoal join token"),
        ("shoaljoin2.abcdefgh." + "s" * 40 + "." + "a" * 64, "not a shoal join token"),
        ("shoaljoin1.abc." + "s" * 40 + "." + "a" * 64, "its id must be"),
        ("shoaljoin1.abcdefgh.short." + "a" * 64, "its secret must be"),
        ("shoaljoin1.abcdefgh." + "s" * 40 + "." + "z" * 64, "its CA hash must be"),
        ("shoaljoin1.abcdefgh." + "s" * 40, "not a shoal join token"),
    ],
)
def test_a_damaged_token_names_the_part(text: str, says: str) -> None:
    with pytest.raises(BadJoinToken, match=says):
        JoinToken.parse(text)


def test_the_ca_key_is_private_and_its_hash_is_of_the_public_key(pki: PkiFiles) -> None:
    assert stat.S_IMODE(pki.ca_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(pki.server_key.stat().st_mode) == 0o600
    first = ca_public_key_hash(pki.ca_cert.read_bytes())
    assert len(first) == 64 and first == pki.ca_hash()
    other = PkiFiles.of(pki.directory.parent / "other")
    create_ca(other)
    assert other.ca_hash() != first


def test_the_server_certificate_names_the_hosts_and_loopback(pki: PkiFiles) -> None:
    wanted = ["lab.example", "10.1.2.3", "localhost", "127.0.0.1"]
    assert sorted(server_hosts(pki)) == sorted(wanted)
    cert = x509.load_pem_x509_certificate(pki.server_cert.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.1.2.3") in names.get_values_for_type(x509.IPAddress)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)


def test_a_node_certificate_is_for_its_node_only_and_for_client_auth(pki: PkiFiles) -> None:
    key = new_private_key()
    signed = sign_node_csr(pki, node_csr(key, "gpu-07").decode(), "gpu-07")
    cert = x509.load_pem_x509_certificate(signed.pem.encode())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "gpu-07"
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["gpu-07"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()))
    public = cert.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.public_numbers() == key.public_key().public_numbers()  # the node's own key
    assert certificate_identity(signed.pem) == (signed.serial, "gpu-07", signed.fingerprint)
    again = sign_node_csr(pki, node_csr(new_private_key(), "gpu-07").decode(), "gpu-07")
    assert again.serial != signed.serial


def test_a_request_for_another_name_or_not_a_request_is_refused(pki: PkiFiles) -> None:
    csr = node_csr(new_private_key(), "gpu-07").decode()
    with pytest.raises(CertificateRequestError, match="common name must be the node's name"):
        sign_node_csr(pki, csr, "gpu-08")
    with pytest.raises(CertificateRequestError, match="not a PEM certificate signing request"):
        sign_node_csr(pki, "hello", "gpu-07")


# ---- renewal helpers (shoal.pki, shared with the agent) ----


def test_a_public_key_hash_is_the_same_whatever_carries_the_key(pki: PkiFiles) -> None:
    key = new_private_key()
    signed = sign_node_csr(pki, node_csr(key, "n1").decode(), "n1")
    ours = public_key_sha256(key.public_key())
    assert ours == csr_public_key_sha256(node_csr(key, "n1").decode())
    assert ours == signed.key_sha256 != public_key_sha256(new_private_key().public_key())
    ca = load_certificates(pki.ca_cert.read_bytes())[0]
    assert public_key_sha256(ca.public_key()) == pki.ca_hash() == signed.ca_sha256


def test_a_key_matches_only_its_own_certificate(pki: PkiFiles) -> None:
    key, other = new_private_key(), new_private_key()
    cert = sign_node_csr(pki, node_csr(key, "n1").decode(), "n1").pem.encode()
    assert key_matches(key_pem(key), cert)
    assert not key_matches(key_pem(other), cert)
    assert not key_matches(b"not a key", cert) and not key_matches(key_pem(key), b"junk")
    assert load_private_key(key_pem(key)).public_key().public_numbers() == (
        key.public_key().public_numbers()
    )


def test_renewal_is_due_after_the_fraction_of_the_lifetime(pki: PkiFiles) -> None:
    assert abs(RENEW_FRACTION - 2 / 3) < 1e-9
    assert renewal_time(1000.0, 1300.0) == pytest.approx(1200.0)
    assert renewal_time(1000.0, 1300.0, 0.5) == pytest.approx(1150.0)
    for bad in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            renewal_time(0.0, 1.0, bad)
    signed = sign_node_csr(pki, node_csr(new_private_key(), "n1").decode(), "n1", 20.0)
    not_before, not_after = certificate_validity(signed.pem)
    assert not_after - not_before == pytest.approx(21.0, abs=1.0)  # backdated by 1/20 only
    assert not_after == pytest.approx(signed.expires_at)
    assert time.time() < renewal_time(not_before, not_after) < not_after


def test_a_node_certificate_lasts_a_year_by_default_and_names_its_ca(pki: PkiFiles) -> None:
    signed = sign_node_csr(pki, node_csr(new_private_key(), "n1").decode(), "n1")
    not_before, not_after = certificate_validity(signed.pem)
    assert not_after - time.time() == pytest.approx(365 * 86400, abs=60)
    assert time.time() - not_before == pytest.approx(300, abs=60)  # clocks differ: 5 minutes
    cert = x509.load_pem_x509_certificate(signed.pem.encode())
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    authority = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    subject_key = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert authority.key_identifier == subject_key.digest
    assert issued_by(signed.pem, [pki.ca_cert.read_text()])
    other = PkiFiles.of(pki.directory.parent / "other")
    create_ca(other)
    assert not issued_by(signed.pem, [other.ca_cert.read_text()])
