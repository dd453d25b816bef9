"""The master's node RPC: configuration objects in, :class:`RpcClient` calls out.

Logical units speak of :class:`~corral.objects.Node` objects; the client speaks of
addresses. :class:`MasterRpc` maps one to the other (primary IP, the cluster's
noded port), keeps offline nodes out of every call, and builds the bundle a new
node receives when it joins.

How calls reach node daemons is a :class:`NodeTransport`: :class:`RpcClient` over
HTTPS in the daemon, :class:`~corral.masterd.local_rpc.InProcessNodes` (the real
noded procedures run in this process) for logical-unit tests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from corral import bootstrap, x509
from corral.cmdlib.base import RpcArgs
from corral.config import ConfigStore
from corral.errors import CorralError, JoinError, NodeUnreachableError, ParameterError
from corral.objects import Node
from corral.paths import Paths
from corral.rpc.args import check_args
from corral.rpc.client import RpcArgsByName, Target
from corral.rpc.protocol import RpcResult
from corral.serializer import loads

__all__ = ["MasterRpc", "NodeTransport", "join_bundle"]


class NodeTransport(Protocol):
    """What carries the master's calls to node daemons, addressed as :data:`Target`.

    :class:`~corral.rpc.client.RpcClient` is the one over the network; the contract
    is the same for every transport: one :class:`RpcResult` per target name, a node
    that cannot be reached gets a :class:`NodeUnreachableError`, and arguments and
    results are what the JSON wire carries.
    """

    async def call(
        self,
        targets: Sequence[Target],
        procedure: str,
        args: RpcArgsByName,
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - per node, as RpcClient.call
    ) -> dict[str, RpcResult]:
        """Call ``procedure`` on every target at once."""
        ...

    async def join(
        self,
        name: str,
        ip: str,
        port: int,
        token: str,
        bundle: Mapping[str, Any],
        *,
        timeout: float = 30.0,  # noqa: ASYNC109 - as RpcClient.join
    ) -> RpcResult:
        """Hand the waiting node daemon the cluster ``bundle``, proved by ``token``."""
        ...


def join_bundle(store: ConfigStore, paths: Paths, node: Node) -> dict[str, Any]:
    """What a joining node receives: the CA, its own certificate and key, the confd
    key, the RAPI users file and its membership."""
    try:
        ca_cert = paths.ca_cert.read_text()
        ca_key = paths.ca_key.read_text()
        confd_key = paths.confd_hmac_key.read_text()
    except OSError as err:
        raise JoinError(
            f"cannot read the cluster secrets to join node {node.name}: {err}") from None
    node_cert, node_key = x509.sign_node_cert(
        ca_cert, ca_key, node.name,
        [ip for ip in (node.primary_ip, node.secondary_ip) if ip], bootstrap.CERT_DAYS,
    )
    master = store.get("node", store.cluster.master_node)
    bundle: dict[str, Any] = {
        "ca_cert": ca_cert,
        "node_cert": node_cert.decode("ascii"),
        "node_key": node_key.decode("ascii"),
        "confd_key": confd_key,
        "membership": loads(
            bootstrap.membership_json(store.cluster, node, master)),
    }
    with contextlib.suppress(FileNotFoundError):
        bundle["rapi_users"] = paths.rapi_users.read_text()
    with contextlib.suppress(FileNotFoundError):  # any node may become the master
        bundle["cluster_domain_secret"] = paths.cluster_domain_secret.read_text()
    with contextlib.suppress(FileNotFoundError):  # a new node runs its daemons as ours do
        bundle["daemon_users"] = paths.daemon_users.read_text()
    return bundle


class MasterRpc:
    """:class:`~corral.cmdlib.base.NodeRpc` for the master daemon."""

    def __init__(self, store: ConfigStore, paths: Paths, client: NodeTransport) -> None:
        self.store = store
        self.paths = paths
        self.client = client
        #: Told of every call that reached nodes: procedure, seconds until the last
        #: node answered, and how many nodes failed (the master's metrics).
        self.observe: Callable[[str, float, int], None] = lambda _p, _s, _f: None

    def _target(self, node: Node) -> Target:
        return (node.name, node.primary_ip, self.store.cluster.noded_port)

    async def call(
        self,
        nodes: Sequence[Node],
        procedure: str,
        args: RpcArgs,
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - per node, see RpcClient.call
    ) -> dict[str, RpcResult]:
        """Call ``procedure`` on every online node at once; offline ones are not
        contacted and get a :class:`NodeUnreachableError` saying so.

        Arguments are checked against the procedure's Struct in
        :mod:`corral.rpc.args` first: a node whose arguments its daemon would refuse
        is not contacted and gets that :class:`~corral.errors.ParameterError`.
        """
        results: dict[str, RpcResult] = {}
        sent: dict[str, Mapping[str, Any]] = {}
        online: list[Node] = []
        for node in nodes:
            if node.offline:
                results[node.name] = RpcResult(
                    node.name, error=NodeUnreachableError(f"node {node.name} is offline"))
                continue
            node_args = args(node) if callable(args) else args
            try:
                check_args(procedure, node_args)
            except ParameterError as err:
                results[node.name] = RpcResult(node.name, error=err)
                continue
            sent[node.name] = node_args
            online.append(node)
        if online:
            started = time.monotonic()
            answers = await self.client.call(
                [self._target(n) for n in online], procedure, sent.__getitem__,
                timeout=timeout)
            self.observe(procedure, time.monotonic() - started,
                         sum(1 for result in answers.values() if result.error is not None))
            results.update(answers)
        return {node.name: results[node.name] for node in nodes}

    async def join(
        self, node: Node, token: str, *, timeout: float = 30.0,  # noqa: ASYNC109
    ) -> RpcResult:
        """Sign a certificate for ``node`` and hand it, with the cluster's secrets, to
        the node daemon that printed ``token``."""
        try:
            bundle = join_bundle(self.store, self.paths, node)
        except CorralError as err:
            return RpcResult(node.name, error=err)
        name, ip, port = self._target(node)
        return await self.client.join(name, ip, port, token, bundle, timeout=timeout)
