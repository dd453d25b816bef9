"""The cluster CA and the node certificates it signs.

Every daemon trusts one cluster CA. Each node holds a certificate signed by it that
serves both as its TLS server certificate (noded, rapi) and as its client certificate
when it calls another node, so mutual TLS needs nothing else. Keys are ECDSA P-256:
fast to make, and accepted by every TLS stack corral talks to. A CA with an RSA or
Ed25519 key (an imported one) can sign node certificates too.

PEM data comes out as ``bytes`` and goes in as ``bytes`` or ``str``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from corral.errors import ParameterError

__all__ = [
    "CertInfo",
    "create_ca",
    "load_cert_info",
    "sign_node_cert",
    "verify_signed_by",
]

#: Certificates start this long before they are made, so that nodes whose clocks
#: lag a little behind the master accept them at once.
BACKDATE = dt.timedelta(hours=1)


def _as_bytes(pem: bytes | str) -> bytes:
    return pem.encode("ascii") if isinstance(pem, str) else pem


def _load_cert(pem: bytes | str, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(_as_bytes(pem))
    except ValueError as err:
        raise ParameterError(f"{what} is not a PEM certificate: {err}") from err


def _load_signing_key(pem: bytes | str, what: str) -> CertificateIssuerPrivateKeyTypes:
    try:
        key = serialization.load_pem_private_key(_as_bytes(pem), password=None)
    except (ValueError, TypeError) as err:
        raise ParameterError(f"{what} is not an unencrypted PEM private key: {err}") from err
    if not isinstance(
        key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    ):
        raise ParameterError(f"{what} is not an EC, RSA or Ed25519 private key")
    return key


def _signature_hash(key: CertificateIssuerPrivateKeyTypes) -> hashes.SHA256 | None:
    # Ed25519 signs the message itself; the others sign a SHA-256 digest.
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _validity(days: int) -> tuple[dt.datetime, dt.datetime]:
    if days < 1:
        raise ParameterError(f"certificate validity must be at least one day, not {days}")
    now = dt.datetime.now(dt.UTC)
    return now - BACKDATE, now + dt.timedelta(days=days)


def create_ca(common_name: str, days: int) -> tuple[bytes, bytes]:
    """Make a self-signed cluster CA valid for ``days``; returns ``(cert_pem, key_pem)``.

    The CA may sign end-entity certificates only (path length 0).
    """
    if not common_name:
        raise ParameterError("the CA needs a common name")
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before, not_after = _validity(days)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _ip_addresses(ips: list[str]) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    result = []
    for ip in ips:
        try:
            result.append(ipaddress.ip_address(ip))
        except ValueError:
            raise ParameterError(f"{ip!r} is not an IP address") from None
    return result


def sign_node_cert(
    ca_cert_pem: bytes | str,
    ca_key_pem: bytes | str,
    node_name: str,
    ips: list[str],
    days: int,
) -> tuple[bytes, bytes]:
    """Make a key and a certificate for ``node_name``, signed by the CA.

    The certificate names the node as its common name and carries the name and
    every address of ``ips`` as subject alternative names; it is valid for TLS
    servers and clients alike. Returns ``(cert_pem, key_pem)``.
    """
    if not node_name:
        raise ParameterError("a node certificate needs the node name")
    ca_cert = _load_cert(ca_cert_pem, "the CA certificate")
    ca_key = _load_signing_key(ca_key_pem, "the CA key")
    if ca_cert.public_key() != ca_key.public_key():
        raise ParameterError("the CA key does not belong to the CA certificate")
    key = _new_key()
    not_before, not_after = _validity(days)
    not_after = min(not_after, ca_cert.not_valid_after_utc)
    san: list[x509.GeneralName] = [x509.DNSName(node_name)]
    san.extend(x509.IPAddress(ip) for ip in _ip_addresses(ips))
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, _signature_hash(ca_key))
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def verify_signed_by(cert_pem: bytes | str, ca_cert_pem: bytes | str) -> bool:
    """Whether the CA issued ``cert_pem``: issuer name matches and the signature holds.

    Validity dates are not checked here; :func:`load_cert_info` gives them.

    :raises ParameterError: if either input is not a PEM certificate.
    """
    cert = _load_cert(cert_pem, "the certificate")
    ca_cert = _load_cert(ca_cert_pem, "the CA certificate")
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True)
class CertInfo:
    """What ``gnt-cluster info`` and ``verify`` show about a certificate."""

    subject_cn: str
    issuer_cn: str
    dns_names: list[str]
    ip_addresses: list[str]
    not_before: dt.datetime
    not_after: dt.datetime
    serial: int
    is_ca: bool
    #: SHA-256 over the DER form, upper-case hex pairs joined by ``:`` (as ``openssl
    #: x509 -fingerprint -sha256`` prints it).
    fingerprint_sha256: str

    def expires_within(self, delta: dt.timedelta, now: dt.datetime | None = None) -> bool:
        """Whether the certificate has expired or will within ``delta``."""
        moment = now if now is not None else dt.datetime.now(dt.UTC)
        return self.not_after <= moment + delta


def _common_name(name: x509.Name) -> str:
    values = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[0].value) if values else ""


def load_cert_info(pem: bytes | str) -> CertInfo:
    """Read the facts about a PEM certificate that people and verify care about."""
    cert = _load_cert(pem, "the certificate")
    dns_names: list[str] = []
    ips: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        pass
    else:
        dns_names = san.get_values_for_type(x509.DNSName)
        ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    digest = cert.fingerprint(hashes.SHA256())
    return CertInfo(
        subject_cn=_common_name(cert.subject),
        issuer_cn=_common_name(cert.issuer),
        dns_names=dns_names,
        ip_addresses=ips,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        serial=cert.serial_number,
        is_ca=is_ca,
        fingerprint_sha256=":".join(f"{b:02X}" for b in digest),
    )
