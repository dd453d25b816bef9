"""corral-rapi's settings and its pool of luxi connections (a real luxi server on a
temporary Unix socket)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from corral.errors import (
    DaemonError,
    MasterUnreachableError,
    NotFoundError,
    ParameterError,
    ProtocolError,
)
from corral.luxi import LuxiServer, Request
from corral.paths import Paths
from corral.rapi.daemon import DEFAULT_PORT, read_settings, settings_file
from corral.rapi.luxi_pool import LuxiPool
from corral.utils.process import drop_privileges


def test_settings_defaults_file_and_command_line(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.ensure_dirs()
    settings = read_settings(paths)
    assert (settings.bind, settings.port, settings.ssl, settings.require_authentication) == \
        ("0.0.0.0", DEFAULT_PORT, True, False)
    settings_file(paths).write_text(json.dumps(
        {"bind": "127.0.1.1", "port": 6000, "require_authentication": True, "user": "nobody"}))
    settings = read_settings(paths)
    assert (settings.bind, settings.port, settings.require_authentication, settings.user) == \
        ("127.0.1.1", 6000, True, "nobody")
    settings = read_settings(paths, bind="127.0.0.2", port=6001, no_ssl=True)
    assert (settings.bind, settings.port, settings.ssl) == ("127.0.0.2", 6001, False)


@pytest.mark.parametrize(("content", "message"), [
    ('{"port": 0}', "port 0 is not a port number (1-65535)"),
    ('{"bind": "localhost"}', "is not an IP address"),
    ('{"colour": 1}', "unknown setting(s) colour"),
    ('[1]', "must hold a JSON object"),
    ('{', "cannot read the settings file"),
    ('{"require_authentication": "yes"}', "require_authentication: Expected `bool`"),
])
def test_bad_settings_are_refused(tmp_path: Path, content: str, message: str) -> None:
    paths = Paths(tmp_path)
    paths.ensure_dirs()
    settings_file(paths).write_text(content)
    with pytest.raises(ParameterError) as caught:
        read_settings(paths)
    assert message in caught.value.message


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the refusal of a non-root daemon")
def test_dropping_privileges_needs_root() -> None:
    with pytest.raises(DaemonError, match="need the daemon to start as root"):
        drop_privileges("nobody", None, daemon="rapi")


class CountingMaster:
    """A luxi dispatcher that counts connections' calls and can fail on demand."""

    def __init__(self) -> None:
        self.calls = 0

    async def dispatch(self, request: Request) -> Any:
        self.calls += 1
        if request.method == "Missing":
            raise NotFoundError("no such thing")
        if request.method == "Slow":
            await asyncio.sleep(float(request.args[0]))
        return [request.method, *request.args]


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[tuple[CountingMaster, LuxiServer]]:
    counting = CountingMaster()
    server = LuxiServer(tmp_path / "master.sock", counting.dispatch)
    await server.start()
    yield counting, server
    await server.stop()


async def test_pool_reuses_connections(master: tuple[CountingMaster, LuxiServer]) -> None:
    _counting, server = master
    pool = LuxiPool(server.path, max_idle=2)
    assert await pool.call("QueryTags", "cluster", "") == ["QueryTags", "cluster", ""]
    assert len(pool._idle) == 1
    await pool.call("Query", "node")
    assert len(pool._idle) == 1, "the idle connection was reused"
    # Concurrent calls each get a connection; at most max_idle stay open afterwards.
    answers = await asyncio.gather(*(pool.call("Slow", 0.05) for _ in range(4)))
    assert answers == [["Slow", 0.05]] * 4
    assert len(pool._idle) == 2
    # A master error leaves the connection usable.
    with pytest.raises(NotFoundError, match="no such thing"):
        await pool.call("Missing")
    assert len(pool._idle) == 2
    await pool.close()
    assert not pool._idle


async def test_pool_survives_a_master_restart(tmp_path: Path) -> None:
    counting = CountingMaster()
    path = tmp_path / "master.sock"

    async def restart(server: LuxiServer) -> LuxiServer:
        await server.stop()
        fresh = LuxiServer(path, counting.dispatch)
        await fresh.start()
        return fresh

    server = LuxiServer(path, counting.dispatch)
    await server.start()
    pool = LuxiPool(path)
    try:
        await pool.call("Query", "node")
        server = await restart(server)
        # The idle connection to the old server is stale; a read is retried once ...
        assert await pool.call("QueryJobs", None, ["id"]) == ["QueryJobs", None, ["id"]]
        server = await restart(server)
        # ... a change never is: the master may have acted on it.
        with pytest.raises(ProtocolError):
            await pool.call("SubmitJob", [])
        assert await pool.call("SubmitJob", []) == ["SubmitJob", []]
        await server.stop()
        with pytest.raises(MasterUnreachableError, match="cannot reach the master daemon"):
            await pool.call("Query", "node")
    finally:
        await pool.close()
        await server.stop()


async def test_pool_times_out_and_drops_the_connection(
        master: tuple[CountingMaster, LuxiServer]) -> None:
    _counting, server = master
    pool = LuxiPool(server.path, timeout=0.05)
    with pytest.raises(MasterUnreachableError, match="did not answer Slow"):
        await pool.call("Slow", 5)
    assert not pool._idle, "a connection with an answer still due is never reused"
    await pool.close()
