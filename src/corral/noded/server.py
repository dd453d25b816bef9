"""The node daemon's HTTPS server, in one of two modes on one address.

*Joined* (the node has the cluster CA, its certificate and its membership): mutual
TLS, so only peers holding a certificate the cluster CA signed get past the
handshake; ``POST /rpc/1/<procedure>`` runs a procedure, ``GET /stream/1/disk``
streams a disk to another node and ``GET /stream/1/console`` attaches to an
instance's serial console (a WebSocket, master certificate only). Any cluster
certificate may call the procedures that only read (:data:`OPEN_PROCEDURES`) and
stream disks (the target of a copy fetches with its node certificate); every other
procedure changes the node and is refused (HTTP 403) unless the caller presents the
master's client certificate, which only the master and the master candidates hold
(see :func:`corral.x509.is_master_client`). A new procedure is therefore closed
until it is listed as open.

*Unjoined*: a throwaway self-signed certificate encrypts the connection, a one-time
token bound to it is made and printed, and only ``POST /join`` is served. A proof
of the token for that certificate with a valid bundle makes the node a member; the
daemon then listens in joined mode on the same address. ``node_leave`` goes the other way.

Switching modes never leaves the port without a listener: the old listening
socket is closed and the new one bound within one step of the event loop, while the
connection that asked for the switch gets its answer over the old one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from corral import daemons, x509
from corral.errors import (
    AccessDeniedError,
    CorralError,
    InternalError,
    JoinError,
    ParameterError,
    ProtocolError,
    unexpected,
)
from corral.noded import console, crypto, join, procedures
from corral.paths import Paths
from corral.rpc.chunks import MAX_BODY_ENV, max_body
from corral.rpc.protocol import JOIN_PATH, RPC_VERSION
from corral.serializer import loads
from corral.utils.process import running_pid
from corral.x509.tls import server_context

__all__ = ["OPEN_PROCEDURES", "NodeServer", "check_caller", "joined_context",
           "unjoined_context"]

log = logging.getLogger("corral.noded")

#: How long stopping a listener waits for requests in progress.
SHUTDOWN_TIMEOUT = 5.0

#: The procedures that only read the node's state: any cluster certificate may call
#: them. ``master_info`` is how a candidate running a failover counts the others.
OPEN_PROCEDURES = frozenset({
    "version", "node_info", "instance_list", "instance_info", "all_instances_info",
    "instance_check_host", "hypervisor_validate_params", "os_diagnose", "os_get",
    "master_info", "migration_status", "migration_info", "impexp_status", "export_list",
    "export_info",
})


def _peer_certificate(request: web.Request) -> bytes | None:
    """The client certificate of the request's connection (DER), if it sent one."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


def check_caller(procedure: str, peer_der: bytes | None) -> None:
    """Refuse (:class:`AccessDeniedError`) a procedure that changes the node unless the
    caller's certificate (verified against the cluster CA by the handshake) is the
    master's client certificate."""
    if procedure in OPEN_PROCEDURES:
        return
    if peer_der is not None and x509.is_master_client(peer_der):
        return
    caller = "no certificate"
    if peer_der is not None:
        caller = f"the certificate of {x509.load_cert_info(_pem(peer_der)).subject_cn!r}"
    raise AccessDeniedError(
        f"procedure {procedure} changes this node: only the master may call it (with the "
        f"master's client certificate), and the caller presented {caller}; other cluster "
        f"members may call only {', '.join(sorted(OPEN_PROCEDURES))}")


def _pem(der: bytes) -> str:
    return ssl.DER_cert_to_PEM_cert(der)


def joined_context(paths: Paths) -> ssl.SSLContext:
    """Mutual TLS: this node's certificate; clients need one the cluster CA signed."""
    return server_context(paths.node_cert, paths.node_key, paths.ca_cert,
                          require_client_cert=True)


def unjoined_context() -> tuple[ssl.SSLContext, bytes]:
    """TLS with a throwaway self-signed certificate and no client certificates; the
    context and the certificate's SHA-256 fingerprint, which the join token binds.

    The master checks that fingerprint before it sends anything, so a token seen by
    someone else cannot lead it to another server.
    """
    ca_cert, ca_key = x509.create_ca("corral node waiting to join", 1)
    cert, key = x509.sign_node_cert(ca_cert, ca_key, socket.gethostname() or "localhost", [], 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="corral-noded-") as tmp:
        cert_file, key_file = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
        x509.write_private(key_file, key, 0o600)
        cert_file.write_bytes(cert + ca_cert)
        ctx.load_cert_chain(cert_file, key_file)
    ctx.verify_mode = ssl.CERT_NONE
    return ctx, x509.fingerprint(cert)


def _answer(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(err: CorralError) -> web.Response:
    return web.json_response({"ok": False, "error": {"code": err.code, "message": err.message}},
                             status=err.http_status)


@dataclass
class _Listener:
    runner: web.AppRunner
    server: asyncio.AbstractServer


class NodeServer:
    """The node daemon's listener on ``host:port``, joined or waiting to join.

    ``on_token`` is called with each new join token (the daemon prints it).
    """

    def __init__(
        self,
        paths: Paths,
        host: str,
        port: int,
        *,
        on_token: Callable[[str], None] = lambda _token: None,
    ) -> None:
        self.paths = paths
        self.host = host
        self.port = port
        self.on_token = on_token
        self.token: str | None = None
        #: The SHA-256 fingerprint of the certificate served while waiting to join.
        self._fingerprint = b""
        self._listener: _Listener | None = None
        self._switch_lock = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self._confd_start: asyncio.Task[None] | None = None
        #: Set when the daemon lost its listener (a mode switch could not bind the
        #: address again); the daemon should exit so that it restarts cleanly.
        self.broken = asyncio.Event()

    @property
    def joined(self) -> bool:
        """Whether the daemon serves in joined (mutual TLS) mode."""
        return self.token is None and self._listener is not None

    # -- life cycle ------------------------------------------------------------
    async def start(self) -> None:
        """Listen, joined if this node is a member, otherwise waiting for a join.

        :raises OSError: when the address cannot be bound.
        """
        if join.is_joined(self.paths):
            ctx = await asyncio.to_thread(joined_context, self.paths)
            self._listener = await self._listen(self._joined_app(), ctx)
            log.info("serving node RPC with mutual TLS on %s port %d (cluster %s)",
                     self.host, self.port, join.read_membership(self.paths).get("cluster_name"))
        else:
            app, ctx = await self._unjoined_mode()
            self._listener = await self._listen(app, ctx)
            log.info("not a cluster member: waiting for a join on %s port %d", self.host,
                     self.port)

    async def stop(self) -> None:
        """Stop listening and finish the requests in progress."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await self._close(listener)
        for task in list(self._background):
            await task

    async def _listen(self, app: web.Application, ctx: ssl.SSLContext) -> _Listener:
        runner = web.AppRunner(app, handle_signals=False, access_log=None,
                               shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        protocol_factory = runner.server
        if protocol_factory is None:
            raise InternalError("the aiohttp runner has no server after setup")
        try:
            server = await asyncio.get_running_loop().create_server(
                protocol_factory, self.host, self.port, ssl=ctx, reuse_address=True)
        except BaseException:
            await runner.cleanup()
            raise
        return _Listener(runner, server)

    @staticmethod
    async def _close(listener: _Listener) -> None:
        listener.server.close()
        await listener.runner.cleanup()
        await listener.server.wait_closed()

    async def _switch(self, app: web.Application, ctx: ssl.SSLContext) -> None:
        """Replace the listener; the old one's connections finish in the background."""
        old = self._listener
        if old is not None:
            old.server.close()  # frees the port at once; open connections stay
        try:
            self._listener = await self._listen(app, ctx)
        except OSError as err:
            log.critical("cannot listen on %s port %d again after a mode switch: %s",
                         self.host, self.port, err)
            self.broken.set()
            raise InternalError(
                f"the node daemon could not listen on {self.host} port {self.port} again: "
                f"{err}; it stops and must be restarted") from None
        if old is not None:
            task = asyncio.create_task(self._close(old))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _unjoined_mode(self) -> tuple[web.Application, ssl.SSLContext]:
        # Key generation and the token file: in a thread, off the event loop.
        ctx, self._fingerprint = await asyncio.to_thread(unjoined_context)
        self.token = await asyncio.to_thread(join.create_token, self.paths, self._fingerprint)
        self.on_token(self.token)
        return self._unjoined_app(), ctx

    # -- applications ------------------------------------------------------------
    def _joined_app(self) -> web.Application:
        app = web.Application(client_max_size=max_body())
        app.router.add_post("/rpc/{version}/{procedure}", self._rpc)
        app.router.add_post(JOIN_PATH, self._join_when_joined)
        app.router.add_get(procedures.STREAM_DISK_PATH, self._stream_disk)
        app.router.add_get(console.CONSOLE_STREAM_PATH, self._console)
        return app

    def _unjoined_app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 20)
        app.router.add_post(JOIN_PATH, self._join)
        app.router.add_route("*", "/{tail:.*}", self._not_joined)
        return app

    # -- handlers ------------------------------------------------------------------
    async def _rpc(self, request: web.Request) -> web.Response:
        procedure = request.match_info["procedure"]
        try:
            if self.token is not None:
                # A keep-alive connection of the joined listener, still open after
                # node_leave switched to the unjoined one: this node has left.
                raise JoinError("this node has left the cluster; it serves only a join "
                                "with its new token")
            if request.match_info["version"] != str(RPC_VERSION):
                raise ProtocolError(
                    f"RPC version {request.match_info['version']!r} is not supported: this "
                    f"node speaks version {RPC_VERSION}")
            check_caller(procedure, _peer_certificate(request))
            args = await _json_object(request, f"the arguments of {procedure}")
            result = await procedures.dispatch(self.paths, procedure, args)
            if procedure == "node_leave":
                async with self._switch_lock:
                    await self._switch(*await self._unjoined_mode())
                log.info("left the cluster; waiting for a join with a new token")
            elif procedure == "renew_crypto":
                await self._relisten(str(result))
        except CorralError as err:
            log.warning("procedure %s failed: %s", procedure, err)
            return _error(err)
        except Exception as err:
            return _error(unexpected(err, log, f"procedure {procedure}", "corral-noded"))
        response = _answer(result)
        if procedure in ("node_leave", "renew_crypto"):
            response.force_close()  # no more requests on a connection of the old mode
        elif procedure == "config_replicate":
            self._ensure_confd()
        return response

    async def _relisten(self, phase: str) -> None:
        """Listen again with the certificate, key and CA files as they are now (a step
        of ``renew_crypto``); the port is never without a listener."""
        if phase not in crypto.PHASES_THAT_RELISTEN:
            return
        async with self._switch_lock:
            try:
                ctx = await asyncio.to_thread(joined_context, self.paths)
            except (OSError, ssl.SSLError) as err:
                raise JoinError(f"the certificates after step {phase} are unusable: {err}; "
                                "this node keeps serving with the previous ones") from None
            await self._switch(self._joined_app(), ctx)
        log.info("renew-crypto step %s done: serving with the current certificates", phase)

    def _ensure_confd(self) -> None:
        """Start confd once this node holds a configuration replica (it just became a
        master candidate) if it does not run; a failure is logged, never fatal."""
        if self._confd_start is not None or running_pid(self.paths.pid_file("confd")):
            return

        async def start() -> None:
            try:
                await asyncio.to_thread(daemons.start, self.paths, {"confd"})
            except CorralError as err:
                log.warning("cannot start confd: %s", err.message)
            finally:
                self._confd_start = None

        self._confd_start = asyncio.create_task(start())
        self._background.add(self._confd_start)
        self._confd_start.add_done_callback(self._background.discard)

    def _restart_as_users(self) -> None:
        """A cluster that separates its daemons: those this node started as root
        before it joined (the monitoring daemon) start again as their users."""
        if not self.paths.daemon_users.exists():
            return

        async def restart() -> None:
            try:
                restarted = await asyncio.to_thread(daemons.restart_as_users, self.paths)
            except CorralError as err:
                log.warning("cannot restart the daemons as their users: %s", err.message)
                return
            if restarted:
                log.info("restarted as their users: %s", ", ".join(restarted))

        task = asyncio.create_task(restart())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _join(self, request: web.Request) -> web.Response:
        try:
            body = await _json_object(request, "the join request")
            async with self._switch_lock:
                if self.token is None:
                    raise JoinError(self._already_member())
                join.check_token(self.token, self._fingerprint, body.get("proof"))
                bundle = join.validate_bundle(body.get("bundle"))
                # Files written with fsync and the TLS context: off the event loop.
                await asyncio.to_thread(join.write_bundle, self.paths, bundle)
                try:
                    ctx = await asyncio.to_thread(joined_context, self.paths)
                except (OSError, ssl.SSLError) as err:
                    await asyncio.to_thread(join.leave, self.paths)
                    self.token = await asyncio.to_thread(
                        join.create_token, self.paths, self._fingerprint)
                    self.on_token(self.token)
                    raise JoinError(
                        f"the join bundle's certificate or key is unusable: {err}") from None
                self.token = None
                await self._switch(self._joined_app(), ctx)
                self._restart_as_users()
        except CorralError as err:
            log.warning("join refused (from %s): %s", request.remote, err)
            return _error(err)
        log.info("joined cluster %s as %s; serving node RPC with mutual TLS",
                 bundle.membership.get("cluster_name"), bundle.membership.get("node_name"))
        response = _answer(None)
        response.force_close()
        return response

    def _already_member(self) -> str:
        cluster = join.read_membership(self.paths).get("cluster_name", "?")
        return (f"already a member of cluster {cluster}; remove the node from it before "
                "joining another")

    async def _join_when_joined(self, request: web.Request) -> web.Response:
        return _error(JoinError(self._already_member()))

    async def _not_joined(self, request: web.Request) -> web.Response:
        return _error(JoinError(
            f"this node has not joined a cluster; it only accepts POST {JOIN_PATH} with its "
            "join token"))

    async def _stream_disk(self, request: web.Request) -> web.StreamResponse:
        cluster_path = request.query.get("path", "")
        try:
            chunks = await procedures.open_disk_stream(self.paths, request.query)
        except CorralError as err:
            log.warning("disk stream of %r for %s refused: %s", cluster_path, request.remote,
                        err)
            return _error(err)
        async with contextlib.aclosing(chunks):
            response = web.StreamResponse(
                headers={"Content-Type": "application/octet-stream"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            async for chunk in chunks:
                await response.write(chunk)
            await response.write_eof()
        log.info("streamed %s to %s", cluster_path, request.remote)
        return response

    async def _console(self, request: web.Request) -> web.StreamResponse:
        """An instance's serial console as a WebSocket (:mod:`corral.noded.console`);
        it writes to the guest, so only for the master's client certificate."""
        instance = request.query.get("instance", "")
        try:
            check_caller(console.CONSOLE_CALLER, _peer_certificate(request))
            socket_path = await asyncio.to_thread(console.serial_socket, self.paths, instance)
            return await console.relay_console(request, socket_path, instance)
        except CorralError as err:
            log.warning("console of %r for %s refused: %s", instance, request.remote, err)
            return _error(err)


async def _json_object(request: web.Request, what: str) -> dict[str, Any]:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ParameterError(
            f"{what} is larger than this node's limit of {request.client_max_size} bytes "
            f"(the master sends large updates in parts; {MAX_BODY_ENV} sets the limit)"
        ) from None
    try:
        data = loads(body)
    except ValueError as err:
        raise ParameterError(f"{what} is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ParameterError(f"{what} must be a JSON object, not {type(data).__name__}")
    return data
