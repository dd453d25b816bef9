"""Signing and verification of the certificates, key names, handshakes and disk
destinations handed between two clusters during an instance move."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from corral.errors import OpPrereqError, ParameterError
from corral.x509 import moves

SECRET = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"
RECORDED = json.loads(
    (Path(__file__).parents[1] / "data/ganeti-moves/prepare-export.json").read_text())


@pytest.fixture(scope="module")
def cert() -> tuple[bytes, bytes]:
    return moves.create_move_certificate("node1.example.com")


def test_signed_certificate_has_the_header_then_an_empty_line_then_the_pem(cert):
    _key, pem = cert
    signed = moves.sign_certificate(pem, SECRET, salt="abc123")
    header, body = signed.split("\n\n", 1)
    assert header.startswith("X-Ganeti-Signature: abc123/")
    assert body == pem.decode()
    digest = header.split("/", 1)[1]
    assert digest == moves.hmac_sha1(SECRET, pem.decode(), "abc123")
    verified = moves.verify_signed_certificate(signed, SECRET)
    assert verified.pem == pem.decode()
    assert verified.salt == "abc123"


def test_move_key_is_rsa_and_certificate_is_self_signed_for_a_day(cert):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key_pem, pem = cert
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    parsed = x509.load_pem_x509_certificate(pem)
    assert parsed.issuer == parsed.subject
    assert parsed.public_key() == key.public_key()
    life = parsed.not_valid_after_utc - parsed.not_valid_before_utc
    assert life == dt.timedelta(seconds=moves.RIE_CERT_VALIDITY)


def test_a_certificate_made_by_ganeti_verifies_with_its_domain_secret():
    """Ganeti 3.0's own prepare-export answer (recorded) passes our checks: the
    header form, the salt, the key name and the handshake are the same."""
    secret = moves.read_domain_secret(RECORDED["cluster_domain_secret"])
    result = RECORDED["opresult"]
    at = dt.datetime(2026, 11, 26, 20, 0, tzinfo=dt.UTC)
    verified = moves.verify_signed_certificate(result["x509_ca"], secret, now=at)
    assert verified.salt == result["x509_key_name"][2]
    assert moves.verify_key_name(result["x509_key_name"], secret) == result["x509_key_name"][0]
    moves.check_handshake(result["handshake"], secret)
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(result["x509_ca"], SECRET, now=at)
    assert err.value.check == "signature"


def test_our_signature_matches_ganetis_for_the_same_certificate_and_salt():
    secret = moves.read_domain_secret(RECORDED["cluster_domain_secret"])
    signed = RECORDED["opresult"]["x509_ca"]
    header, pem = signed.split("\n\n", 1)
    salt = header.split(": ")[1].split("/")[0]
    assert moves.sign_certificate(pem, secret, salt=salt) == signed


def test_a_foreign_certificate_signed_with_another_secret_is_refused(cert):
    signed = moves.sign_certificate(cert[1], OTHER)
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(signed, SECRET)
    assert err.value.check == "signature"
    assert "cluster domain secret" in str(err.value)
    assert isinstance(err.value, OpPrereqError)


def test_a_tampered_certificate_is_refused():
    _, other_pem = moves.create_move_certificate("attacker")
    genuine = moves.sign_certificate(moves.create_move_certificate("node1")[1], SECRET)
    header = genuine.split("\n\n", 1)[0]
    swapped = f"{header}\n\n{other_pem.decode()}"
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(swapped, SECRET)
    assert err.value.check == "signature"
    assert "modified" in str(err.value)


def test_a_changed_digest_is_refused(cert):
    signed = moves.sign_certificate(cert[1], SECRET, salt="s1")
    header, body = signed.split("\n\n", 1)
    digest = header.rsplit("/", 1)[1]
    flipped = digest[:-1] + ("0" if digest[-1] != "0" else "1")
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(f"{header[:-len(digest)]}{flipped}\n\n{body}", SECRET)
    assert err.value.check == "signature"


def test_an_unsigned_certificate_is_refused(cert):
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(cert[1], SECRET)
    assert err.value.check == "unsigned"
    assert "X-Ganeti-Signature" in str(err.value)


@pytest.mark.parametrize("text", [
    "X-Ganeti-Signature: abc/def\n\nnot a certificate",
    "X-Ganeti-Signature: abc/def\n\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    b"\xff\xfe",
    42,
])
def test_a_malformed_certificate_is_refused(text):
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(text, SECRET)
    assert err.value.check == "malformed"


def test_an_expired_certificate_is_refused_naming_the_end():
    made = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    _, pem = moves.create_move_certificate("node1", validity=60, now=made)
    signed = moves.sign_certificate(pem, SECRET)
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(signed, SECRET)
    assert err.value.check == "expired"
    assert "2020-01-01 00:01:00" in str(err.value)
    moves.verify_signed_certificate(signed, SECRET, now=made + dt.timedelta(seconds=30))


def test_a_certificate_not_yet_valid_is_refused():
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    _, pem = moves.create_move_certificate("node1", now=later)
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(moves.sign_certificate(pem, SECRET), SECRET)
    assert err.value.check == "not-yet-valid"
    assert "clocks" in str(err.value)


def test_the_signature_is_checked_before_the_expiry():
    """A forged certificate is reported as forged, not as expired."""
    _, pem = moves.create_move_certificate(
        "node1", validity=60, now=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    with pytest.raises(moves.MoveCertificateError) as err:
        moves.verify_signed_certificate(moves.sign_certificate(pem, OTHER), SECRET)
    assert err.value.check == "signature"


def test_salts_with_other_characters_are_refused(cert):
    with pytest.raises(ParameterError, match="salt"):
        moves.sign_certificate(cert[1], SECRET, salt="a/b")


def test_key_name_round_trip_and_refusals():
    name = moves.new_key_name()
    assert moves.KEY_NAME_RE.match(name)
    signed = moves.sign_key_name(name, SECRET)
    assert moves.verify_key_name(signed, SECRET) == name
    with pytest.raises(moves.MoveCertificateError, match="HMAC for X509 key name is wrong"):
        moves.verify_key_name(signed, OTHER)
    forged = moves.sign_key_name("../../etc", SECRET)
    with pytest.raises(moves.MoveCertificateError, match="invalid X509 key name") as err:
        moves.verify_key_name(forged, SECRET)
    assert err.value.check == "malformed"
    with pytest.raises(moves.MoveCertificateError, match=r"\[name, hmac, salt\]"):
        moves.verify_key_name([name, signed[1]], SECRET)


def test_key_names_are_unique():
    assert len({moves.new_key_name() for _ in range(50)}) == 50


def test_handshake_round_trip_wrong_secret_and_version():
    handshake = moves.make_handshake(SECRET)
    assert handshake[0] == moves.RIE_VERSION
    moves.check_handshake(handshake, SECRET)
    with pytest.raises(moves.MoveCertificateError, match="same cluster domain secret"):
        moves.check_handshake(handshake, OTHER)
    salt = "abcd"
    other_version = [1, moves.hmac_sha1(SECRET, f"1:{moves.RIE_HANDSHAKE}", salt), salt]
    with pytest.raises(moves.MoveCertificateError, match="local=0, remote=1"):
        moves.check_handshake(other_version, SECRET)
    with pytest.raises(moves.MoveCertificateError, match="handshake"):
        moves.check_handshake("hello", SECRET)


def test_disk_destination_round_trip_and_redirection_refused():
    info = moves.sign_disk_info(SECRET, 0, "192.0.2.5", 40123, "magic0")
    assert moves.check_disk_info(info, 0, SECRET) == ("192.0.2.5", 40123, "magic0")
    redirected = ["203.0.113.9", *info[1:]]
    with pytest.raises(moves.MoveCertificateError, match="disk 0: HMAC is wrong"):
        moves.check_disk_info(redirected, 0, SECRET)
    with pytest.raises(moves.MoveCertificateError, match="disk 1: HMAC is wrong"):
        moves.check_disk_info(info, 1, SECRET)  # another disk's destination
    with pytest.raises(moves.MoveCertificateError, match="missing host, port or magic"):
        moves.check_disk_info(["", 1, "m", "x", "y"], 0, SECRET)
    with pytest.raises(moves.MoveCertificateError, match=r"\[host, port, magic, hmac, salt\]"):
        moves.check_disk_info(info[:4], 0, SECRET)


def test_domain_secret_is_the_first_line_and_never_empty():
    assert moves.read_domain_secret(b"abc\n") == "abc"
    with pytest.raises(ParameterError, match="empty"):
        moves.read_domain_secret("\n")
