"""The TLS of a move's disk stream: each side presents its move key and accepts only
the other cluster's move certificate."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from corral.errors import ParameterError
from corral.noded import move_keys
from corral.paths import Paths
from corral.rpc.args import X509CertCreateArgs


def _key(paths: Paths, cn: str) -> tuple[str, str]:
    name, cert = asyncio.run(move_keys.x509_cert_create(
        paths, X509CertCreateArgs(validity=600, common_name=cn)))
    return name, cert


async def _exchange(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> bytes:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await reader.readexactly(5))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        writer.write(b"hello")
        await writer.drain()
        data = await reader.read(5)
        writer.close()
        return data
    finally:
        server.close()
        await server.wait_closed()


def test_two_clusters_keys_talk_and_a_third_key_is_refused(tmp_path: Path) -> None:
    source, dest, other = (Paths(tmp_path / n) for n in ("src", "dst", "other"))
    src_name, src_cert = _key(source, "src-node")
    dst_name, dst_cert = _key(dest, "dst-node")
    oth_name, _ = _key(other, "intruder")
    importer = move_keys.move_context(dest, dst_name, src_cert, server=True)
    exporter = move_keys.move_context(source, src_name, dst_cert, server=False)
    assert asyncio.run(_exchange(importer, exporter)) == b"hello"
    # An exporter with another key (not the one the destination was given) gets nothing.
    intruder = move_keys.move_context(other, oth_name, dst_cert, server=False)
    with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
        got = asyncio.run(_exchange(importer, intruder))
        if not got:  # TLS 1.3: the refusal can show as a closed stream
            raise ConnectionError("closed")
    # An importer with another key is refused by the exporter.
    fake_importer = move_keys.move_context(other, oth_name, src_cert, server=True)
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_exchange(fake_importer, exporter))


def test_a_missing_key_or_bad_peer_certificate_is_refused(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    name, cert = _key(paths, "n")
    with pytest.raises(ParameterError, match="there is no X509 key"):
        move_keys.move_context(paths, "x509-2020-01-01_00_00_00-aaaaaaaa", cert, server=True)
    with pytest.raises(ParameterError, match="not a PEM certificate"):
        move_keys.move_context(paths, name, "-----BEGIN CERTIFICATE-----\nAA\n"
                               "-----END CERTIFICATE-----\n", server=True)
