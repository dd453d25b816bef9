"""The client side of node RPC: one call fanned out to many node daemons at once.

Every node is called concurrently and has its own deadline, so a node that hangs
costs the caller ``timeout`` seconds once, not once per node, and never hides the
answers of the others (a node cut off from the network is given up on sooner, see
:mod:`corral.rpc.deadpeer`): each node gets an :class:`~corral.rpc.protocol.RpcResult`
with either its payload or an error naming it.

The client authenticates with the master's client certificate where this node has
it, else with this node's certificate, and trusts only the cluster CA (mutual TLS).
Joining is the one exception: a node that has not joined has no certificate the CA
signed, so :meth:`RpcClient.join` checks the server's certificate against the
fingerprint its one-time token carries, and proves the token for that certificate
to the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp

from corral import errors, serializer, x509
from corral.errors import CorralError, JoinError, NodeUnreachableError, ProtocolError
from corral.paths import Paths
from corral.rpc.deadpeer import rpc_socket
from corral.rpc.protocol import JOIN_PATH, RpcResult, rpc_path
from corral.x509.tls import client_context

__all__ = ["RpcArgsByName", "RpcClient", "Target", "node_client_context"]

#: Where a node daemon listens: ``(node name, IP address, port)``.
Target = tuple[str, str, int]

#: The arguments of a call: the same for every node, or computed from the node name.
RpcArgsByName = Mapping[str, Any] | Callable[[str], Mapping[str, Any]]


def node_client_context(paths: Paths, *, as_master: bool | None = None) -> ssl.SSLContext:
    """The mutual-TLS client context of this node: a certificate, the cluster CA.

    A node holding the master's client certificate (the master, a master candidate)
    calls with it, since node daemons run procedures that change a node only for
    that certificate; other nodes call with their node certificate, which opens the
    procedures that read. ``as_master`` forces one or the other. Node certificates
    carry the node's addresses, and node daemons are called by address, so the
    address is checked against the server's certificate.
    """
    if as_master is None:
        as_master = paths.master_client_cert.exists()
    if as_master:
        return client_context(paths.ca_cert, paths.master_client_cert, check_hostname=True)
    return client_context(paths.ca_cert, paths.node_cert, paths.node_key, check_hostname=True)


def _join_context(paths: Paths) -> ssl.SSLContext:
    """Encrypts without verifying the server; presents this node's certificate when
    it has one, so that a node already in this cluster can say so instead of
    refusing the handshake."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with contextlib.suppress(OSError, ssl.SSLError):
        ctx.load_cert_chain(paths.node_cert, paths.node_key)
    return ctx


def _url(ip: str, port: int, path: str) -> str:
    host = f"[{ip}]" if ":" in ip else ip
    return f"https://{host}:{port}{path}"


def _reason(err: BaseException) -> str:
    """A short human reason for a transport failure."""
    if isinstance(err, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate not accepted: {err.certificate_error}"
    text = str(err)
    if "alert" in text.lower() and "certificate" in text.lower():
        # the node's TLS alert: it did not accept this node's certificate
        return (f"the node refused this node's certificate ({text}), which it does when "
                "its clock is far off: see its log")
    if isinstance(err, aiohttp.ClientSSLError):
        return f"TLS handshake failed: {err}"
    if isinstance(err, aiohttp.ClientConnectorError):
        return f"cannot connect: {err.os_error.strerror or err.os_error}"
    if isinstance(err, aiohttp.ServerDisconnectedError):
        return ("the connection was closed without an answer (the node refused this "
                "node's certificate, which it does when its clock is far off, or its "
                "daemon stopped: see its log)")
    if isinstance(err, aiohttp.ClientOSError) and err.errno == errno.ECONNRESET:
        # with TLS 1.3 the node checks this node's certificate after the client's side
        # of the handshake is done: a refusal may arrive as a reset instead of an alert
        return (f"{err.strerror or err} (the node refused this node's certificate, "
                "which it does when its clock is far off, or its daemon stopped: see "
                "its log)")
    return str(err) or type(err).__name__


async def decode_answer(node: str, response: aiohttp.ClientResponse) -> Any:
    """The payload of a node daemon's answer; raise the error it sent.

    :raises CorralError: the node's error (class kept), or :class:`ProtocolError` when
        the answer is not the RPC wire format.
    """
    text = await response.text()
    try:
        body = serializer.loads(text)
    except ValueError:
        raise ProtocolError(
            f"node {node} answered HTTP {response.status} with a body that is not JSON: "
            f"{text[:200]!r}"
        ) from None
    if not isinstance(body, dict) or "ok" not in body:
        raise ProtocolError(f"node {node} answered HTTP {response.status} without 'ok': "
                            f"{text[:200]!r}")
    if body["ok"] is True:
        return body.get("result")
    raise errors.from_wire(body.get("error"))


class RpcClient:
    """Calls node daemons over mutual TLS; one keep-alive session, made on first use.

    The session is created lazily inside the running event loop (aiohttp sessions
    belong to one loop), so an ``RpcClient`` can be built before the loop runs.
    """

    def __init__(self, paths: Paths, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.paths = paths
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None
        self._join_session: aiohttp.ClientSession | None = None
        #: Sessions replaced by :meth:`refresh`; closed by :meth:`close`.
        self._retired: list[aiohttp.ClientSession] = []

    def refresh(self) -> None:
        """Load this node's certificates and the cluster CA again for the next calls
        (``gnt-cluster renew-crypto`` replaced them). Calls in flight finish on their
        connections."""
        self._ssl = None
        if self._session is not None:
            self._retired.append(self._session)
            self._session = None

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = node_client_context(self.paths)
        return self._ssl

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._context(), limit=0,
                                               socket_factory=rpc_socket),
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    async def call(
        self,
        targets: Sequence[Target],
        procedure: str,
        args: RpcArgsByName,
        *,
        timeout: float = 60.0,
    ) -> dict[str, RpcResult]:
        """Call ``procedure`` on every target at once; one result per node name.

        ``timeout`` applies to each node separately; a node that does not answer in
        time, refuses the connection or fails the TLS handshake gets a
        :class:`~corral.errors.NodeUnreachableError` naming it.
        """
        if not targets:
            return {}
        try:
            session = self._get_session()
        except (OSError, ssl.SSLError) as err:
            reason = f"cannot load this node's certificates to call other nodes: {err}"
            return {
                name: RpcResult(name, error=NodeUnreachableError(f"node {name}: {reason}"))
                for name, _ip, _port in targets
            }
        results = await asyncio.gather(*(
            self._call_one(session, target, procedure,
                           args(target[0]) if callable(args) else args, timeout)
            for target in targets
        ))
        return {result.node: result for result in results}

    async def _call_one(
        self,
        session: aiohttp.ClientSession,
        target: Target,
        procedure: str,
        args: Mapping[str, Any],
        timeout: float,
    ) -> RpcResult:
        name, ip, port = target
        try:
            payload = await self._post(
                session, name, ip, port, rpc_path(procedure), dict(args), timeout)
        except CorralError as err:
            return RpcResult(name, error=err)
        return RpcResult(name, payload=payload)

    async def _post(
        self,
        session: aiohttp.ClientSession,
        name: str,
        ip: str,
        port: int,
        path: str,
        body: dict[str, Any],
        timeout: float,
    ) -> Any:
        try:
            async with asyncio.timeout(timeout):
                async with session.post(_url(ip, port, path), json=body) as response:
                    return await decode_answer(name, response)
        except TimeoutError:
            raise NodeUnreachableError(
                f"node {name} did not answer within {timeout:g} s") from None
        except (aiohttp.ClientError, OSError, ssl.SSLError) as err:
            raise NodeUnreachableError(
                f"node {name} ({ip} port {port}) is unreachable: "
                f"{_reason(err)}"
            ) from None

    async def join(
        self,
        name: str,
        ip: str,
        port: int,
        token: str,
        bundle: Mapping[str, Any],
        *,
        timeout: float = 30.0,
    ) -> RpcResult:
        """Hand the node daemon at ``ip:port`` the cluster ``bundle``, proving the call
        with the one-time ``token`` the node printed.

        The server must present the certificate the token names (its fingerprint is
        part of the token), else nothing is sent; the node gets a proof of the token
        for that certificate, never the token itself (:mod:`corral.x509.join_token`).
        A wrong token or a server with another certificate gives a
        :class:`~corral.errors.JoinError` result.
        """
        try:
            secret, fingerprint = x509.split_join_token(token)
        except CorralError as err:
            return RpcResult(name, error=err)
        if self._join_session is None or self._join_session.closed:
            self._join_session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=_join_context(self.paths), force_close=True),
                timeout=aiohttp.ClientTimeout(total=None),
            )
        body = {"proof": x509.join_proof(secret, fingerprint), "bundle": dict(bundle)}
        try:
            async with asyncio.timeout(timeout):
                async with self._join_session.post(
                        _url(ip, port, JOIN_PATH), json=body,
                        ssl=aiohttp.Fingerprint(fingerprint)) as response:
                    payload = await decode_answer(name, response)
        except aiohttp.ServerFingerprintMismatch:
            return RpcResult(name, error=await self._other_certificate(name, ip, port, timeout))
        except TimeoutError:
            return RpcResult(name, error=NodeUnreachableError(
                f"node {name} did not answer within {timeout:g} s"))
        except (aiohttp.ClientError, OSError, ssl.SSLError) as err:
            # A member's daemon may end the pinned handshake before the fingerprint is
            # compared (it checks the client first): ask it, with nothing secret.
            member = await self._already_member(name, ip, port, timeout)
            return RpcResult(name, error=member or NodeUnreachableError(
                f"node {name} ({ip} port {port}) is unreachable: {_reason(err)} (is its "
                "noded running? a node of another cluster refuses the connection)"))
        except CorralError as err:
            return RpcResult(name, error=err)
        return RpcResult(name, payload=payload)

    async def _already_member(self, name: str, ip: str, port: int,
                              timeout: float) -> JoinError | None:
        """The node's "already a member" refusal, if the daemon at ``ip:port`` gives
        one to an empty join request; else ``None``."""
        assert self._join_session is not None
        try:
            await self._post(self._join_session, name, ip, port, JOIN_PATH, {}, timeout)
        except JoinError as err:
            if "already a member" in err.message:
                return err
        except (CorralError, aiohttp.ClientError, OSError, ssl.SSLError):
            pass
        return None

    async def _other_certificate(self, name: str, ip: str, port: int,
                                 timeout: float) -> CorralError:
        """Why the server at ``ip:port`` does not present the certificate of the token:
        the node's own answer when it is a member of a cluster already (asked with
        nothing secret), else a refusal saying the certificates differ."""
        member = await self._already_member(name, ip, port, timeout)
        if member is not None:
            return member
        return JoinError(
            f"node {name} ({ip} port {port}) presents a certificate other than the one its "
            "join token names: nothing was sent. Give the token that node's daemon printed; "
            "if it did, something else answers at that address")

    async def close(self) -> None:
        """Close the connections; the client may be used again afterwards."""
        retired, self._retired = self._retired, []
        for session in (self._session, self._join_session, *retired):
            if session is not None:
                await session.close()
        self._session = None
        self._join_session = None
