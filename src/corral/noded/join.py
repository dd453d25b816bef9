"""Joining a cluster: the one-time token, the bundle the master sends, leaving.

A node daemon without a cluster makes a random token, keeps it in
``Paths.join_token`` (mode 0400) and prints it. The administrator gives it to
``gnt-node add --token``; the master then posts a bundle (the cluster CA, a
certificate and key signed for this node, the confd key, the membership) together
with a proof of the token. The token is the only proof of who calls, since the node
has no CA to check the master against yet. It is bound to the certificate the
waiting daemon serves with (:mod:`corral.x509.join_token`): the master talks only to
the server with that certificate and proves the token for it, so a token seen in
flight is useless with any other certificate. The proof is compared in constant time
and the token deleted once used.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import msgspec

from corral import x509
from corral.daemon_users import DaemonUsers, ensure_accounts, ensure_modes, write_daemon_users
from corral.errors import JoinError, OpPrereqError
from corral.paths import Paths
from corral.serializer import dumps_pretty, loads

__all__ = [
    "MEMBERSHIP_KEYS",
    "JoinBundle",
    "check_token",
    "create_token",
    "is_joined",
    "leave",
    "read_membership",
    "validate_bundle",
    "write_bundle",
]

#: What ``membership.json`` holds (see :func:`corral.bootstrap.membership_json`).
MEMBERSHIP_KEYS = frozenset(
    {"cluster_name", "node_name", "node_uuid", "master_name", "master_ip", "noded_port"})


class JoinBundle(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The cluster secrets and membership a joining node receives (PEM as text)."""

    ca_cert: str
    node_cert: str
    node_key: str
    confd_key: str
    membership: dict[str, Any]
    rapi_users: str | None = None
    #: The secret shared with other clusters for instance moves (design 2.2).
    cluster_domain_secret: str | None = None
    #: The master's ``daemon-users.json`` (privilege separation), if it has one.
    daemon_users: str | None = None


def _membership_files(paths: Paths) -> tuple[Path, ...]:
    return (paths.ca_cert, paths.node_cert, paths.node_key, paths.node_membership)


def is_joined(paths: Paths) -> bool:
    """Whether this node belongs to a cluster: CA, certificate, key and membership."""
    return all(p.exists() for p in _membership_files(paths))


def read_membership(paths: Paths) -> dict[str, Any]:
    """This node's ``membership.json``; an empty dict if it has none or it is unreadable."""
    try:
        data = loads(paths.node_membership.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def create_token(paths: Paths, fingerprint: bytes) -> str:
    """Make a new one-time join token bound to the certificate with this SHA-256
    ``fingerprint`` (the one the daemon serves with while it waits) and keep it in
    ``Paths.join_token`` (mode 0400)."""
    token = x509.make_join_token(fingerprint)
    paths.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileNotFoundError):
        paths.join_token.unlink()  # write_private replaces; a 0400 file stays replaceable
    x509.write_private(paths.join_token, token + "\n")
    return token


def check_token(expected: str, own_fingerprint: bytes, proof: Any) -> None:
    """Refuse (:class:`JoinError`) a join request whose proof was not made from
    ``expected`` for this node's certificate (see :mod:`corral.x509.join_token`)."""
    x509.check_join_proof(expected, own_fingerprint, proof)


def validate_bundle(data: Any) -> JoinBundle:
    """Decode and check a join bundle: the node certificate must be signed by the CA
    it comes with and the membership must be complete."""
    try:
        bundle = msgspec.convert(data, JoinBundle)
    except msgspec.ValidationError as err:
        raise JoinError(
            f"malformed join bundle: {err}; expected an object with ca_cert, node_cert, "
            "node_key, confd_key, membership and optionally rapi_users, cluster_domain_secret"
        ) from None
    try:
        signed = x509.verify_signed_by(bundle.node_cert, bundle.ca_cert)
    except Exception as err:  # ParameterError for malformed PEM
        raise JoinError(f"malformed certificate in the join bundle: {err}") from None
    if not signed:
        raise JoinError("the node certificate of the join bundle is not signed by its CA")
    missing = sorted(MEMBERSHIP_KEYS - bundle.membership.keys())
    if missing:
        raise JoinError(f"the join bundle's membership lacks {', '.join(missing)}")
    return bundle


def write_bundle(paths: Paths, bundle: JoinBundle) -> None:
    """Store the bundle (keys mode 0400) and delete the used token."""
    paths.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    files: list[tuple[Path, str, bool]] = [
        (paths.ca_cert, bundle.ca_cert, False),
        (paths.node_key, bundle.node_key, True),
        (paths.node_cert, bundle.node_cert, False),
        (paths.confd_hmac_key, bundle.confd_key, True),
    ]
    if bundle.rapi_users is not None:
        files.append((paths.rapi_users, bundle.rapi_users, True))
    if bundle.cluster_domain_secret is not None:
        files.append((paths.cluster_domain_secret, bundle.cluster_domain_secret, True))
    for path, text, private in files:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if private:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            x509.write_private(path, text)
        else:
            x509.write_public(path, text)
    if bundle.daemon_users is not None:
        users = DaemonUsers.from_json(bundle.daemon_users, "the join bundle's daemon_users")
        write_daemon_users(paths, users)
        ensure_accounts(users, paths)
        ensure_modes(paths, users)
    # The membership comes last: its presence is what makes the node a member.
    x509.write_public(paths.node_membership,
                      dumps_pretty(bundle.membership) + "\n")
    with contextlib.suppress(FileNotFoundError):
        paths.join_token.unlink()


def leave(paths: Paths) -> None:
    """Forget the cluster: membership, certificates and keys.

    The master node keeps its cluster until the cluster is destroyed, so it refuses.
    """
    if paths.config_db.exists():
        raise OpPrereqError(
            "this node holds the cluster configuration (it is the master); it cannot "
            "leave the cluster, destroy the cluster instead"
        )
    for path in (paths.node_membership, *_membership_files(paths)[:3],
                 paths.master_client_cert, paths.confd_hmac_key, paths.cluster_domain_secret,
                 paths.rapi_users,
                 paths.uid_pool, paths.daemon_users):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
