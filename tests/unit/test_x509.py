"""Cluster CA, node certificates, mutual TLS, secret files and RAPI users."""

from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509 as cx509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from corral.errors import ParameterError
from corral.rapi.users import (
    RapiUser,
    check_rapi_password,
    generate_rapi_users_file,
    parse_rapi_users_file,
    rapi_ha1,
)
from corral.x509 import (
    client_context,
    create_ca,
    generate_hmac_key,
    load_cert_info,
    random_password,
    server_context,
    sign_node_cert,
    verify_signed_by,
    write_private,
    write_public,
)


@dataclass
class Pki:
    ca_cert: bytes
    ca_key: bytes
    node_cert: bytes
    node_key: bytes


@pytest.fixture(scope="module")
def pki() -> Pki:
    ca_cert, ca_key = create_ca("corral cluster CA", 365)
    node_cert, node_key = sign_node_cert(
        ca_cert, ca_key, "node1.example.com", ["127.0.0.1", "2001:db8::1"], 30
    )
    return Pki(ca_cert, ca_key, node_cert, node_key)


@pytest.fixture(scope="module")
def other_pki() -> Pki:
    ca_cert, ca_key = create_ca("corral cluster CA", 365)  # same name, other key
    node_cert, node_key = sign_node_cert(ca_cert, ca_key, "intruder", ["127.0.0.1"], 30)
    return Pki(ca_cert, ca_key, node_cert, node_key)


# -- certificates ------------------------------------------------------------------


def test_ca_is_a_ca(pki: Pki) -> None:
    cert = cx509.load_pem_x509_certificate(pki.ca_cert)
    constraints = cert.extensions.get_extension_for_class(cx509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    usage = cert.extensions.get_extension_for_class(cx509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert cert.subject == cert.issuer
    assert verify_signed_by(pki.ca_cert, pki.ca_cert)
    assert b"PRIVATE KEY" in pki.ca_key


def test_node_cert_is_for_server_and_client(pki: Pki) -> None:
    cert = cx509.load_pem_x509_certificate(pki.node_cert)
    eku = cert.extensions.get_extension_for_class(cx509.ExtendedKeyUsage).value
    assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not cert.extensions.get_extension_for_class(cx509.BasicConstraints).value.ca
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "node1.example.com"
    )


def test_ca_signs_node_cert(pki: Pki) -> None:
    assert verify_signed_by(pki.node_cert, pki.ca_cert)
    assert verify_signed_by(pki.node_cert.decode(), pki.ca_cert.decode())


def test_cert_of_another_ca_is_refused(pki: Pki, other_pki: Pki) -> None:
    assert not verify_signed_by(other_pki.node_cert, pki.ca_cert)
    assert not verify_signed_by(pki.node_cert, other_pki.ca_cert)
    assert not verify_signed_by(pki.node_cert, pki.node_cert)


def test_verify_refuses_garbage(pki: Pki) -> None:
    with pytest.raises(ParameterError, match="not a PEM certificate"):
        verify_signed_by(b"hello", pki.ca_cert)


def test_cert_info(pki: Pki) -> None:
    info = load_cert_info(pki.node_cert)
    assert info.subject_cn == "node1.example.com"
    assert info.issuer_cn == "corral cluster CA"
    assert info.dns_names == ["node1.example.com"]
    assert info.ip_addresses == ["127.0.0.1", "2001:db8::1"]
    assert not info.is_ca
    now = dt.datetime.now(dt.UTC)
    assert info.not_before < now
    assert dt.timedelta(days=29) < info.not_after - now <= dt.timedelta(days=30)
    assert not info.expires_within(dt.timedelta(days=29))
    assert info.expires_within(dt.timedelta(days=31))
    digest = cx509.load_pem_x509_certificate(pki.node_cert).fingerprint(hashes.SHA256())
    assert info.fingerprint_sha256 == digest.hex(":").upper()
    assert len(info.fingerprint_sha256) == 32 * 3 - 1
    assert load_cert_info(pki.ca_cert).is_ca


def test_node_cert_does_not_outlive_the_ca(pki: Pki) -> None:
    cert, _ = sign_node_cert(pki.ca_cert, pki.ca_key, "n", [], 10 * 365)
    assert load_cert_info(cert).not_after <= load_cert_info(pki.ca_cert).not_after


def test_bad_inputs(pki: Pki, other_pki: Pki) -> None:
    with pytest.raises(ParameterError, match=r"'300\.1\.1\.1'"):
        sign_node_cert(pki.ca_cert, pki.ca_key, "n", ["300.1.1.1"], 1)
    with pytest.raises(ParameterError, match="does not belong"):
        sign_node_cert(pki.ca_cert, other_pki.ca_key, "n", [], 1)
    with pytest.raises(ParameterError, match="at least one day"):
        create_ca("ca", 0)
    with pytest.raises(ParameterError, match="private key"):
        sign_node_cert(pki.ca_cert, b"nope", "n", [], 1)


def test_rsa_ca_can_sign() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = cx509.Name([cx509.NameAttribute(NameOID.COMMON_NAME, "imported")])
    now = dt.datetime.now(dt.UTC)
    ca = (
        cx509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(cx509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(cx509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    cert, _ = sign_node_cert(ca_pem, key_pem, "n", [], 1)
    assert verify_signed_by(cert, ca_pem)


# -- mutual TLS --------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki_files(pki: Pki, other_pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("pki")
    client_cert, client_key = sign_node_cert(pki.ca_cert, pki.ca_key, "node2", ["127.0.0.2"], 1)
    for name, data in {
        "ca.pem": pki.ca_cert,
        "server.pem": pki.node_cert,
        "server-key.pem": pki.node_key,
        "client.pem": client_cert,
        "client-key.pem": client_key,
        "other-ca.pem": other_pki.ca_cert,
        "other.pem": other_pki.node_cert,
        "other-key.pem": other_pki.node_key,
    }.items():
        (base / name).write_bytes(data)
    return base


@dataclass
class Outcome:
    server_peer_cn: str | None = None
    server_error: BaseException | None = None
    client_got: bytes | None = None
    client_error: BaseException | None = None


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> Outcome:
    outcome = Outcome()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)
    port = listener.getsockname()[1]

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                peer = tls.getpeercert(binary_form=True)
                if peer is not None:
                    outcome.server_peer_cn = load_cert_info(
                        cx509.load_der_x509_certificate(peer).public_bytes(
                            serialization.Encoding.PEM
                        )
                    ).subject_cn
                tls.sendall(b"hello")
        except (OSError, ssl.SSLError) as err:
            outcome.server_error = err
        finally:
            listener.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            # With TLS 1.3 a refused client certificate shows on the first read.
            outcome.client_got = tls.recv(5)
    except (OSError, ssl.SSLError) as err:
        outcome.client_error = err
    thread.join(5)
    return outcome


def test_mutual_tls_between_nodes(pki_files: Path) -> None:
    d = pki_files
    outcome = _handshake(
        server_context(d / "server.pem", d / "server-key.pem", d / "ca.pem"),
        client_context(d / "ca.pem", d / "client.pem", d / "client-key.pem"),
    )
    assert outcome.server_error is None
    assert outcome.client_got == b"hello"
    assert outcome.server_peer_cn == "node2"


def test_client_without_certificate_is_refused(pki_files: Path) -> None:
    d = pki_files
    outcome = _handshake(
        server_context(d / "server.pem", d / "server-key.pem", d / "ca.pem"),
        client_context(d / "ca.pem"),
    )
    assert isinstance(outcome.server_error, ssl.SSLError)
    assert outcome.client_got in (None, b"")


def test_client_with_certificate_of_another_ca_is_refused(pki_files: Path) -> None:
    d = pki_files
    outcome = _handshake(
        server_context(d / "server.pem", d / "server-key.pem", d / "ca.pem"),
        client_context(d / "ca.pem", d / "other.pem", d / "other-key.pem"),
    )
    assert isinstance(outcome.server_error, ssl.SSLError)
    assert outcome.client_got in (None, b"")


def test_server_of_another_ca_is_refused(pki_files: Path) -> None:
    d = pki_files
    outcome = _handshake(
        server_context(d / "other.pem", d / "other-key.pem", d / "other-ca.pem"),
        client_context(d / "ca.pem", d / "client.pem", d / "client-key.pem"),
    )
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)


def test_optional_client_certificate(pki_files: Path) -> None:
    d = pki_files
    outcome = _handshake(
        server_context(
            d / "server.pem", d / "server-key.pem", d / "ca.pem", require_client_cert=False
        ),
        client_context(d / "ca.pem"),
    )
    assert outcome.client_got == b"hello"


# -- files -------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_private_mode_and_content(tmp_path: Path) -> None:
    target = tmp_path / "key.pem"
    write_private(target, b"secret")
    assert target.read_bytes() == b"secret"
    assert _mode(target) == 0o400
    write_private(target, "replaced")  # replacing a read-only file works: it is a rename
    assert target.read_text() == "replaced"
    assert _mode(target) == 0o400
    assert os.listdir(tmp_path) == ["key.pem"], "no temporary file is left behind"


def test_write_public_mode(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_public(tmp_path / "cert.pem", b"cert")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "cert.pem") == 0o644


def test_private_data_is_never_readable_by_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[int] = []
    real_write = os.write

    def spying_write(fd: int, data: bytes | memoryview) -> int:
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", spying_write)
    write_private(tmp_path / "key.pem", b"x" * 100_000)
    assert modes
    assert all(mode & 0o077 == 0 for mode in modes)


def test_failed_write_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "key.pem"
    write_private(target, b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk on fire"):
        write_private(target, b"new")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["key.pem"]


def test_write_private_refuses_open_modes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="0o644"):
        write_private(tmp_path / "k", b"", 0o644)
    write_private(tmp_path / "k", b"", 0o440)  # group-readable is allowed


# -- secrets -----------------------------------------------------------------------


def test_hmac_key() -> None:
    key = generate_hmac_key()
    assert len(key) == 64
    int(key, 16)
    assert key != generate_hmac_key()


def test_random_password() -> None:
    password = random_password()
    assert len(password) >= 32
    assert not any(c.isspace() for c in password)
    assert password != random_password()


def test_ha1_matches_rfc2617() -> None:
    # md5("admin:Ganeti Remote API:s3cret"), checked once against Ganeti's own
    # VerifyBasicAuthPassword, which accepts the file generate_rapi_users_file writes.
    assert rapi_ha1("admin", "s3cret") == "3e31e64c66c7229cb477c948db434194"


def test_rapi_users_file_round_trip() -> None:
    text = generate_rapi_users_file("admin", "s3cret")
    assert "admin {HA1}3e31e64c66c7229cb477c948db434194 write\n" in text
    assert "s3cret" not in text
    users = parse_rapi_users_file(text)
    assert list(users) == ["admin"]
    admin = users["admin"]
    assert admin.can_write and admin.can_read
    assert check_rapi_password(admin, "s3cret")
    assert not check_rapi_password(admin, "wrong")


def test_rapi_users_file_parsing_like_ganeti() -> None:
    users = parse_rapi_users_file(
        "# comment\n\n  jack  abc123  read, write \nlonely\nreader {cleartext}pw read\n"
        "viewer pw\nodd {MD5}x write\nbroken {}x write\n"
    )
    assert set(users) == {"jack", "reader", "viewer", "odd", "broken"}
    assert users["jack"].options == ("read", "write")
    assert check_rapi_password(users["jack"], "abc123")
    assert check_rapi_password(users["reader"], "pw")
    assert users["reader"].can_read and not users["reader"].can_write
    assert not users["viewer"].can_read
    assert not check_rapi_password(users["odd"], "x")
    assert not check_rapi_password(users["broken"], "x")
    assert check_rapi_password(RapiUser("u", "{ha1}" + rapi_ha1("u", "p").upper(), ()), "p")


@pytest.mark.parametrize("user", ["", "two words", "#hash"])
def test_rapi_users_file_refuses_bad_names(user: str) -> None:
    with pytest.raises(ParameterError):
        generate_rapi_users_file(user, "pw")


def test_rapi_users_file_access_options() -> None:
    assert generate_rapi_users_file("ro", "pw", ("read",)).endswith(" read\n")
    with pytest.raises(ParameterError, match="'admin'"):
        generate_rapi_users_file("x", "pw", ("admin",))


# -- the master's client certificate, RAPI's certificate, the join token ---------------
def test_only_the_master_client_certificate_is_marked_as_the_master() -> None:
    from corral.x509 import is_master_client, sign_master_client_cert

    ca_cert, ca_key = create_ca("corral CA c", 2)
    master_pem, _key = sign_master_client_cert(ca_cert, ca_key, "c.example", 2)
    node_pem, _key = sign_node_cert(ca_cert, ca_key, "node1.example", ["192.0.2.1"], 2)
    der = cx509.load_pem_x509_certificate(master_pem).public_bytes(serialization.Encoding.DER)
    node_der = cx509.load_pem_x509_certificate(node_pem).public_bytes(
        serialization.Encoding.DER)
    assert is_master_client(der) and verify_signed_by(master_pem, ca_cert)
    assert not is_master_client(node_der)
    assert not is_master_client(b"not a certificate")
    usage = cx509.load_pem_x509_certificate(master_pem).extensions.get_extension_for_class(
        cx509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_self_signed_rapi_certificate_is_outside_the_cluster_ca(tmp_path: Path) -> None:
    from corral.x509 import ensure_self_signed

    ca_cert, _ca_key = create_ca("corral CA c", 2)
    cert_file, key_file = tmp_path / "rapi.pem", tmp_path / "rapi-key.pem"
    assert ensure_self_signed(cert_file, key_file, "c.example", ["c.example", "n1"],
                              ["192.0.2.1"], 2)
    info = load_cert_info(cert_file.read_bytes())
    assert info.dns_names == ["c.example", "n1"] and info.ip_addresses == ["192.0.2.1"]
    assert not info.is_ca and not verify_signed_by(cert_file.read_bytes(), ca_cert)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o400
    # Kept while it names what is asked, replaced when a name is missing.
    assert not ensure_self_signed(cert_file, key_file, "c.example", ["n1"], [], 2)
    assert ensure_self_signed(cert_file, key_file, "c.example", ["c.example", "n2"],
                              ["192.0.2.2"], 2)
    assert load_cert_info(cert_file.read_bytes()).dns_names == ["c.example", "n2"]
    # A client that pins the certificate verifies the server by its address.
    assert ensure_self_signed(cert_file, key_file, "c.example", ["c.example"],
                              ["127.0.0.1"], 2)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    outcome = _handshake(server, ssl.create_default_context(cafile=str(cert_file)))
    assert outcome.client_error is None and outcome.client_got == b"hello"


def test_join_token_binds_the_certificate_fingerprint() -> None:
    from corral.errors import JoinError
    from corral.x509 import (
        check_join_proof,
        fingerprint,
        join_proof,
        make_join_token,
        split_join_token,
    )

    ca_cert, ca_key = create_ca("waiting", 1)
    mine, _key = sign_node_cert(ca_cert, ca_key, "n", [], 1)
    other, _key = sign_node_cert(ca_cert, ca_key, "n", [], 1)
    token = make_join_token(fingerprint(mine))
    secret, bound = split_join_token(token)
    assert bound == fingerprint(mine) and len(secret) == 24
    assert secret.hex() not in token  # encoded, URL-safe, one line
    check_join_proof(token, fingerprint(mine), join_proof(secret, fingerprint(mine)))
    with pytest.raises(JoinError, match="replayed with another certificate"):
        check_join_proof(token, fingerprint(mine), join_proof(secret, fingerprint(other)))
    with pytest.raises(JoinError, match="no proof"):
        check_join_proof(token, fingerprint(mine), None)
    for bad in ("", token[::-1], token.split(".")[0], token + "x"):
        with pytest.raises(JoinError, match="invalid join token"):
            split_join_token(bad)
