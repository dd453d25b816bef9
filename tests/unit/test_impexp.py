"""The disk data transport: handshake, framing, compression choice, progress, and a
real importer and exporter talking TLS on loopback within one event loop."""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from pathlib import Path

import pytest

from corral import x509
from corral.errors import ParameterError, ProtocolError
from corral.impexp import Endpoint, Transfer, new_magic, start_export, start_import, wire
from corral.impexp.compression import (
    compress_argv,
    decompress_argv,
    require_allowed,
)
from corral.x509.tls import client_context, server_context


def test_handshake_accepts_only_its_magic_and_compression() -> None:
    magic = new_magic()
    hello = wire.encode_hello(magic, "zstd")
    wire.parse_hello(hello, magic, "zstd")
    with pytest.raises(wire.TransferRefused, match="wrong transfer magic"):
        wire.parse_hello(hello, new_magic(), "zstd")
    with pytest.raises(wire.TransferRefused, match="expects 'gzip'"):
        wire.parse_hello(hello, magic, "gzip")
    with pytest.raises(wire.TransferRefused, match="handshake"):
        wire.parse_hello(b"GET / HTTP/1.1\r\n", magic, "zstd")
    with pytest.raises(ProtocolError, match="16 to 128"):
        wire.encode_hello("short", "none")


async def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_frames_end_with_the_count_and_a_cut_stream_is_an_error() -> None:
    body = wire.encode_frame(b"abc") + b"abc" + wire.encode_frame(b"de") + b"de"
    reader = await _reader(body + wire.encode_trailer(5))
    assert [await wire.read_frame(reader) for _ in range(3)] == [b"abc", b"de", 5]
    cut = await _reader(body[:-1])
    await wire.read_frame(cut)
    with pytest.raises(ProtocolError, match="connection cut"):
        await wire.read_frame(cut)
    with pytest.raises(ProtocolError, match="connection cut"):
        await wire.read_frame(await _reader(b""))
    with pytest.raises(ValueError):
        wire.encode_frame(b"")


async def test_reply_err_is_a_refusal() -> None:
    with pytest.raises(wire.TransferRefused, match="disk full"):
        await wire.read_reply(await _reader(b"ERR disk full\n"), "at the end")
    assert await wire.read_reply(await _reader(b"DONE 7\n"), "at the end") == "DONE 7"
    with pytest.raises(ProtocolError, match="closed the connection"):
        await wire.read_reply(await _reader(b""), "at the end")


def test_compression_choice() -> None:
    assert compress_argv("gzip-fast")[:2] == ["gzip", "-1"]
    assert decompress_argv("zstd")[:1] == ["zstd"]
    assert require_allowed("none", []) == "none"
    with pytest.raises(ParameterError, match="allowed: none, gzip"):
        require_allowed("zstd", ["gzip"])
    with pytest.raises(ParameterError, match="only letters"):
        compress_argv("gzip; rm -rf /")
    with pytest.raises(ParameterError, match="does not have"):
        compress_argv("no-such-compressor-tool")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    base = tmp_path_factory.mktemp("tls")
    ca_cert, ca_key = x509.create_ca("impexp test CA", 1)
    cert, key = x509.sign_node_cert(ca_cert, ca_key, "node1", ["127.0.0.1"], 1)
    (base / "ca.pem").write_bytes(ca_cert)
    (base / "cert.pem").write_bytes(cert)
    (base / "key.pem").write_bytes(key)
    server = server_context(base / "cert.pem", base / "key.pem", base / "ca.pem")
    client = client_context(base / "ca.pem", base / "cert.pem", base / "key.pem",
                            check_hostname=False)
    return server, client


def _source(path: Path) -> bytes:
    data = os.urandom(3 << 20) + bytes(2 << 20) + b"tail"
    path.write_bytes(data)
    return data


async def _until_final(*transfers: Transfer) -> None:
    async with asyncio.timeout(60):
        for transfer in transfers:
            assert transfer.task is not None
            await transfer.task


@pytest.mark.parametrize("compression", ["none", "gzip-fast", "zstd"])
async def test_transfer_moves_the_bytes(tmp_path: Path, compression: str,
                                        tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    data = _source(tmp_path / "src")
    magic = new_magic()
    importer = Transfer("imp", "import", compression, magic,
                        Endpoint(kind="file", path=str(tmp_path / "dst")), tmp_path / "i.log")
    port = await start_import(importer, "127.0.0.1", (40000, 40999), tls[0],
                              accept_timeout=30)
    exporter = Transfer("exp", "export", compression, magic,
                        Endpoint(kind="file", path=str(tmp_path / "src")), tmp_path / "e.log",
                        expected=len(data))
    await start_export(exporter, "127.0.0.1", port, tls[1])
    await _until_final(exporter, importer)
    assert (exporter.state, importer.state) == ("done", "done"), (exporter.error,
                                                                  importer.error)
    assert hashlib.sha256((tmp_path / "dst").read_bytes()).digest() == \
        hashlib.sha256(data).digest()
    status = exporter.status()
    assert status["bytes"] == len(data)
    assert status["wire_bytes"] == importer.status()["wire_bytes"]
    if compression != "none":
        assert status["wire_bytes"] < len(data)
    assert "magic" not in status and magic not in str(status)


async def test_command_ends_and_wrong_magic(tmp_path: Path,
                                            tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """An exporter with another magic is refused and the importer keeps waiting for
    its own; the ends may be commands (as OS scripts are)."""
    magic = new_magic()
    importer = Transfer("imp", "import", "gzip", magic,
                        Endpoint(kind="command", argv=["sh", "-c", "cat > out"],
                                 cwd=str(tmp_path), env={"PATH": "/bin:/usr/bin"}),
                        tmp_path / "i.log")
    port = await start_import(importer, "127.0.0.1", (40000, 40999), tls[0],
                              accept_timeout=30)
    stranger = Transfer("x", "export", "gzip", new_magic(),
                        Endpoint(kind="command", argv=["echo", "wrong"]), tmp_path / "x.log")
    await start_export(stranger, "127.0.0.1", port, tls[1])
    await _until_final(stranger)
    assert stranger.state == "failed" and "wrong transfer magic" in stranger.error
    exporter = Transfer("exp", "export", "gzip", magic,
                        Endpoint(kind="command", argv=["echo", "right"]), tmp_path / "e.log")
    await start_export(exporter, "127.0.0.1", port, tls[1])
    await _until_final(exporter, importer)
    assert (exporter.state, importer.state) == ("done", "done"), (exporter.error,
                                                                  importer.error)
    assert (tmp_path / "out").read_text() == "right\n"


async def test_failing_import_script_fails_both_ends(
        tmp_path: Path, tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    magic = new_magic()
    importer = Transfer("imp", "import", "none", magic,
                        Endpoint(kind="command", argv=["sh", "-c", "echo no space >&2; exit 3"]),
                        tmp_path / "i.log")
    port = await start_import(importer, "127.0.0.1", (40000, 40999), tls[0],
                              accept_timeout=30)
    _source(tmp_path / "src")
    exporter = Transfer("exp", "export", "none", magic,
                        Endpoint(kind="file", path=str(tmp_path / "src")), tmp_path / "e.log")
    await start_export(exporter, "127.0.0.1", port, tls[1])
    await _until_final(exporter, importer)
    assert importer.state == "failed" and exporter.state == "failed"
    assert "no space" in (tmp_path / "i.log").read_text()


async def test_cut_transfer_removes_the_half_written_file(
        tmp_path: Path, tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """The importer stopped mid-way: the exporter fails saying how far it got, and
    the importer's file is gone."""
    magic = new_magic()
    importer = Transfer("imp", "import", "none", magic,
                        Endpoint(kind="file", path=str(tmp_path / "dst")), tmp_path / "i.log")
    port = await start_import(importer, "127.0.0.1", (40000, 40999), tls[0],
                              accept_timeout=30)
    _source(tmp_path / "src")
    exporter = Transfer("exp", "export", "none", magic,
                        Endpoint(kind="file", path=str(tmp_path / "src")), tmp_path / "e.log")
    await start_export(exporter, "127.0.0.1", port, tls[1], bandwidth=2 << 20)
    async with asyncio.timeout(30):
        while importer.wire_bytes == 0:  # noqa: ASYNC110 (polling the progress, as the master does)
            await asyncio.sleep(0.05)
    await importer.abort("killed by the test")
    await _until_final(exporter)
    assert exporter.state == "failed"
    assert "bytes" in exporter.error and exporter.data_bytes > 0
    assert not (tmp_path / "dst").exists()


async def test_progress_reports_rate_and_eta(
        tmp_path: Path, tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """A paced export reports a rate near its limit and an ETA while it runs."""
    magic = new_magic()
    importer = Transfer("imp", "import", "none", magic,
                        Endpoint(kind="file", path=str(tmp_path / "dst")), tmp_path / "i.log")
    port = await start_import(importer, "127.0.0.1", (40000, 40999), tls[0],
                              accept_timeout=30)
    data = _source(tmp_path / "src")
    exporter = Transfer("exp", "export", "none", magic,
                        Endpoint(kind="file", path=str(tmp_path / "src")), tmp_path / "e.log",
                        expected=len(data))
    await start_export(exporter, "127.0.0.1", port, tls[1], bandwidth=4 << 20)
    seen = None
    async with asyncio.timeout(30):
        while seen is None and exporter.state not in ("done", "failed"):
            status = exporter.status()
            if status["eta"] is not None:
                seen = status
            await asyncio.sleep(0.1)
    await _until_final(exporter, importer)
    assert seen is not None and 0 < seen["bytes"] < len(data)
    assert seen["rate"] <= 8 << 20  # paced, not the loopback's speed
    assert exporter.state == "done"
