"""The checks each cluster makes, before any data flows, on what the third party
hands it for a move."""

from __future__ import annotations

import datetime as dt

import pytest

from corral.cmdlib.move_checks import check_remote_export, check_remote_import
from corral.errors import OpPrereqError
from corral.x509 import moves

SECRET = "a-shared-domain-secret"
WRONG = "not-the-shared-secret"


@pytest.fixture(scope="module")
def signed() -> str:
    return moves.sign_certificate(moves.create_move_certificate("src")[1], SECRET)


def test_remote_import_accepts_the_source_values(signed: str) -> None:
    source = check_remote_import(SECRET, moves.make_handshake(SECRET), signed, "web1")
    assert source.instance_name == "web1"
    assert source.ca_pem in signed


def test_remote_import_refuses_each_bad_value(signed: str) -> None:
    hs = moves.make_handshake(SECRET)
    with pytest.raises(OpPrereqError, match="Missing source handshake"):
        check_remote_import(SECRET, None, signed, "web1")
    with pytest.raises(moves.MoveCertificateError,
                       match=r"Invalid handshake: .*same cluster domain secret"):
        check_remote_import(SECRET, moves.make_handshake(WRONG), signed, "web1")
    with pytest.raises(OpPrereqError, match="Missing source X509 CA"):
        check_remote_import(SECRET, hs, "", "web1")
    with pytest.raises(moves.MoveCertificateError, match="Invalid source X509 CA") as err:
        check_remote_import(SECRET, hs, moves.sign_certificate(
            moves.create_move_certificate("x")[1], WRONG), "web1")
    assert err.value.check == "signature"
    old = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    expired = moves.sign_certificate(
        moves.create_move_certificate("x", validity=60, now=old)[1], SECRET)
    with pytest.raises(moves.MoveCertificateError, match=r"Invalid source X509 CA: .*expired"):
        check_remote_import(SECRET, hs, expired, "web1")
    with pytest.raises(OpPrereqError, match="Missing source instance name"):
        check_remote_import(SECRET, hs, signed, None)


def test_remote_export_accepts_and_returns_the_destinations(signed: str) -> None:
    key = moves.sign_key_name(moves.new_key_name(), SECRET)
    disks = [moves.sign_disk_info(SECRET, i, "192.0.2.9", 40000 + i, f"m{i}") for i in (0, 1)]
    target = check_remote_export(SECRET, "web1", 2, key, signed, disks)
    assert target.key_name == key[0]
    assert target.disks == [("192.0.2.9", 40000, "m0"), ("192.0.2.9", 40001, "m1")]


def test_remote_export_refuses_each_bad_value(signed: str) -> None:
    key = moves.sign_key_name(moves.new_key_name(), SECRET)
    disks = [moves.sign_disk_info(SECRET, 0, "192.0.2.9", 40000, "m0")]
    with pytest.raises(OpPrereqError, match="Missing X509 key name"):
        check_remote_export(SECRET, "web1", 1, None, signed, disks)
    with pytest.raises(OpPrereqError, match="Missing destination X509 CA"):
        check_remote_export(SECRET, "web1", 1, key, None, disks)
    with pytest.raises(OpPrereqError, match="for 1 disks, but instance web1 has 2 disks"):
        check_remote_export(SECRET, "web1", 2, key, signed, disks)
    with pytest.raises(OpPrereqError, match=r"list of the destination's disk answers"):
        check_remote_export(SECRET, "web1", 1, key, signed, "node2")
    with pytest.raises(moves.MoveCertificateError, match="HMAC for X509 key name is wrong"):
        check_remote_export(SECRET, "web1", 1, moves.sign_key_name(key[0], WRONG), signed,
                            disks)
    with pytest.raises(moves.MoveCertificateError, match="Invalid destination X509 CA"):
        check_remote_export(SECRET, "web1", 1, key, signed.replace("X-Ganeti-Signature",
                                                                   "X-Other"), disks)
    with pytest.raises(moves.MoveCertificateError, match="disk 0: HMAC is wrong"):
        check_remote_export(SECRET, "web1", 1, key, signed,
                            [["198.51.100.1", *disks[0][1:]]])
