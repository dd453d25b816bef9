"""Node daemons inside this process: the real procedures, the wire's encoding.

:class:`InProcessNodes` is a :class:`~corral.masterd.rpc.NodeTransport` for
:class:`~corral.masterd.rpc.MasterRpc` that runs every call through
:func:`corral.noded.procedures.dispatch` on a node of its own: each node name gets a
:class:`~corral.paths.Paths` root below one directory, so its fake hypervisor,
file storage, OS definitions and configuration replica are its own.

It exists so that logical units can be tested against the master↔node contract
rather than against a fake that accepts anything: arguments and results go through
the same JSON encoding as on the wire, and errors through the same
``{"code", "message"}`` form, so a misspelled procedure or argument, a value JSON
cannot carry, or a result the master reads wrongly fails as it would between
daemons.

A test can still make a node fail on purpose, explicitly: :attr:`InProcessNodes.down`
makes nodes unreachable and :attr:`InProcessNodes.overrides` answers one procedure
its own way (for what the real procedure cannot be made to do here). Every call is
recorded in :attr:`InProcessNodes.calls` with its arguments as a node receives them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from corral import errors, x509
from corral.errors import CorralError, InternalError, JoinError, NodeUnreachableError
from corral.noded import join, procedures
from corral.paths import Paths
from corral.rpc.client import RpcArgsByName, Target
from corral.rpc.protocol import RpcResult

__all__ = ["InProcessNodes", "NodeCall", "Override", "in_process_token"]

#: Answers one procedure on one node in place of the real one:
#: ``override(node_name, args) -> result`` (or an awaitable of it); raising a
#: CorralError fails the call.
Override = Callable[[str, Mapping[str, Any]], Any]

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class NodeCall:
    """One call to one node, its arguments decoded from the wire form."""

    node: str
    procedure: str
    args: Mapping[str, Any]


def _through_wire(value: Any, what: str) -> Any:
    """``value`` as the other side of the JSON wire sees it."""
    try:
        return msgspec.json.decode(_encoder.encode(value))
    except (TypeError, msgspec.EncodeError) as err:
        raise InternalError(f"{what} cannot be sent as JSON: {err}") from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def in_process_token(node: str, word: str) -> str:
    """The join token an in-process ``node`` prints when told to wait with ``word``:
    the real two-part form (:mod:`corral.x509.join_token`), its secret derived from
    ``word`` and its certificate fingerprint from the node's name, so that tests can
    name tokens and a token for one node is worth nothing for another."""
    secret = hashlib.sha256(f"join secret {word}".encode()).digest()[:24]
    fingerprint = hashlib.sha256(f"in-process node {node}".encode()).digest()
    return f"{_b64(secret)}.{_b64(fingerprint)}"


class InProcessNodes:
    """Node daemons in this process, one :class:`Paths` root per node below ``root``.

    Every node answers as a member of the cluster, except the names given to
    :meth:`wait_for_join`, which accept only a join with their token (as a node
    daemon that has not joined does).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        #: Names of the nodes that do not answer (connection refused).
        self.down: set[str] = set()
        #: Procedures answered by a function instead of the real procedure.
        self.overrides: dict[str, Override] = {}
        #: Every call made to a node (one that is down too), in order.
        self.calls: list[NodeCall] = []
        #: Every join attempt: ``(node name, token given)``.
        self.joins: list[tuple[str, str]] = []
        self._tokens: dict[str, str] = {}

    def paths(self, node: str) -> Paths:
        """The node's own places (made on first use)."""
        if not node or "/" in node or node.startswith("."):
            raise InternalError(f"node name {node!r} cannot name a directory")
        paths = Paths(self.root / node)
        paths.ensure_dirs()
        return paths

    def wait_for_join(self, node: str, word: str) -> str:
        """Make ``node`` a daemon that has not joined: it serves only a join proved by
        the token it prints, :func:`in_process_token` of ``word``; answer that token."""
        token = in_process_token(node, word)
        self._tokens[node] = token
        return token

    # -- NodeTransport -----------------------------------------------------------------
    async def call(
        self,
        targets: Sequence[Target],
        procedure: str,
        args: RpcArgsByName,
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - per node, as RpcClient.call
    ) -> dict[str, RpcResult]:
        """Run ``procedure`` on every target's node at once."""
        results = await asyncio.gather(*(
            self._call_one(name, procedure, args(name) if callable(args) else args, timeout)
            for name, _ip, _port in targets
        ))
        return {result.node: result for result in results}

    async def _call_one(
        self, name: str, procedure: str, args: Mapping[str, Any], timeout: float,  # noqa: ASYNC109
    ) -> RpcResult:
        sent = _through_wire(dict(args), f"the arguments of {procedure} for node {name}")
        self.calls.append(NodeCall(name, procedure, sent))
        if name in self.down:
            return RpcResult(name, error=NodeUnreachableError(
                f"node {name} is unreachable: cannot connect: connection refused"))
        try:
            async with asyncio.timeout(timeout):
                result = await self._run(name, procedure, sent)
        except TimeoutError:
            return RpcResult(name, error=NodeUnreachableError(
                f"node {name} did not answer within {timeout:g} s"))
        except CorralError as err:
            return RpcResult(name, error=errors.from_wire(_through_wire(
                errors.to_wire(err), "an error")))
        except Exception as err:  # as noded answers an unexpected failure
            return RpcResult(name, error=InternalError(f"procedure {procedure} failed: {err}"))
        return RpcResult(name, payload=_through_wire(
            result, f"the result of {procedure} on node {name}"))

    async def _run(self, name: str, procedure: str, args: Mapping[str, Any]) -> Any:
        if name in self._tokens:
            raise JoinError(f"this node has not joined a cluster; it only accepts a join "
                            f"with its join token (calling {procedure})")
        override = self.overrides.get(procedure)
        if override is not None:
            result = override(name, args)
            return await result if inspect.isawaitable(result) else result
        paths = self.paths(name)
        result = await procedures.dispatch(paths, procedure, args)
        if procedure == "node_leave":
            self._tokens[name] = ""  # it waits for a join with a token nobody knows
        return result

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
        """Join ``name`` if it waits for a join with ``token``: the bundle is checked
        and written to the node's own places as a node daemon does."""
        self.joins.append((name, token))
        if name in self.down:
            return RpcResult(name, error=NodeUnreachableError(
                f"node {name} ({ip} port {port}) is unreachable: cannot connect: connection"
                " refused (is its noded running? a node of another cluster refuses the"
                " connection)"))
        try:
            expected = self._tokens.get(name)
            if expected is None:
                raise JoinError("already a member of a cluster; remove the node from it "
                                "before joining another")
            # The master's half (corral.rpc.client.RpcClient.join): only the server
            # with the token's certificate gets a proof; then the node's half.
            secret, fingerprint = x509.split_join_token(token)
            own = x509.split_join_token(expected)[1] if expected else b""
            if fingerprint != own:
                raise JoinError(f"node {name} ({ip} port {port}) presents a certificate "
                                "other than the one its join token names")
            join.check_token(expected, own, x509.join_proof(secret, fingerprint))
            checked = join.validate_bundle(_through_wire(dict(bundle), "the join bundle"))
            join.write_bundle(self.paths(name), checked)
        except CorralError as err:
            return RpcResult(name, error=errors.from_wire(errors.to_wire(err)))
        del self._tokens[name]
        return RpcResult(name, payload=None)
