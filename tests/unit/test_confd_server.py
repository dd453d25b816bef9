"""confd's datagram handling (what is answered, what is dropped and counted) and its
configuration source (reload on change, keep the old snapshot on a bad file)."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import socket
import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corral.confd
from corral.confd.answers import Snapshot, build_snapshot
from corral.confd.daemon import Settings, read_settings, settings_file
from corral.confd.protocol import (
    ErrorCode,
    QueryType,
    Reply,
    Request,
    Status,
    decode_reply,
    encode_request,
)
from corral.confd.server import ConfdProtocol, serve_socket
from corral.confd.source import SnapshotSource, config_path
from corral.config import ConfigStore
from corral.config.readonly import load_readonly
from corral.errors import ParameterError
from corral.paths import Paths
from tests.unit.confd_helpers import KEY, build_config

NOW = 1_700_000_000.0


def _snap(tmp_path: Path) -> Snapshot:
    path = tmp_path / "config.db"
    if not path.exists():
        build_config(path).close()
    return build_snapshot(load_readonly(path))


def _protocol(snap: Snapshot | None) -> ConfdProtocol:
    return ConfdProtocol(KEY, lambda: snap, clock=lambda: NOW)


def _ask(proto: ConfdProtocol, qtype: int, query: object = None, rsalt: str = "rs") -> Reply:
    packet = proto.handle(encode_request(KEY, Request(1, qtype, rsalt, query), NOW))
    assert packet is not None
    return decode_reply(packet, KEY, rsalt)


def test_valid_requests_are_answered_with_the_serial(tmp_path: Path) -> None:
    snap = _snap(tmp_path)
    proto = _protocol(snap)
    assert _ask(proto, QueryType.CLUSTER_MASTER) == Reply(1, Status.OK, "node1", snap.serial)
    assert _ask(proto, QueryType.NODE_ROLE_BYNAME, "ghost") == Reply(
        1, Status.ERROR, ErrorCode.UNKNOWN_ENTRY, snap.serial)
    assert proto.counters.answered == 2


def test_without_a_configuration_requests_get_an_internal_error() -> None:
    proto = _protocol(None)
    assert _ask(proto, QueryType.PING) == Reply(1, Status.ERROR, ErrorCode.INTERNAL, 0)


def test_every_kind_of_bad_packet_is_dropped_and_counted(tmp_path: Path) -> None:
    proto = _protocol(_snap(tmp_path))
    good = encode_request(KEY, Request(1, 0, "x"), NOW)
    assert proto.handle(b"garbage") is None
    assert proto.handle(b"plj0" + b"x" * 5000) is None
    assert proto.handle(encode_request(b"wrong key", Request(1, 0, "x"), NOW)) is None
    assert proto.handle(encode_request(KEY, Request(1, 0, "x"), NOW - 3600)) is None
    assert proto.handle(encode_request(KEY, Request(1, 55, "x"), NOW)) is None
    assert proto.handle(good) is not None
    assert proto.counters.as_dict() == {
        "received": 6, "answered": 1, "dropped_malformed": 2, "dropped_forged": 1,
        "dropped_stale": 1, "dropped_unknown_type": 1, "errors": 0}


def test_an_oversize_answer_becomes_an_internal_error(tmp_path: Path) -> None:
    snap = _snap(tmp_path)
    big = Snapshot(**{**snap.__dict__, "memo": {}, "node_pips": ["192.0.2.1" * 10] * 1000})
    reply = _ask(_protocol(big), QueryType.NODE_PIP_LIST)
    assert reply == Reply(1, Status.ERROR, ErrorCode.INTERNAL, snap.serial)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_datagram_received_never_raises(data: bytes) -> None:
    proto = _protocol(None)
    proto.datagram_received(data, ("127.0.0.1", 9))
    proto.datagram_received(b"plj0" + data, ("127.0.0.1", 9))
    assert proto.counters.errors == 0


def test_unexpected_failures_are_counted_not_raised(tmp_path: Path) -> None:
    def broken() -> Snapshot:
        raise RuntimeError("boom")

    proto = ConfdProtocol(KEY, broken, clock=lambda: NOW)
    proto.datagram_received(encode_request(KEY, Request(1, 0, "x"), NOW), ("127.0.0.1", 9))
    assert proto.counters.errors == 1


async def test_serve_socket_answers_over_udp(tmp_path: Path) -> None:
    snap = _snap(tmp_path)
    proto = ConfdProtocol(KEY, lambda: snap)
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.setblocking(False)
    stop = serve_socket(server, proto)
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        for i in range(20):
            client.sendto(b"junk", server.getsockname())
            client.sendto(encode_request(KEY, Request(1, 3, f"r{i}"), time.time()),
                          server.getsockname())
        replies = [await asyncio.wait_for(loop.sock_recv(client, 65536), 5) for _ in range(20)]
        assert {decode_reply(r, KEY, f"r{i}").answer for i, r in enumerate(replies)} == {"node1"}
        assert proto.counters.dropped_malformed == 20
    finally:
        stop()
        server.close()
        client.close()


async def test_source_reloads_on_change_and_keeps_the_old_on_failure(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "root")
    paths.ensure_dirs()
    build_config(tmp_path / "seed.db").close()
    replica = paths.config_replica
    assert config_path(paths) == replica
    source = SnapshotSource(paths)
    assert await source.check() is False and source.current is None  # no file yet
    shutil.copy(tmp_path / "seed.db", replica)
    assert await source.check() is True
    assert source.current is not None
    first = source.current.serial
    assert await source.check() is False  # nothing changed: no reload
    with ConfigStore.open(replica) as store, store.transaction() as txn:
        node = txn.get("node", "node2")
        node.offline = True
        txn.update(node)
    assert await source.check() is True
    assert source.current.serial == first + 1
    assert source.current.offline_nodes == ["node2", "node5"]
    # a corrupt replica: logged, the previous snapshot stays
    for stale in (replica, replica.with_name(replica.name + "-wal"),
                  replica.with_name(replica.name + "-shm")):
        stale.unlink(missing_ok=True)
    replica.write_bytes(bytes(random.Random(1).randrange(256) for _ in range(8192)))
    assert await source.check() is False
    assert source.current.serial == first + 1
    # a replica without a cluster yet (fresh from the node daemon): also kept out
    replica.unlink()
    conn = sqlite3.connect(replica)
    conn.executescript("CREATE TABLE objects (kind TEXT, uuid TEXT PRIMARY KEY, serial INTEGER,"
                       " json TEXT); CREATE TABLE meta (key TEXT PRIMARY KEY, value);"
                       "INSERT INTO meta VALUES ('schema_version', 1), ('serial', 0);")
    conn.close()
    assert await source.check() is False
    assert source.current.serial == first + 1
    # the master's own store wins once it exists
    shutil.copy(tmp_path / "seed.db", paths.config_db)
    assert config_path(paths) == paths.config_db
    assert await source.check() is True
    assert source.current.serial == first


async def test_background_watch_picks_up_a_commit(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "root")
    paths.ensure_dirs()
    store = build_config(paths.config_db)
    source = SnapshotSource(paths, interval=0.05)
    source.start()
    try:
        for _ in range(100):
            if source.current is not None:
                break
            await asyncio.sleep(0.02)
        assert source.current is not None and source.current.serial == store.serial
        with store.transaction() as txn:
            node = txn.get("node", "node3")
            node.drained = True
            txn.update(node)
        for _ in range(100):
            if source.current.serial == store.serial:
                break
            await asyncio.sleep(0.02)
        assert source.current.serial == store.serial
        assert source.current.roles["node3"] == 3
    finally:
        await source.stop()
        store.close()


def test_daemon_settings_come_from_the_command_line_then_confd_json(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.ensure_dirs()
    assert read_settings(paths) == Settings(bind="0.0.0.0", port=1814, user=None, group=None)
    settings_file(paths).write_text(json.dumps({"bind": "127.0.1.2", "port": 5000}))
    assert read_settings(paths).bind == "127.0.1.2"
    assert read_settings(paths, port=6000, bind=None).port == 6000
    settings_file(paths).write_text(json.dumps({"port": "x"}))
    with pytest.raises(ParameterError, match=r"confd\.json: port: Expected `int`, got `str`"):
        read_settings(paths)
    with pytest.raises(ParameterError, match="--port: port: Expected `int`"):
        read_settings(paths, port="y")
    settings_file(paths).write_text(json.dumps({"listen": "x"}))
    with pytest.raises(ParameterError, match=r"unknown setting.*listen; known: bind, port"):
        read_settings(paths)


def test_the_public_surface() -> None:
    assert set(corral.confd.__all__) == {
        "DEFAULT_PORT", "ConfdAnswer", "ConfdClient", "ErrorCode", "NodeRole", "QueryKey",
        "QueryResult", "QueryType", "Status", "query_sync"}
    assert all(hasattr(corral.confd, name) for name in corral.confd.__all__)
