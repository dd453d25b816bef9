"""Creating and destroying a cluster on its first (master) node.

``init_cluster`` checks everything before it writes anything, then writes the keys,
certificates and RAPI users file, and creates the configuration store last: the
store's existence is what makes a node a cluster master, so a failure part-way
removes what was written and leaves the node as it was.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from corral import serializer, uidpool, x509
from corral.cmdlib.cluster import ClusterSetParams, apply_cluster_params
from corral.config import ConfigStore
from corral.daemon_users import (
    DaemonUsers,
    ensure_accounts,
    ensure_modes,
    write_daemon_users,
)
from corral.errors import (
    ClusterExistsError,
    ConfigurationError,
    NotClusterError,
    ParameterError,
)
from corral.objects import Cluster, Node, NodeGroup
from corral.objects.ipolicy import default_policy, updated_policy
from corral.objects.params import DISK_TEMPLATES
from corral.paths import Paths
from corral.rapi.users import generate_rapi_users_file

__all__ = [
    "DEFAULT_GROUP", "RAPI_ADMIN", "InitOptions", "destroy_cluster", "init_cluster",
    "membership_json", "rapi_certificate",
]

#: Name of the node group every cluster starts with (Ganeti's name).
DEFAULT_GROUP = "default"
#: The RAPI user with write access that ``init_cluster`` creates.
RAPI_ADMIN = "admin"
#: Validity of the cluster CA and node certificates (Ganeti uses five years too).
CERT_DAYS = x509.CERT_DAYS

_HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$",
    re.IGNORECASE,
)


@dataclass
class InitOptions:
    """What ``gnt-cluster init`` was asked for."""

    cluster_name: str
    master_name: str | None = None
    primary_ip: str | None = None
    secondary_ip: str | None = None
    params: ClusterSetParams = field(default_factory=ClusterSetParams)
    #: The TCP port every node daemon of the cluster listens on (Ganeti's is 1811).
    noded_port: int = 1811
    #: The accounts the daemons but noded run as (privilege separation); None: they
    #: run as whoever starts them (a testbed in a temporary directory).
    daemon_users: DaemonUsers | None = None


def _check_hostname(what: str, name: str) -> str:
    if not _HOSTNAME_RE.match(name):
        raise ParameterError(
            f"invalid {what} {name!r}: use a host name of letters, digits, '-' and '.'"
        )
    return name.lower()


def _check_ip(what: str, text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ParameterError(f"invalid {what} {text!r}: not an IPv4 or IPv6 address") from None


def _resolve(name: str) -> str:
    try:
        return socket.gethostbyname(name)
    except OSError:
        raise ParameterError(
            f"cannot resolve the master node name {name!r}; give its address with --primary-ip"
        ) from None


def _build_config(paths: Paths, options: InitOptions) -> tuple[Cluster, NodeGroup, Node]:
    cluster_name = _check_hostname("cluster name", options.cluster_name)
    master_name = _check_hostname("master node name", options.master_name or socket.getfqdn())
    primary_ip = _check_ip("primary IP", options.primary_ip or _resolve(master_name))
    secondary_ip = _check_ip("secondary IP", options.secondary_ip) if options.secondary_ip else ""
    group = NodeGroup(name=DEFAULT_GROUP)
    node = Node(
        name=master_name, primary_ip=primary_ip, secondary_ip=secondary_ip, group=group.uuid,
        master_candidate=True,
    )
    cluster = Cluster(
        name=cluster_name,
        master_node=node.uuid,
        file_storage_dir=Paths.DEFAULT_FILE_STORAGE_DIR,
        shared_file_storage_dir=Paths.DEFAULT_SHARED_FILE_STORAGE_DIR,
        os_search_path=list(Paths.DEFAULT_OS_SEARCH_PATH),
        extstorage_search_path=list(Paths.DEFAULT_EXTSTORAGE_SEARCH_PATH),
        noded_port=options.noded_port,
    )
    params = options.params
    cluster.ipolicy = _initial_policy(
        params.ipolicy, params.enabled_disk_templates or cluster.enabled_disk_templates)
    apply_cluster_params(cluster, msgspec.structs.replace(params, ipolicy=None))
    return cluster, group, node


def _initial_policy(changes: dict[str, Any] | None, enabled: list[str]) -> dict[str, Any]:
    """A new cluster's instance policy: Ganeti's defaults (every disk template
    allowed) with ``changes`` applied, its disk templates restricted to the enabled
    ones, as Ganeti's ``init`` does."""
    policy = default_policy(DISK_TEMPLATES)
    if changes:
        policy = updated_policy(policy, changes, group=False)
    allowed = [t for t in enabled if t in policy["disk-templates"]]
    if not allowed:
        raise ParameterError(
            f"the instance policy allows none of the enabled disk templates "
            f"({', '.join(enabled)}): give --ipolicy-disk-templates with some of them")
    policy["disk-templates"] = allowed
    return policy


def rapi_certificate(cluster_name: str, node: Node) -> tuple[bytes, bytes]:
    """A self-signed certificate and key for corral-rapi on ``node`` (the master):
    it names the cluster and the node with its addresses. The cluster CA does not
    sign it, so no node daemon accepts it (design 2.2, privilege separation)."""
    return x509.create_self_signed(
        cluster_name, [cluster_name, node.name],
        [ip for ip in (node.primary_ip, node.secondary_ip) if ip], CERT_DAYS)


def membership_json(cluster: Cluster, node: Node, master: Node) -> str:
    """What a node keeps about the cluster it belongs to (``Paths.node_membership``)."""
    return serializer.dumps_pretty({
        "cluster_name": cluster.name, "node_name": node.name, "node_uuid": node.uuid,
        "master_name": master.name, "master_ip": master.primary_ip,
        "noded_port": cluster.noded_port,
    }) + "\n"


def init_cluster(paths: Paths, options: InitOptions) -> tuple[Cluster, Node]:
    """Initialise a cluster whose master is this node; return the cluster and master.

    Refuses (:class:`ClusterExistsError`, nothing touched) when this node already
    has a cluster configuration.
    """
    if paths.config_db.exists():
        raise ClusterExistsError(
            f"this node already belongs to a cluster ({paths.config_db} exists); nothing "
            "was changed. Remove it first with 'gnt-cluster destroy --yes-do-it'"
        )
    cluster, group, node = _build_config(paths, options)
    if options.daemon_users is not None:
        ensure_accounts(options.daemon_users, paths)  # system-wide; kept on failure
    paths.ensure_dirs()
    written: list[Path] = []
    try:
        ca_cert, ca_key = x509.create_ca(f"corral CA {cluster.name}", CERT_DAYS)
        node_cert, node_key = x509.sign_node_cert(
            ca_cert, ca_key, node.name,
            [ip for ip in (node.primary_ip, node.secondary_ip) if ip], CERT_DAYS,
        )
        master_cert, master_key = x509.sign_master_client_cert(
            ca_cert, ca_key, cluster.name, CERT_DAYS)
        rapi_cert, rapi_key = rapi_certificate(cluster.name, node)
        password = x509.random_password()
        files: list[tuple[Path, bytes | str, bool]] = [
            (paths.ca_key, ca_key, True),
            (paths.ca_cert, ca_cert, False),
            (paths.node_key, node_key, True),
            (paths.node_cert, node_cert, False),
            (paths.master_client_cert, master_key + master_cert, True),
            (paths.rapi_key, rapi_key, True),
            (paths.rapi_cert, rapi_cert, False),
            (paths.confd_hmac_key, x509.generate_hmac_key(), True),
            (paths.cluster_domain_secret, x509.generate_hmac_key() + "\n", True),
            (paths.rapi_users, generate_rapi_users_file(RAPI_ADMIN, password), True),
            (paths.rapi_admin_password, password + "\n", True),
            (paths.node_membership, membership_json(cluster, node, node), False),
            (paths.uid_pool, uidpool.format_uid_pool_file(cluster.uid_pool), False),
        ]
        for path, data, private in files:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if private:
                x509.write_private(path, data)
            else:
                x509.write_public(path, data)
            written.append(path)
        for directory in (cluster.file_storage_dir, cluster.shared_file_storage_dir):
            paths.node_path(directory).mkdir(parents=True, exist_ok=True, mode=0o750)
        if options.daemon_users is not None:
            write_daemon_users(paths, options.daemon_users)
            written.append(paths.daemon_users)
        ConfigStore.create(paths.config_db, cluster, group, node).close()
        if options.daemon_users is not None:
            ensure_modes(paths, options.daemon_users)
    except BaseException:
        for path in written:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        raise
    return cluster, node


def destroy_cluster(paths: Paths, before_removal: Callable[[], object]) -> list[Path]:
    """Remove this master's cluster configuration, keys and certificates.

    Refused while instances or nodes other than the master are in the
    configuration; otherwise ``before_removal`` (which stops the daemons) runs and
    the files go. Returns the files removed.
    """
    if not paths.config_db.exists():
        raise NotClusterError(f"no cluster configuration at {paths.config_db}; nothing to destroy")
    store = ConfigStore.open(paths.config_db)
    try:
        instances = [i.name for i in store.all("instance")]
        others = [n.name for n in store.all("node") if n.uuid != store.cluster.master_node]
    finally:
        store.close()
    if instances:
        raise ConfigurationError(
            f"the cluster still has {len(instances)} instance(s) ({', '.join(instances[:5])}"
            f"{', ...' if len(instances) > 5 else ''}); remove them first"
        )
    if others:
        raise ConfigurationError(
            f"the cluster still has other nodes ({', '.join(others)}); remove them first"
        )
    before_removal()
    removed: list[Path] = []
    db = paths.config_db
    for path in (
        db, Path(f"{db}-wal"), Path(f"{db}-shm"), paths.ca_key, paths.ca_cert, paths.node_key,
        paths.node_cert, paths.master_client_cert, paths.rapi_cert, paths.rapi_key,
        paths.confd_hmac_key, paths.cluster_domain_secret, paths.rapi_users,
        paths.rapi_admin_password,
        paths.node_membership, paths.uid_pool, paths.daemon_users,
    ):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    return removed
