"""Certificate renewal and CA rotation without agents: the CA files through a rotation (and the
crashes ``settle`` repairs), the live TLS context of a running server, the renewal and rotation
rules of ``services.certificates`` on a real store, and migration 0025."""

from __future__ import annotations

import os
import socket
import sqlite3
import ssl
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from shoal.pki import (
    JoinToken,
    key_matches,
    key_pem,
    load_certificates,
    new_private_key,
    node_csr,
)
from shoal.protocol import JoinRequest, RenewalRequest
from shoal.server.app import prepare
from shoal.server.auth import Principal
from shoal.server.ca import (
    CA_NAME,
    PkiFiles,
    RotationError,
    create_ca,
    issue_server_certificate,
    issued_by,
    promote_next_ca,
    server_hosts,
    settle,
    sign_node_csr,
    stage_next_ca,
    wanted_hosts,
)
from shoal.server.context import ApiError, ServerContext
from shoal.server.services import certificates, joining
from shoal.server.settings import ServerSettings, node_cert_lifetime_from_env
from shoal.server.tls import LiveTls
from shoal.store.models import AuditEventRow, NodeCertRow, NodeEventRow
from tests.server.migrations import MigrationSteps

ADMIN = Principal(user="admin", is_admin=True, kind="user")


@pytest.fixture
def pki(tmp_path: Path) -> PkiFiles:
    files = PkiFiles.of(tmp_path / "home")
    create_ca(files)
    issue_server_certificate(files, wanted_hosts(["lab.example"]))
    return files


def _subject(path: Path) -> str:
    return x509.load_pem_x509_certificate(path.read_bytes()).subject.rfc4514_string()


# ---- the files ----


def test_a_rotation_stages_a_ca_of_another_name_that_signs_nodes_from_then_on(
    pki: PkiFiles,
) -> None:
    old_hash, old_server = pki.ca_hash(), pki.server_cert.read_bytes()
    assert not pki.rotating() and pki.bundle().count("BEGIN CERTIFICATE") == 1
    stage_next_ca(pki)
    assert pki.rotating() and stat.S_IMODE(pki.next_ca_key.stat().st_mode) == 0o600
    assert pki.ca_hash() == old_hash  # tokens still pin the current CA
    assert pki.signing_hash() != old_hash
    assert _subject(pki.next_ca_cert) != _subject(pki.ca_cert)  # issuers are looked up by name
    assert _subject(pki.next_ca_cert).startswith(f"CN={CA_NAME} ")
    bundle = load_certificates(pki.bundle())
    assert [c.subject for c in bundle] == [
        x509.load_pem_x509_certificate(p.read_bytes()).subject
        for p in (pki.ca_cert, pki.next_ca_cert)
    ]
    assert pki.server_cert.read_bytes() == old_server  # agents not renewed yet trust the old CA
    signed = sign_node_csr(pki, node_csr(new_private_key(), "n1").decode(), "n1")
    assert signed.ca_sha256 == pki.signing_hash()
    assert issued_by(signed.pem, [pki.next_ca_cert.read_text()])
    assert not issued_by(signed.pem, [pki.ca_cert.read_text()])
    with pytest.raises(RotationError, match="under way already"):
        stage_next_ca(pki)


def test_finish_makes_the_next_ca_current_and_reissues_the_server_certificate(
    pki: PkiFiles,
) -> None:
    old_cert = pki.ca_cert.read_text()
    stage_next_ca(pki)
    new_hash, new_cert = pki.signing_hash(), pki.next_ca_cert.read_text()
    kept = promote_next_ca(pki)
    assert kept.read_text() == old_cert and kept.parent == pki.retired
    assert pki.ca_hash() == new_hash and pki.ca_cert.read_text() == new_cert
    assert not pki.rotating() and not pki.next_ca_key.exists()
    assert key_matches(pki.ca_key.read_bytes(), pki.ca_cert.read_bytes())
    assert stat.S_IMODE(pki.ca_key.stat().st_mode) == 0o600
    assert not list(pki.retired.glob("*.key"))  # the old CA's key is gone
    assert issued_by(pki.server_cert.read_text(), [new_cert])
    assert sorted(server_hosts(pki)) == sorted(wanted_hosts(["lab.example"]))
    assert pki.bundle() == new_cert
    with pytest.raises(RotationError, match="no CA rotation is under way"):
        promote_next_ca(pki)


def test_settle_completes_what_a_crash_cut_short(pki: PkiFiles) -> None:
    settle(pki)  # nothing to do
    stage_next_ca(pki)
    pki.next_ca_cert.unlink()  # a rotate that died before writing its certificate
    settle(pki)
    assert not pki.next_ca_key.exists() and not pki.rotating()

    stage_next_ca(pki)
    new_cert = pki.next_ca_cert.read_text()
    os.replace(pki.next_ca_key, pki.ca_key)  # a finish that died after moving the key
    settle(pki)
    assert pki.ca_cert.read_text() == new_cert and not pki.next_ca_cert.exists()
    assert issued_by(pki.server_cert.read_text(), [new_cert])  # and before the server's cert

    pki.server_key.write_bytes(key_pem(new_private_key()))  # a server key without its cert
    settle(pki)
    assert key_matches(pki.server_key.read_bytes(), pki.server_cert.read_bytes())


# ---- the live TLS context ----


class _TlsServer:
    """A TLS listener on loopback that answers each connection with its client's CN."""

    def __init__(self, base: ssl.SSLContext) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.base = base
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.base.wrap_socket(conn, server_side=True) as tls:
                    cert = tls.getpeercert()
                    names = [v for rdn in (cert or {}).get("subject", ()) for k, v in rdn]
                    tls.sendall(("cn=" + ",".join(names)).encode())
            except (ssl.SSLError, OSError):
                conn.close()

    def ask(self, trust: list[Path], client: tuple[Path, Path] | None) -> str:
        context = ssl.create_default_context()
        for path in trust:
            context.load_verify_locations(cafile=str(path))
        if client is not None:
            context.load_cert_chain(str(client[0]), str(client[1]))
        try:
            with (
                socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw,
                context.wrap_socket(raw, server_hostname="localhost") as tls,
            ):
                return tls.recv(100).decode() or "closed"
        except (ssl.SSLError, OSError) as exc:
            return f"refused: {type(exc).__name__}"

    def close(self) -> None:
        self.sock.close()


def _node_files(pki: PkiFiles, node: str, where: Path) -> tuple[Path, Path]:
    key = new_private_key()
    signed = sign_node_csr(pki, node_csr(key, node).decode(), node)
    (where / f"{node}.key").write_bytes(key_pem(key))
    (where / f"{node}.crt").write_text(signed.pem)
    return where / f"{node}.crt", where / f"{node}.key"


@pytest.fixture
def live(pki: PkiFiles) -> Iterator[tuple[LiveTls, _TlsServer]]:
    base = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # as uvicorn makes it: the files at start
    base.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    base.load_verify_locations(cafile=str(pki.ca_cert))
    base.verify_mode = ssl.CERT_OPTIONAL
    tls = LiveTls(pki)
    tls.install(base)
    server = _TlsServer(base)
    yield tls, server
    server.close()


def test_the_running_server_trusts_both_cas_during_a_rotation_and_the_new_one_after(
    pki: PkiFiles, live: tuple[LiveTls, _TlsServer], tmp_path: Path
) -> None:
    tls, server = live
    old_ca = tmp_path / "old-ca.crt"
    old_ca.write_bytes(pki.ca_cert.read_bytes())
    old_node = _node_files(pki, "old", tmp_path)
    assert server.ask([old_ca], old_node) == "cn=old"
    assert server.ask([old_ca], None) == "cn="  # users come without a certificate

    stage_next_ca(pki)
    new_ca = tmp_path / "new-ca.crt"
    new_ca.write_bytes(pki.next_ca_cert.read_bytes())
    new_node = _node_files(pki, "new", tmp_path)
    assert server.ask([old_ca], new_node).startswith("refused")  # not reloaded yet
    tls.reload()
    assert server.ask([old_ca], new_node) == "cn=new"  # the server's certificate: still old
    assert server.ask([old_ca], old_node) == "cn=old"

    promote_next_ca(pki)
    tls.reload()
    assert server.ask([new_ca], new_node) == "cn=new"  # the server's certificate: the new CA's
    assert server.ask([old_ca], new_node).startswith("refused")
    assert server.ask([old_ca, new_ca], old_node).startswith("refused")  # the old CA: dropped


# ---- the rules, on a store ----


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ServerContext]:
    home = tmp_path / "server"
    files = PkiFiles.of(home)
    create_ca(files)
    issue_server_certificate(files, wanted_hosts(["127.0.0.1"]))
    context = prepare(ServerSettings(home=home, tls=True, node_cert_lifetime_s=3600.0))
    yield context
    context.db.dispose()


class _Node:
    """A joined node as the server sees it: its name, key and certificate."""

    def __init__(self, ctx: ServerContext, name: str) -> None:
        token = JoinToken.parse(str(joining.create_token(ctx, ADMIN, 600, 1).token))
        self.name = name
        self.key = new_private_key()
        joined = joining.join(
            ctx,
            JoinRequest(
                token_id=token.token_id,
                secret=token.secret,
                node=name,
                csr=node_csr(self.key, name).decode(),
            ),
        )
        self.pem = joined.certificate
        self.principal = Principal(user=f"node:{name}", is_admin=False, kind="node", node=name)

    def renew(self, ctx: ServerContext, key: object = None, pem: str | None = None) -> str:
        key = key or new_private_key()
        request = RenewalRequest(csr=node_csr(key, self.name).decode())  # type: ignore[arg-type]
        return certificates.renew(ctx, self.principal, pem or self.pem, request).certificate


def _refused(code: str, call: object, *args: object) -> str:
    with pytest.raises(ApiError) as refused:
        call(*args)  # type: ignore[operator]
    assert refused.value.code == code, refused.value.message
    return refused.value.message


def test_a_renewal_is_recorded_for_the_same_node_and_audited(ctx: ServerContext) -> None:
    n1 = _Node(ctx, "n1")
    key = new_private_key()
    renewed = n1.renew(ctx, key)
    assert key_matches(key_pem(key), renewed.encode())
    cert = x509.load_pem_x509_certificate(renewed.encode())
    assert cert.subject.rfc4514_string() == "CN=n1"
    with ctx.db.read() as session:
        rows = session.query(NodeCertRow).filter_by(node="n1").order_by(NodeCertRow.issued_at)
        first, second = list(rows)
        events = [e.kind for e in session.query(NodeEventRow).filter_by(node="n1")]
        actions = [a.action for a in session.query(AuditEventRow)]
    assert second.serial == f"{cert.serial_number:x}" and second.revoked_at is None
    assert first.revoked_at is None  # not revoked: it expires on its own
    assert second.join_token == first.join_token and second.ca_sha256 == first.ca_sha256
    assert second.expires_at - second.issued_at == pytest.approx(3600, abs=5)
    assert events == ["joined", "renewed"] and "node.renew" in actions


def test_only_the_newest_certificate_renews_unless_it_asks_again_for_its_key(
    ctx: ServerContext,
) -> None:
    n1 = _Node(ctx, "n1")
    key = new_private_key()
    newest = n1.renew(ctx, key)
    message = _refused("SupersededCertificateError", n1.renew, ctx)
    assert "only a node's newest certificate renews" in message
    again = n1.renew(ctx, key)  # the answer was lost: the same key from the old certificate
    assert key_matches(key_pem(key), again.encode()) and again != newest
    n1.renew(ctx, new_private_key(), pem=again)  # from the newest, as ever


def test_a_renewal_needs_a_new_key_a_live_certificate_and_a_node(ctx: ServerContext) -> None:
    n1 = _Node(ctx, "n1")
    assert "a renewal needs a new key" in _refused(
        "InvalidCertificateRequest", n1.renew, ctx, n1.key
    )
    user = Principal(user="alice", is_admin=False, kind="user")
    request = RenewalRequest(csr=node_csr(new_private_key(), "n1").decode())
    _refused("ForbiddenUserError", certificates.renew, ctx, user, n1.pem, request)
    _refused("ForbiddenUserError", certificates.renew, ctx, n1.principal, None, request)
    now = ctx.clock
    ctx.clock = lambda: now() + 7200  # past its hour
    assert "join the node again" in _refused("CertificateExpiredError", n1.renew, ctx)
    ctx.clock = now
    joining.remove_node(ctx, ADMIN, "n1", force=False)
    _refused("NodeRemovedError", n1.renew, ctx)


def test_a_rotation_asks_old_certificates_to_renew_and_finish_waits_for_them(
    ctx: ServerContext,
) -> None:
    n1 = _Node(ctx, "n1")
    _Node(ctx, "n2")  # its agent never renews
    files = PkiFiles.of(ctx.settings.home)
    assert not certificates.status(ctx, n1.principal, n1.pem).renew
    _refused("NoCaRotation", certificates.finish, ctx, ADMIN, False)
    user = Principal(user="alice", is_admin=False, kind="user")
    _refused("ForbiddenUserError", certificates.rotate, ctx, user)

    state = certificates.rotate(ctx, ADMIN)
    assert state.next is not None and state.pending == ["n1", "n2"]
    _refused("CaRotationUnderWay", certificates.rotate, ctx, ADMIN)
    asked = certificates.status(ctx, n1.principal, n1.pem)
    assert asked.renew and "being rotated" in (asked.reason or "")
    assert asked.signing_ca == state.next.sha256
    n1.pem = n1.renew(ctx)
    assert issued_by(n1.pem, [files.next_ca_cert.read_text()])
    assert not certificates.status(ctx, n1.principal, n1.pem).renew
    assert certificates.state(ctx, ADMIN).pending == ["n2"]
    valid_token = joining.create_token(ctx, ADMIN, 600, 1).token

    message = _refused("NodesOnOldCaError", certificates.finish, ctx, ADMIN, False)
    assert "n2" in message and "--force" in message
    finished = certificates.finish(ctx, ADMIN, True)
    assert finished.next is None and finished.current.sha256 == state.next.sha256
    assert finished.removed == ("n2",) and finished.revoked_tokens == 1
    assert [n.node for n in finished.nodes] == ["n1"] and finished.nodes[0].ca == "current"
    with ctx.db.read() as session:
        live = {r.node for r in session.query(NodeCertRow).filter_by(revoked_at=None)}
    assert live == {"n1"}  # every certificate of the old CA is revoked, n1's first one too
    request = JoinRequest(
        token_id=valid_token.token_id,
        secret=valid_token.secret,
        node="n9",
        csr=node_csr(new_private_key(), "n9").decode(),
    )
    _refused("JoinTokenRevoked", joining.join, ctx, request)  # it pinned the old CA
    assert JoinToken.parse(str(joining.create_token(ctx, ADMIN, 600, 1).token)).ca_hash == (
        files.ca_hash()
    )


def test_the_node_certificate_lifetime_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SHOAL_NODE_CERT_LIFETIME_S", raising=False)
    assert node_cert_lifetime_from_env() == 365 * 86400
    monkeypatch.setenv("SHOAL_NODE_CERT_LIFETIME_S", "20")
    assert ServerSettings(home=Path("/nowhere")).node_cert_lifetime_s == 20.0
    for bad in ("soon", "5", "-1", "inf"):
        monkeypatch.setenv("SHOAL_NODE_CERT_LIFETIME_S", bad)
        with pytest.raises(ValueError, match="SHOAL_NODE_CERT_LIFETIME_S"):
            node_cert_lifetime_from_env()


def test_migration_0025_adds_the_ca_and_key_of_each_certificate(tmp_path: Path) -> None:
    store = MigrationSteps(tmp_path)
    store.migrate("upgrade", "0024")
    with sqlite3.connect(store.path) as raw:
        raw.execute(
            "INSERT INTO node_certs (serial, node, fingerprint, join_token, labels, issued_at, "
            "expires_at) VALUES ('ab', 'n1', 'ff', 'tok', '{}', 1.0, 2.0)"
        )
    store.migrate("upgrade", "0025")
    with sqlite3.connect(store.path) as raw:
        columns = {r[1] for r in raw.execute("PRAGMA table_info(node_certs)")}
        row = raw.execute("SELECT serial, ca_sha256, key_sha256 FROM node_certs").fetchone()
    assert {"ca_sha256", "key_sha256"} <= columns
    assert row == ("ab", None, None)  # the first CA's, key unknown
    store.migrate("downgrade", "0024")
    with sqlite3.connect(store.path) as raw:
        columns = {r[1] for r in raw.execute("PRAGMA table_info(node_certs)")}
        kept = raw.execute("SELECT serial FROM node_certs").fetchall()
    assert "ca_sha256" not in columns and kept == [("ab",)]
    store.close()
