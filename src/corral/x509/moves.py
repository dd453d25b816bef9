"""Keys, certificates and signatures of inter-cluster instance moves (design 2.2).

Two clusters that move an instance trust each other through a *cluster domain
secret* they share: each side makes an RSA key and a self-signed X509 certificate
for the one move, and hands the certificate to the other side through a third party
(``move-instance`` or an administrator's script) with an HMAC-SHA1 signature made
with that secret. A third party that does not know the secret cannot forge or
redirect anything, because every value it carries is signed:

- a certificate carries an RFC 822 style header in front of its PEM text,
  ``X-Ganeti-Signature: SALT/HEXDIGEST``, then an empty line; the digest covers the
  salt followed by the PEM text from ``-----BEGIN CERTIFICATE-----`` to the end;
- the name of the source's key is handed out as ``[name, digest, salt]``;
- the handshake that proves both clusters share the secret and the protocol version
  is ``[version, digest, salt]`` over ``"VERSION:Hi, I'm Ganeti"``;
- each disk's destination, ``[host, port, magic, digest, salt]`` over
  ``"INDEX:HOST:PORT:MAGIC"``.

These forms are Ganeti 3.0's (recorded from its RAPI ``prepare-export`` answer and
verified against its domain secret), so a corral cluster and a Ganeti cluster that
share a secret accept each other's values. Every HMAC is SHA-1 of the salt
followed by the message, keyed with the secret's one line (UTF-8), as hex digits.

Verification refuses with :class:`MoveCertificateError`, whose ``check`` names the
check that failed (``malformed``, ``unsigned``, ``signature``, ``expired``,
``not-yet-valid``), before any data flows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from corral.errors import OpPrereqError, ParameterError

__all__ = [
    "KEY_NAME_RE",
    "RIE_CERT_VALIDITY",
    "RIE_HANDSHAKE",
    "RIE_VERSION",
    "SIGNATURE_HEADER",
    "MoveCertificateError",
    "VerifiedCertificate",
    "check_disk_info",
    "check_handshake",
    "create_move_certificate",
    "hmac_sha1",
    "make_handshake",
    "new_key_name",
    "new_salt",
    "read_domain_secret",
    "sign_certificate",
    "sign_disk_info",
    "sign_key_name",
    "verify_hmac_sha1",
    "verify_key_name",
    "verify_signed_certificate",
]

#: Name of the header that carries a certificate's signature.
SIGNATURE_HEADER = "X-Ganeti-Signature"
#: Version of the remote import/export protocol (Ganeti 3.0 speaks 0).
RIE_VERSION = 0
#: The text a handshake signs, after ``"VERSION:"``.
RIE_HANDSHAKE = "Hi, I'm Ganeti"
#: How long a move's certificate is valid, in seconds (one day, as Ganeti).
RIE_CERT_VALIDITY = 24 * 60 * 60
#: RSA key size of a move's key.
RSA_BITS = 2048
#: The name of a move's key: ``x509-YYYY-MM-DD_HH_MM_SS-xxxxxxxx``, safe as a file name.
KEY_NAME_RE = re.compile(r"^x509-\d{4}-\d\d-\d\d_\d\d_\d\d_\d\d-[a-z0-9_]{8}$")

_SALT_RE = re.compile(r"^[a-zA-Z0-9]+$")
_HEADER_RE = re.compile(
    rf"^{re.escape(SIGNATURE_HEADER)}:\s*(?P<salt>[a-zA-Z0-9]+)/(?P<digest>[a-zA-Z0-9]+)$")

Check = Literal["malformed", "unsigned", "signature", "expired", "not-yet-valid"]


class MoveCertificateError(OpPrereqError):
    """A certificate, key name, handshake or destination handed over for a move was
    refused; ``check`` says which check failed."""

    code = "move-certificate"

    def __init__(self, message: str, *, check: Check = "malformed",
                 ecode: str | None = "wrong_input") -> None:
        super().__init__(message, ecode=ecode)
        self.check = check


def new_salt() -> str:
    """A fresh salt: 16 hex digits (8 random bytes)."""
    return secrets.token_hex(8)


def hmac_sha1(secret: str, message: str, salt: str | None = None) -> str:
    """HMAC-SHA1 of ``salt + message`` keyed with ``secret``, as lower-case hex."""
    data = ((salt or "") + message).encode("utf-8")
    return hmac.new(secret.encode("utf-8"), data, hashlib.sha1).hexdigest()


def verify_hmac_sha1(secret: str, message: str, digest: str, salt: str | None = None) -> bool:
    """Whether ``digest`` is the HMAC of ``message`` with ``salt`` (any hex case)."""
    if not isinstance(digest, str):
        return False
    return hmac.compare_digest(digest.lower(), hmac_sha1(secret, message, salt))


def read_domain_secret(text: str | bytes) -> str:
    """The cluster domain secret from its file's contents: the first line, stripped.

    An empty secret is refused: it would make every signature forgeable.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = text.splitlines()
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise ParameterError("the cluster domain secret file is empty; set one with "
                             "'gnt-cluster renew-crypto --new-cluster-domain-secret'")
    return secret


def new_key_name(now: dt.datetime | None = None) -> str:
    """A new, unique name for a move's key (it names a directory on the node)."""
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d_%H_%M_%S")
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return f"x509-{when}-{''.join(secrets.choice(alphabet) for _ in range(8))}"


def create_move_certificate(common_name: str, validity: int = RIE_CERT_VALIDITY,
                            now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    """A new RSA key and a self-signed certificate for it, valid for ``validity``
    seconds from ``now``; returns ``(key_pem, cert_pem)``.

    The certificate names ``common_name`` (the node that makes it) and is its own
    CA, so that the other side can use it as the one CA it trusts for this move.
    """
    if validity < 1:
        raise ParameterError(f"a move certificate's validity must be positive, not {validity}")
    key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    start = now or dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or "corral")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(seconds=validity))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def _load(pem: str) -> x509.Certificate:
    start = pem.find("-----BEGIN CERTIFICATE-----")
    if start < 0:
        raise MoveCertificateError(
            "the certificate is malformed: no '-----BEGIN CERTIFICATE-----' line found",
            check="malformed")
    try:
        return x509.load_pem_x509_certificate(pem[start:].encode("ascii"))
    except (ValueError, UnicodeEncodeError) as err:
        raise MoveCertificateError(f"the certificate is malformed: {err}",
                                   check="malformed") from None


def _canonical_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def sign_certificate(cert_pem: str | bytes, secret: str, salt: str | None = None) -> str:
    """``cert_pem`` with the signature header in front (the signed form handed out)."""
    salt = new_salt() if salt is None else salt
    if not _SALT_RE.match(salt):
        raise ParameterError(f"invalid salt {salt!r}: only letters and digits are accepted")
    text = cert_pem.decode("ascii") if isinstance(cert_pem, bytes) else cert_pem
    pem = _canonical_pem(_load(text))
    return f"{SIGNATURE_HEADER}: {salt}/{hmac_sha1(secret, pem, salt)}\n\n{pem}"


@dataclass(frozen=True, slots=True)
class VerifiedCertificate:
    """A certificate whose signature and validity were checked."""

    #: The certificate alone, in PEM (no header): what TLS is given as the peer's CA.
    pem: str
    salt: str
    not_before: dt.datetime
    not_after: dt.datetime


def _signature(text: str) -> tuple[str, str]:
    for line in text.splitlines():
        if line.startswith("---"):
            break
        match = _HEADER_RE.match(line.strip())
        if match:
            return match["salt"], match["digest"]
    raise MoveCertificateError(
        f"the certificate is not signed: no '{SIGNATURE_HEADER}: SALT/DIGEST' header "
        "before its PEM text", check="unsigned")


def verify_signed_certificate(signed: str | bytes, secret: str, *,
                              now: dt.datetime | None = None) -> VerifiedCertificate:
    """Check a signed certificate: its form, its signature with this cluster's
    domain secret and that ``now`` lies in its validity; raise
    :class:`MoveCertificateError` naming the first check that failed."""
    if isinstance(signed, bytes):
        try:
            signed = signed.decode("ascii")
        except UnicodeDecodeError:
            raise MoveCertificateError("the certificate is malformed: it is not ASCII text",
                                       check="malformed") from None
    if not isinstance(signed, str):
        raise MoveCertificateError(
            f"the certificate is malformed: expected PEM text, got {type(signed).__name__}",
            check="malformed")
    salt, digest = _signature(signed)
    cert = _load(signed)
    pem = _canonical_pem(cert)
    if not verify_hmac_sha1(secret, pem, digest, salt):
        raise MoveCertificateError(
            "the certificate's signature does not match: it was modified after signing, "
            "or the two clusters do not share the same cluster domain secret",
            check="signature")
    moment = now or dt.datetime.now(dt.UTC)
    not_before, not_after = cert.not_valid_before_utc, cert.not_valid_after_utc
    if moment < not_before:
        raise MoveCertificateError(
            f"the certificate is not yet valid: valid from {not_before:%Y-%m-%d %H:%M:%S} "
            "UTC (check the clocks of the two clusters)", check="not-yet-valid")
    if moment > not_after:
        raise MoveCertificateError(
            f"the certificate expired at {not_after:%Y-%m-%d %H:%M:%S} UTC; prepare the "
            "move again", check="expired")
    return VerifiedCertificate(pem, salt, not_before, not_after)


def sign_key_name(name: str, secret: str, salt: str | None = None) -> list[str]:
    """The key name as handed out: ``[name, digest, salt]``."""
    salt = new_salt() if salt is None else salt
    return [name, hmac_sha1(secret, name, salt), salt]


def _triple(value: Any, what: str, form: str) -> tuple[Any, Any, Any]:
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise MoveCertificateError(f"invalid {what}: expected {form}, got {value!r}",
                                   check="malformed")
    return value[0], value[1], value[2]


def verify_key_name(value: Any, secret: str) -> str:
    """The key name out of a signed ``[name, digest, salt]``, refused unless its
    HMAC matches and it is a valid key name."""
    name, digest, salt = _triple(value, "X509 key name", "[name, hmac, salt]")
    if not (isinstance(name, str) and isinstance(salt, str)):
        raise MoveCertificateError(f"invalid X509 key name: {value!r}", check="malformed")
    if not verify_hmac_sha1(secret, name, digest, salt):
        raise MoveCertificateError(
            "HMAC for X509 key name is wrong: the key name was modified, or the clusters "
            "do not share the same cluster domain secret", check="signature")
    if not KEY_NAME_RE.match(name):
        raise MoveCertificateError(f"invalid X509 key name {name!r}", check="malformed")
    return name


def _handshake_message(version: Any) -> str:
    return f"{version}:{RIE_HANDSHAKE}"


def make_handshake(secret: str, salt: str | None = None) -> list[Any]:
    """This cluster's handshake: ``[version, digest, salt]``."""
    salt = new_salt() if salt is None else salt
    return [RIE_VERSION, hmac_sha1(secret, _handshake_message(RIE_VERSION), salt), salt]


def check_handshake(value: Any, secret: str) -> None:
    """Refuse a peer's handshake made with another secret or protocol version."""
    version, digest, salt = _triple(value, "handshake", "[version, hmac, salt]")
    if not isinstance(salt, str) or not verify_hmac_sha1(
            secret, _handshake_message(version), digest, salt):
        raise MoveCertificateError(
            "the handshake's HMAC does not match: the clusters do not share the same "
            "cluster domain secret", check="signature")
    if version != RIE_VERSION:
        raise MoveCertificateError(
            "the clusters do not speak the same remote import/export protocol "
            f"(local={RIE_VERSION}, remote={version})", check="malformed")


def _disk_message(index: int, host: str, port: int, magic: str) -> str:
    return f"{index}:{host}:{port}:{magic}"


def sign_disk_info(secret: str, index: int, host: str, port: int, magic: str,
                   salt: str | None = None) -> list[Any]:
    """Where disk ``index`` is to be sent: ``[host, port, magic, digest, salt]``."""
    salt = new_salt() if salt is None else salt
    return [host, port, magic, hmac_sha1(secret, _disk_message(index, host, port, magic), salt),
            salt]


def check_disk_info(value: Any, index: int, secret: str) -> tuple[str, int, str]:
    """``(host, port, magic)`` out of a signed destination of disk ``index``."""
    if not isinstance(value, list | tuple) or len(value) != 5:
        raise MoveCertificateError(
            f"invalid destination of disk {index}: expected [host, port, magic, hmac, salt], "
            f"got {value!r}", check="malformed")
    host, port, magic, digest, salt = value
    if not (host and port and magic):
        raise MoveCertificateError(
            f"destination of disk {index}: missing host, port or magic", check="malformed")
    if not (isinstance(salt, str) and verify_hmac_sha1(
            secret, _disk_message(index, host, port, magic), digest, salt)):
        raise MoveCertificateError(
            f"destination of disk {index}: HMAC is wrong (the destination was modified, "
            "or the clusters do not share the same cluster domain secret)", check="signature")
    if not isinstance(host, str) or not isinstance(port, int) or not 0 < port < 65536:
        raise MoveCertificateError(
            f"destination of disk {index}: invalid host {host!r} or port {port!r}",
            check="malformed")
    return host, port, str(magic)
