"""The cluster CA and the node certificates it signs.

Every node daemon trusts one cluster CA. Each node holds a certificate signed by it
that serves both as noded's TLS server certificate and as its client certificate when
it calls another node. The master (and every master candidate, which may become the
master) also holds the master's client certificate, which node daemons require for
procedures that change a node. corral-rapi serves with a self-signed certificate the
cluster CA never signed, so that no node daemon accepts it. Keys are ECDSA P-256:
fast to make, and accepted by every TLS stack corral talks to. A CA with an RSA or
Ed25519 key (an imported one) can sign node certificates too.

PEM data comes out as ``bytes`` and goes in as ``bytes`` or ``str``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from corral.errors import ParameterError
from corral.utils.files import write_private, write_public

__all__ = [
    "CERT_DAYS",
    "MASTER_CLIENT_OU",
    "CertInfo",
    "create_ca",
    "create_self_signed",
    "ensure_self_signed",
    "fingerprint",
    "is_master_client",
    "load_cert_info",
    "sign_master_client_cert",
    "sign_node_cert",
    "verify_signed_by",
]

#: Validity of the certificates a cluster makes for itself (Ganeti uses five years too).
CERT_DAYS = 5 * 365
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


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey,
             days: int, *, not_after_limit: dt.datetime | None = None
             ) -> x509.CertificateBuilder:
    """A certificate for ``key`` naming ``subject`` and ``issuer``, with a fresh serial,
    valid for ``days`` (no later than ``not_after_limit``, the issuer's own end)."""
    not_before, not_after = _validity(days)
    if not_after_limit is not None:
        not_after = min(not_after, not_after_limit)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )


def create_ca(common_name: str, days: int) -> tuple[bytes, bytes]:
    """Make a self-signed cluster CA valid for ``days``; returns ``(cert_pem, key_pem)``.

    The CA may sign end-entity certificates only (path length 0).
    """
    if not common_name:
        raise ParameterError("the CA needs a common name")
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = _builder(name, name, key, days)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        builder
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


def _load_ca(ca_cert_pem: bytes | str, ca_key_pem: bytes | str
             ) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    """The CA certificate and its signing key, refused unless they belong together."""
    ca_cert = _load_cert(ca_cert_pem, "the CA certificate")
    ca_key = _load_signing_key(ca_key_pem, "the CA key")
    if ca_cert.public_key() != ca_key.public_key():
        raise ParameterError("the CA key does not belong to the CA certificate")
    return ca_cert, ca_key


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
    ca_cert, ca_key = _load_ca(ca_cert_pem, ca_key_pem)
    key = _new_key()
    builder = _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_name)]),
                       ca_cert.subject, key, days, not_after_limit=ca_cert.not_valid_after_utc)
    san: list[x509.GeneralName] = [x509.DNSName(node_name)]
    san.extend(x509.IPAddress(ip) for ip in _ip_addresses(ips))
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    cert = (
        _leaf_extensions(builder, usages, san)
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


#: The organisational unit that marks the master's client certificate. Node
#: certificates carry a common name only, so no node certificate has it.
MASTER_CLIENT_OU = "corral master"


def _leaf_extensions(
    builder: x509.CertificateBuilder, usages: list[x509.ObjectIdentifier],
    san: list[x509.GeneralName],
) -> x509.CertificateBuilder:
    builder = (
        builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder


def sign_master_client_cert(
    ca_cert_pem: bytes | str, ca_key_pem: bytes | str, cluster_name: str, days: int,
) -> tuple[bytes, bytes]:
    """Make the master's client certificate, signed by the cluster CA.

    Node daemons run a procedure that changes the node only for a caller presenting
    this certificate (:func:`is_master_client`); the master holds it, and so do the
    master candidates, any of which may become the master by a failover. It is
    valid for TLS clients only. Returns ``(cert_pem, key_pem)``.
    """
    ca_cert, ca_key = _load_ca(ca_cert_pem, ca_key_pem)
    key = _new_key()
    subject = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, MASTER_CLIENT_OU),
        x509.NameAttribute(NameOID.COMMON_NAME, f"master of {cluster_name}"),
    ])
    builder = _builder(subject, ca_cert.subject, key, days,
                       not_after_limit=ca_cert.not_valid_after_utc)
    # Which CA signed it, by key: while nodes trust an old and a new cluster CA of
    # the same name (gnt-cluster renew-crypto), TLS finds the right one by it.
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    cert = _leaf_extensions(builder, [ExtendedKeyUsageOID.CLIENT_AUTH], []).sign(
        ca_key, _signature_hash(ca_key))
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def is_master_client(cert_der: bytes) -> bool:
    """Whether a peer certificate (DER, as TLS gives it) is the master's client
    certificate. Only the signature check of the TLS handshake makes this
    trustworthy: call it for certificates the cluster CA was verified to sign."""
    try:
        cert = x509.load_der_x509_certificate(cert_der)
    except ValueError:
        return False
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return any(unit.value == MASTER_CLIENT_OU for unit in units)


def create_self_signed(
    common_name: str, dns_names: list[str], ips: list[str], days: int,
) -> tuple[bytes, bytes]:
    """Make a self-signed TLS server certificate and its key, outside the cluster CA.

    corral-rapi serves with one: its clients check passwords, not certificates,
    and since the cluster CA did not sign it, no node daemon accepts it as a client
    certificate. Returns ``(cert_pem, key_pem)``.
    """
    if not common_name:
        raise ParameterError("a certificate needs a common name")
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = _builder(name, name, key, days)
    san: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(dns_names) if n]
    san.extend(x509.IPAddress(ip) for ip in _ip_addresses(list(dict.fromkeys(ips))))
    cert = _leaf_extensions(builder, [ExtendedKeyUsageOID.SERVER_AUTH], san).sign(
        key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def fingerprint(cert: bytes | str) -> bytes:
    """SHA-256 over a certificate's DER form; ``cert`` is PEM (text or bytes) or DER."""
    if isinstance(cert, str) or cert.lstrip().startswith(b"-----"):
        return _load_cert(cert, "the certificate").fingerprint(hashes.SHA256())
    return x509.load_der_x509_certificate(cert).fingerprint(hashes.SHA256())


def ensure_self_signed(
    cert_file: Path, key_file: Path, common_name: str, dns_names: list[str], ips: list[str],
    days: int,
) -> bool:
    """Keep a self-signed server certificate at ``cert_file`` (key at ``key_file``,
    mode 0400) that names every one of ``dns_names`` and ``ips``; make a new one when
    it is missing, unreadable or lacks one of them. Whether a new one was made."""
    try:
        info = load_cert_info(cert_file.read_bytes())
        have_key = key_file.exists()
    except (OSError, ParameterError):
        info, have_key = None, False
    if info is not None and have_key and set(dns_names) <= set(info.dns_names) \
            and {str(ipaddress.ip_address(ip)) for ip in ips} <= set(info.ip_addresses):
        return False
    cert, key = create_self_signed(common_name, dns_names, ips, days)
    cert_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileNotFoundError):
        key_file.unlink()  # a 0400 file: replace it rather than write into it
    write_private(key_file, key)
    write_public(cert_file, cert)
    return True
