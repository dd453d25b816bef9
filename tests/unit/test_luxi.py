"""The luxi wire format and server behaviour, over a real Unix socket."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from corral import LUXI_VERSION, serializer
from corral.errors import InternalError, NotFoundError, ProtocolError, UnknownParameterError
from corral.luxi import EOM, AsyncClient, Client, LuxiServer, Request
from corral.luxi.protocol import decode_request, decode_response, encode_error, encode_result


def test_request_frame_is_json_ended_by_0x03() -> None:
    from corral.luxi.protocol import encode_request

    frame = encode_request("QueryClusterInfo", [1, "a"])
    assert frame.endswith(EOM) and frame.count(EOM) == 1
    assert serializer.loads(frame[:-1]) == {
        "method": "QueryClusterInfo", "args": [1, "a"], "version": LUXI_VERSION,
    }


def test_errors_come_back_as_the_same_class() -> None:
    frame = encode_error(UnknownParameterError("unknown x; valid ones: a, b"))
    with pytest.raises(UnknownParameterError, match="valid ones: a, b"):
        decode_response(frame[:-1])
    assert decode_response(encode_result({"a": 1})[:-1]) == {"a": 1}


@pytest.mark.parametrize("frame", [b"", b"[]", b"{\"args\": []}", b"\xff", b"{\"method\": 3}"])
def test_malformed_requests_are_protocol_errors(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_request(frame)


def test_version_mismatch_is_refused() -> None:
    frame = serializer.dumps({"method": "x", "args": [], "version": LUXI_VERSION + 1})
    with pytest.raises(ProtocolError, match="version mismatch"):
        decode_request(frame)


async def _echo(request: Request) -> Any:
    if request.method == "Missing":
        raise NotFoundError("no such thing")
    if request.method == "Boom":
        raise RuntimeError("bug")
    if request.method == "Slow":
        await asyncio.sleep(0.2)
    return {"method": request.method, "args": request.args}


async def test_server_answers_many_clients_and_survives_bad_input(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = LuxiServer(tmp_path / "s.sock", _echo)
    await server.start()
    try:
        clients = [AsyncClient(tmp_path / "s.sock") for _ in range(20)]
        # A slow request on one connection does not hold up the others.
        slow = asyncio.create_task(clients[0].call("Slow"))
        results = await asyncio.gather(*(c.call("Echo", i) for i, c in enumerate(clients[1:])))
        assert not slow.done()
        assert [r["args"] for r in results] == [[i] for i in range(19)]
        assert (await slow)["method"] == "Slow"
        with pytest.raises(NotFoundError, match="no such thing"):
            await clients[1].call("Missing")
        # A bug in a method is reported without its text, and the connection keeps working.
        with pytest.raises(InternalError, match=r"incident [0-9a-f]{8}") as raised:
            await clients[1].call("Boom")
        assert "bug" not in raised.value.message and "RuntimeError" not in raised.value.message
        assert (await clients[1].call("Echo"))["method"] == "Echo"
        incident = raised.value.message.split("incident ")[1]
        logged = next(r for r in caplog.records if incident in r.getMessage())
        assert logged.exc_info is not None and "RuntimeError: bug" in caplog.text
        # Garbage on a raw socket gets an error answer, not a crash.
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s.sock"))
        writer.write(b"not json" + EOM)
        with pytest.raises(ProtocolError):
            decode_response((await reader.readuntil(EOM))[:-1])
        writer.close()
        for c in clients:
            await c.close()
    finally:
        await server.stop()
    assert not (tmp_path / "s.sock").exists()


async def test_a_request_that_never_completes_is_dropped(tmp_path: Path) -> None:
    """A client that started a request and sends the rest a byte at a time is answered
    with a protocol error and disconnected once the request timeout has passed; an idle
    client (no request begun) is not, and others are served meanwhile."""
    server = LuxiServer(tmp_path / "s.sock", _echo, request_timeout=0.3)
    await server.start()
    try:
        idle = await asyncio.open_unix_connection(str(tmp_path / "s.sock"))
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s.sock"))
        request = b'{"method": "Echo", "args": []}'
        client = AsyncClient(tmp_path / "s.sock")
        answered = 0
        for byte in request[:4]:  # one byte per answered request of another client
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                break  # already dropped (a slow machine)
            assert (await client.call("Echo", answered))["args"] == [answered]
            answered += 1
            await asyncio.sleep(0.05)
        with pytest.raises(ProtocolError, match=r"not complete within 0\.3 s"):
            decode_response((await reader.readuntil(EOM))[:-1])
        assert await reader.read() == b""  # closed
        assert answered >= 1
        # The idle connection is still served.
        idle[1].write(request + EOM)
        assert decode_response((await idle[0].readuntil(EOM))[:-1])["method"] == "Echo"
        for stream in (writer, idle[1]):
            stream.close()
        await client.close()
    finally:
        await server.stop()


def test_blocking_client_reports_missing_daemon(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="cannot reach the master daemon"):
        Client(tmp_path / "none.sock").call("X")


def test_blocking_client_reads_split_and_pipelined_answers(tmp_path: Path) -> None:
    path = tmp_path / "raw.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)
    import threading

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(1000)
        answer = encode_result("first")
        conn.sendall(answer[:3])
        conn.sendall(answer[3:])
        conn.recv(1000)
        conn.sendall(encode_result("second"))
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    with Client(path, timeout=5) as client:
        assert client.call("A") == "first"
        assert client.call("B") == "second"
    thread.join()
    listener.close()
