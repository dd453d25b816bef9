"""The console client's relay: detaching with Ctrl-], the end of input, a node that
closes the console; against a real aiohttp WebSocket server standing in for noded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from corral.cli.console_attach import ConsoleEndpoint, relay, split_at_detach


def test_split_at_detach_drops_everything_from_ctrl_bracket() -> None:
    assert split_at_detach(b"ls\r") == (b"ls\r", False)
    assert split_at_detach(b"ls\r\x1dreboot\r") == (b"ls\r", True)
    assert split_at_detach(b"\x1d") == (b"", True)


def test_endpoint_url_brackets_ipv6() -> None:
    assert ConsoleEndpoint("web1", "node1", "::1", 1811).url == (
        "https://[::1]:1811/stream/1/console?instance=web1")
    assert ConsoleEndpoint("web1", "node1", "127.0.1.1", 1811).url.startswith(
        "https://127.0.1.1:1811/")


class Guest:
    """A WebSocket that prints a banner, echoes what it gets and records it; it
    closes the stream when it receives ``bye``."""

    def __init__(self) -> None:
        self.received = bytearray()

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_bytes(b"tiny# ")
        async for msg in ws:
            self.received += msg.data
            if b"bye" in msg.data:
                break
            await ws.send_bytes(b"echo:" + msg.data)
        await ws.close()
        return ws


@pytest.fixture
async def guest() -> AsyncIterator[tuple[Guest, str]]:
    state = Guest()
    app = web.Application()
    app.router.add_get("/console", state.handle)
    server = TestServer(app)
    await server.start_server()
    try:
        yield state, str(server.make_url("/console"))
    finally:
        await server.close()


async def _run(url: str, keys: list[bytes | None], *, grace: float = 0.5
               ) -> tuple[str, bytes]:
    shown = bytearray()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(url)
        first = await ws.receive_bytes()  # the banner: the guest is attached
        shown += first
        for key in keys:
            queue.put_nowait(key)
        ending = await relay(ws, queue, shown.extend, eof_grace=grace)
    return ending, bytes(shown)


async def test_ctrl_bracket_detaches_and_sends_nothing_after_it(
        guest: tuple[Guest, str]) -> None:
    state, url = guest
    ending, _ = await _run(url, [b"uptime\r", b"ps\x1dhalt\r", b"never\r"])
    assert ending == "detached"
    await asyncio.sleep(0.1)
    assert bytes(state.received) == b"uptime\rps"


async def test_end_of_input_shows_the_answer_then_ends(guest: tuple[Guest, str]) -> None:
    state, url = guest
    ending, shown = await _run(url, [b"hello\r", None])
    assert ending == "eof"
    assert shown == b"tiny# echo:hello\r"
    assert bytes(state.received) == b"hello\r"


async def test_node_closing_the_console_ends_the_session(guest: tuple[Guest, str]) -> None:
    _, url = guest
    ending, shown = await _run(url, [b"bye\r"])
    assert ending == "closed"
    assert shown == b"tiny# "
