"""The master's node RPC: configuration objects in, :class:`RpcClient` calls out.

Logical units speak of :class:`~corral.objects.Node` objects; the client speaks of
addresses. :class:`MasterRpc` maps one to the other (primary IP, the cluster's
noded port), keeps offline nodes out of every call, and builds the bundle a new
node receives when it joins.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from corral import bootstrap, x509
from corral.cmdlib.base import RpcArgs
from corral.config import ConfigStore
from corral.errors import CorralError, JoinError, NodeUnreachableError
from corral.objects import Node
from corral.paths import Paths
from corral.rpc.client import RpcClient, Target
from corral.rpc.protocol import RpcResult
from corral.serializer import loads

__all__ = ["MasterRpc", "join_bundle"]


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
    return bundle


class MasterRpc:
    """:class:`~corral.cmdlib.base.NodeRpc` for the master daemon."""

    def __init__(self, store: ConfigStore, paths: Paths, client: RpcClient) -> None:
        self.store = store
        self.paths = paths
        self.client = client

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
        contacted and get a :class:`NodeUnreachableError` saying so."""
        results: dict[str, RpcResult] = {}
        online: list[Node] = []
        for node in nodes:
            if node.offline:
                results[node.name] = RpcResult(
                    node.name, error=NodeUnreachableError(f"node {node.name} is offline"))
            else:
                online.append(node)
        by_name = {node.name: node for node in online}
        per_node = (lambda name: args(by_name[name])) if callable(args) else args
        results.update(await self.client.call(
            [self._target(n) for n in online], procedure, per_node, timeout=timeout))
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
