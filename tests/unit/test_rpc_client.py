"""RpcClient against a local TLS server: per-node results, timeouts, refusals."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from corral import x509
from corral.errors import NodeUnreachableError, OsScriptError, ProtocolError
from corral.paths import Paths
from corral.rpc import RpcClient
from corral.x509.tls import server_context

HOST = "127.0.0.1"


def _write_node_files(paths: Paths, name: str, ca: tuple[bytes, bytes]) -> None:
    paths.ensure_dirs()
    cert, key = x509.sign_node_cert(ca[0], ca[1], name, [HOST], 1)
    x509.write_public(paths.ca_cert, ca[0])
    x509.write_public(paths.node_cert, cert)
    x509.write_private(paths.node_key, key)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


class Server:
    """A node-RPC-like server: ``echo`` answers its arguments after ``sleep`` seconds."""

    def __init__(self) -> None:
        self.peers: list[Any] = []
        self.port = 0

    async def echo(self, request: web.Request) -> web.Response:
        self.peers.append(request.transport.get_extra_info("peername") if request.transport
                          else None)
        args = await request.json()
        await asyncio.sleep(args.get("sleep", 0))
        procedure = request.match_info["procedure"]
        if procedure == "fail":
            return web.json_response(
                {"ok": False, "error": {"code": "os-script-failed", "message": "create: boom"}},
                status=500)
        if procedure == "garbage":
            return web.Response(text="<html>proxy error</html>", status=502)
        return web.json_response({"ok": True, "result": args})


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[Server, Paths]]:
    """A TLS server with a node certificate of a test CA, and a client's paths."""
    ca = x509.create_ca("test CA", 1)
    server_paths = Paths(tmp_path / "server")
    client_paths = Paths(tmp_path / "client")
    _write_node_files(server_paths, "server.test", ca)
    _write_node_files(client_paths, "client.test", ca)
    state = Server()
    app = web.Application()
    app.router.add_post("/rpc/1/{procedure}", state.echo)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    ctx = server_context(server_paths.node_cert, server_paths.node_key, server_paths.ca_cert)
    site = web.TCPSite(runner, HOST, 0, ssl_context=ctx)
    await site.start()
    assert runner.addresses
    state.port = runner.addresses[0][1]
    try:
        yield state, client_paths
    finally:
        await runner.cleanup()


async def test_each_node_gets_its_own_result(server: tuple[Server, Paths]) -> None:
    state, paths = server
    client = RpcClient(paths)
    try:
        results = await client.call(
            [("fast", HOST, state.port), ("slow", HOST, state.port),
             ("down", HOST, _closed_port())],
            "echo", lambda name: {"node": name, "sleep": 5 if name == "slow" else 0},
            timeout=0.5,
        )
    finally:
        await client.close()
    assert set(results) == {"fast", "slow", "down"}
    assert results["fast"].payload == {"node": "fast", "sleep": 0}
    assert not results["fast"].failed
    slow, down = results["slow"], results["down"]
    assert slow.unreachable and isinstance(slow.error, NodeUnreachableError)
    assert "node slow did not answer within 0.5 s" in str(slow.error)
    assert down.unreachable
    assert "node down" in str(down.error) and "cannot connect" in str(down.error)
    with pytest.raises(NodeUnreachableError, match="starting failed on node down"):
        down.get("starting")


async def test_calls_run_concurrently(server: tuple[Server, Paths]) -> None:
    state, paths = server
    client = RpcClient(paths)
    loop = asyncio.get_running_loop()
    try:
        begin = loop.time()
        results = await client.call([(f"n{i}", HOST, state.port) for i in range(5)], "echo",
                                    {"sleep": 0.3}, timeout=5)
        elapsed = loop.time() - begin
    finally:
        await client.close()
    assert all(r.payload == {"sleep": 0.3} for r in results.values())
    assert elapsed < 1.2, f"five 0.3 s calls took {elapsed:.2f} s: not concurrent"


async def test_node_errors_keep_their_class(server: tuple[Server, Paths]) -> None:
    state, paths = server
    client = RpcClient(paths)
    try:
        results = await client.call([("n1", HOST, state.port)], "fail", {}, timeout=5)
        garbage = await client.call([("n1", HOST, state.port)], "garbage", {}, timeout=5)
    finally:
        await client.close()
    assert isinstance(results["n1"].error, OsScriptError)
    assert not results["n1"].unreachable
    with pytest.raises(OsScriptError, match="installing failed on node n1: create: boom"):
        results["n1"].get("installing")
    assert isinstance(garbage["n1"].error, ProtocolError)
    assert "HTTP 502" in str(garbage["n1"].error)


async def test_connection_is_reused(server: tuple[Server, Paths]) -> None:
    state, paths = server
    client = RpcClient(paths)
    try:
        for _ in range(3):
            results = await client.call([("n1", HOST, state.port)], "echo", {}, timeout=5)
            assert not results["n1"].failed
    finally:
        await client.close()
    assert len(state.peers) == 3 and len(set(state.peers)) == 1


async def test_server_of_another_ca_is_unreachable(
    server: tuple[Server, Paths], tmp_path: Path
) -> None:
    state, _paths = server
    other = Paths(tmp_path / "other")
    _write_node_files(other, "client.test", x509.create_ca("other CA", 1))
    client = RpcClient(other)
    try:
        results = await client.call([("n1", HOST, state.port)], "echo", {}, timeout=5)
    finally:
        await client.close()
    assert results["n1"].unreachable
    assert "TLS" in str(results["n1"].error)


async def test_missing_certificates_fail_every_node(tmp_path: Path) -> None:
    client = RpcClient(Paths(tmp_path / "nothing"))
    results = await client.call([("a", HOST, 1), ("b", HOST, 2)], "version", {}, timeout=1)
    await client.close()
    assert all(r.unreachable for r in results.values())
    assert "certificates" in str(results["a"].error)


async def test_no_targets_no_session(tmp_path: Path) -> None:
    client = RpcClient(Paths(tmp_path))
    assert await client.call([], "version", {}, timeout=1) == {}
    await client.close()
