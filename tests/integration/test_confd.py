"""A real corral-confd process on 127.0.0.1: answers for every query type (through the
library, the CLI and Ganeti 3.0's own Python client), reloading a changed replica
without a restart, and 100,000 random and mutated packets that change nothing."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral.confd.client import QueryResult, query_sync
from corral.confd.daemon import settings_file, stats_file
from corral.confd.protocol import (
    PROTOCOL_VERSION,
    NodeRole,
    PacketError,
    QueryType,
    Request,
    Status,
    decode_request,
    encode_request,
    seal,
)
from corral.config import ConfigStore
from corral.config.storage import sidecar_files
from corral.paths import ROOT_ENV, Paths
from corral.utils.process import running_pid, start_daemon, stop_daemon
from corral.x509 import generate_hmac_key, write_private
from tests.conftest import free_port, run_tool
from tests.unit.confd_helpers import build_config

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
GANETI = Path("/usr/share/ganeti/3.0")
SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass
class Confd:
    paths: Paths
    port: int
    pid: int
    key: bytes

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, ROOT_ENV: str(self.paths.root)}

    def ask(self, qtype: int, query: Any = None) -> QueryResult:
        return query_sync(self.key, [(HOST, self.port)], qtype, query, timeout=5)

    def answer(self, qtype: int, query: Any = None) -> tuple[int, Any, int]:
        best = self.ask(qtype, query).best
        assert best is not None, f"no answer to type {qtype}"
        return best.status, best.answer, best.serial

    def stats(self) -> dict[str, Any]:
        """The counters, as SIGUSR1 makes the daemon write them."""
        path = stats_file(self.paths)
        before = path.stat().st_mtime_ns if path.exists() else None
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if path.exists() and path.stat().st_mtime_ns != before:
                try:
                    stats: dict[str, Any] = json.loads(path.read_text())
                    return stats
                except ValueError:
                    pass
            time.sleep(0.02)
        raise AssertionError("confd did not write its counters")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@pytest.fixture
def confd(tmp_path: Path) -> Iterator[Confd]:
    """A candidate's view: the configuration as a replica file, and the key."""
    paths = Paths(tmp_path / "node")
    paths.ensure_dirs()
    build_config(paths.config_replica).close()
    write_private(paths.confd_hmac_key, generate_hmac_key())
    port = free_port(HOST, socket.SOCK_DGRAM)
    # started as corral-daemons would: no arguments, the address from confd.json
    settings_file(paths).write_text(json.dumps({"bind": HOST, "port": port}))
    env = {**os.environ, ROOT_ENV: str(paths.root)}
    pid = start_daemon("corral-confd", [sys.executable, "-m", "corral.confd"],
                       log_file=paths.log_file("confd-start"), env=env)
    try:
        yield Confd(paths, port, pid, paths.confd_hmac_key.read_bytes())
    finally:
        if running_pid(paths.pid_file("confd")) == pid:
            stop_daemon(paths.pid_file("confd"))


def test_answers_every_query_type(confd: Confd) -> None:
    serial = confd.answer(QueryType.PING)[2]
    assert serial >= 2
    expected: list[tuple[int, Any, Any]] = [
        (QueryType.PING, None, 1),
        (QueryType.NODE_ROLE_BYNAME, "node1", NodeRole.MASTER),
        (QueryType.NODE_ROLE_BYNAME, "node2", NodeRole.CANDIDATE),
        (QueryType.NODE_ROLE_BYNAME, "node3", NodeRole.REGULAR),
        (QueryType.NODE_ROLE_BYNAME, "node4", NodeRole.DRAINED),
        (QueryType.NODE_ROLE_BYNAME, "node5", NodeRole.OFFLINE),
        (QueryType.NODE_PIP_BY_INSTANCE_IP, {"1": "198.51.100.1"}, "192.0.2.2"),
        (QueryType.NODE_PIP_BY_INSTANCE_IP, {"1": "203.0.113.1", "0": "br1"}, "192.0.2.2"),
        (QueryType.NODE_PIP_BY_INSTANCE_IP, {"2": ["198.51.100.2"]},
         [[0, "192.0.2.3", serial]]),
        (QueryType.CLUSTER_MASTER, None, "node1"),
        (QueryType.CLUSTER_MASTER, {"3": [0, 1, 2]}, ["node1", "192.0.2.254", "192.0.2.1"]),
        (QueryType.NODE_PIP_LIST, None,
         ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"]),
        (QueryType.MC_PIP_LIST, None, ["192.0.2.1", "192.0.2.2", "192.0.2.4"]),
        (QueryType.INSTANCES_IPS_LIST, None, ["198.51.100.1", "198.51.100.2"]),
        (QueryType.INSTANCES_IPS_LIST, "br1", ["203.0.113.1"]),
        (QueryType.INSTANCE_LIST, None, ["db1", "web1", "web2"]),
        (QueryType.INSTANCE_PRIMARY_NODE, "web1", "node2"),
        (QueryType.OFFLINE_NODES, None, ["node5"]),
    ]
    for qtype, query, value in expected:
        assert confd.answer(qtype, query) == (Status.OK, value, serial), (qtype, query)
    assert confd.answer(QueryType.NODE_ROLE_BYNAME, "ghost") == (Status.ERROR, 0, serial)
    assert confd.answer(QueryType.NODE_PIP_BY_INSTANCE_IP, "198.51.100.1") == (
        Status.ERROR, 2, serial)
    assert confd.answer(QueryType.NODE_DRBD, "node1")[0] == Status.NOTIMPLEMENTED
    assert confd.ask(77).best is None  # no such type: dropped, as Ganeti does


def test_the_cli(confd: Confd) -> None:
    server = ["--server", f"{HOST}:{confd.port}"]
    assert run_tool(["corral-confd-query", "cluster-master", *server],
                    confd.env).stdout == "node1\n"
    assert run_tool(["corral-confd-query", "node-role", "node4", *server],
                    confd.env).stdout == "drained\n"
    assert run_tool(["corral-confd-query", "mc-pip-list", *server],
                    confd.env).stdout.split() == ["192.0.2.1", "192.0.2.2", "192.0.2.4"]
    out = json.loads(run_tool(["corral-confd-query", "2", "198.51.100.2", "--json", *server],
                              confd.env).stdout)
    assert out["status"] == 0 and out["answer"] == "192.0.2.3" and out["answers"] == 1
    failed = run_tool(["corral-confd-query", "node-role", "ghost", *server], confd.env,
                      check=False)
    assert failed.returncode == 1 and "unknown entry" in failed.stderr
    bad = run_tool(["corral-confd-query", "pong", *server], confd.env, check=False)
    assert bad.returncode != 0 and "accepted: ping (0)" in bad.stderr
    # without --server: the master candidates from the local replica, on the port
    # of confd.json; those addresses have no confd here, so expect no answer
    none = run_tool(["corral-confd-query", "ping", "--timeout", "0.2"], confd.env,
                    check=False)
    assert none.returncode == 1 and "no answer from 3 confd server(s)" in none.stderr


def test_reloads_a_changed_replica_without_restart(confd: Confd) -> None:
    before = confd.answer(QueryType.PING)[2]
    with ConfigStore.open(confd.paths.config_replica) as store, store.transaction() as txn:
        node = txn.get("node", "node3")
        node.offline = True
        txn.update(node)
        inst = txn.get("instance", "web2")
        inst.primary_node = txn.get("node", "node1").uuid
        txn.update(inst)
    deadline = time.monotonic() + 10
    while confd.answer(QueryType.PING)[2] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert confd.answer(QueryType.NODE_ROLE_BYNAME, "node3") == (
        Status.OK, NodeRole.OFFLINE, before + 1)
    assert confd.answer(QueryType.NODE_PIP_BY_INSTANCE_IP, {"1": "198.51.100.2"})[1] == (
        "192.0.2.1")
    assert confd.answer(QueryType.OFFLINE_NODES)[1] == ["node3", "node5"]
    # a replica the node daemon replaced wholesale (a snapshot) is picked up too
    replacement = confd.paths.data_dir / "replacement.db"
    with build_config(replacement) as store, store.transaction() as txn:
        for _ in range(3):
            cluster = txn.get("cluster", store.cluster.uuid)
            cluster.master_ip = "192.0.2.253"
            txn.update(cluster)
    for sidecar in sidecar_files(confd.paths.config_replica):
        sidecar.unlink(missing_ok=True)  # a replaced database must not meet the old WAL
    os.replace(replacement, confd.paths.config_replica)
    deadline = time.monotonic() + 10
    while (confd.answer(QueryType.CLUSTER_MASTER, {"3": [1]})[1] != ["192.0.2.253"]
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert confd.answer(QueryType.CLUSTER_MASTER, {"3": [1]})[1] == ["192.0.2.253"]
    assert confd.answer(QueryType.NODE_ROLE_BYNAME, "node3")[1] == NodeRole.REGULAR
    assert running_pid(confd.paths.pid_file("confd")) == confd.pid


_GANETI_DRIVER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ganeti.confd import client as cc
key = open(sys.argv[2]).read()
store = cc.StoreResultCallback()
confd = cc.ConfdClient(key, ["127.0.0.1"], store, port=int(sys.argv[3]))
out = []
for qtype, query in json.loads(sys.argv[4]):
    request = cc.ConfdClientRequest(type=qtype, query=query)
    confd.SendRequest(request, async_=False)
    timed_out, sent, received = confd.WaitForReply(request.rsalt, timeout=5)
    have, upcall = store.GetResponse(request.rsalt)
    reply = upcall.server_reply if have else None
    out.append(None if reply is None else
               [reply.protocol, reply.status, reply.answer, reply.serial])
print(json.dumps(out))
"""


def test_ganetis_own_client_gets_correct_answers(confd: Confd) -> None:
    if not (GANETI / "ganeti" / "confd" / "client.py").exists() or not Path(
            SYSTEM_PYTHON).exists():
        print(f"SKIP REASON: Ganeti 3.0's confd client is not installed at {GANETI}")
        pytest.skip(f"Ganeti 3.0's confd client is not installed at {GANETI}")
    serial = confd.answer(QueryType.PING)[2]
    queries: list[tuple[int, Any]] = [
        (0, None), (1, "node1"), (1, "node2"), (1, "node5"), (1, "nosuchnode"),
        (2, {"1": "198.51.100.1"}), (2, {"2": ["198.51.100.2", "10.9.9.9"]}),
        (3, None), (3, {"3": [0, 2]}), (4, None), (5, None), (6, None), (6, "br1"),
    ]
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-c", _GANETI_DRIVER, str(GANETI), str(confd.paths.confd_hmac_key),
         str(confd.port), json.dumps(queries)],
        capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    replies = json.loads(proc.stdout)
    ok = 0
    assert replies == [
        [1, ok, 1, serial],
        [1, ok, NodeRole.MASTER, serial],
        [1, ok, NodeRole.CANDIDATE, serial],
        [1, ok, NodeRole.OFFLINE, serial],
        [1, 1, 0, serial],
        [1, ok, "192.0.2.2", serial],
        [1, ok, [[0, "192.0.2.3", serial], [1, 0, 0]], serial],
        [1, ok, "node1", serial],
        [1, ok, ["node1", "192.0.2.1"], serial],
        [1, ok, ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"], serial],
        [1, ok, ["192.0.2.1", "192.0.2.2", "192.0.2.4"], serial],
        [1, ok, ["198.51.100.1", "198.51.100.2"], serial],
        [1, ok, ["203.0.113.1"], serial],
    ]


def _fuzz_packets(key: bytes, count: int, rng: random.Random) -> list[bytes]:
    now = time.time()
    valid = [encode_request(key, Request(PROTOCOL_VERSION, t, f"fuzz-{i}", q), now)
             for i, (t, q) in enumerate([(0, None), (1, "node1"), (2, {"1": "198.51.100.1"}),
                                         (3, {"3": [0, 1, 2]}), (6, "br1")] * 20)]
    forged = [encode_request(b"not-the-cluster-key", Request(PROTOCOL_VERSION, 3, f"f{i}"), now)
              for i in range(200)]
    stale = [encode_request(key, Request(PROTOCOL_VERSION, 3, f"s{i}"), now - 301 - i)
             for i in range(200)]
    deep = [seal(key, str(int(now)), '{"protocol":1,"type":3,"rsalt":"d","query":'
                   + "[" * depth + "]" * depth + "}") for depth in (1000, 1500, 1900)]
    packets: list[bytes] = []
    for i in range(count):
        kind = i % 6
        if kind == 0:
            packets.append(rng.randbytes(rng.randrange(0, 700)))
        elif kind == 1:
            packets.append(b"plj0" + rng.randbytes(rng.randrange(0, 700)))
        elif kind in (2, 3):
            packet = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                packet[rng.randrange(len(packet))] = rng.randrange(256)
            packets.append(bytes(packet))
        elif kind == 4:
            packets.append(rng.choice(forged) if i % 12 == 4 else rng.choice(stale))
        elif i % 12 == 5:
            packets.append(rng.choice(deep))  # signed, but nested past any parser's depth
        else:
            packets.append(b"plj0" + b"{" * rng.choice((10, 5000, 9000)))
    return packets


def test_fuzzing_changes_nothing(confd: Confd) -> None:
    for _ in range(50):  # warm up before measuring memory
        confd.answer(QueryType.CLUSTER_MASTER)
    rss_before = confd.rss_kib()
    stats_before = confd.stats()
    packets = _fuzz_packets(confd.key, 100_000, random.Random(20261123))
    # what the protocol would answer: mutations that leave a packet valid (an hmac
    # digit changed in case); everything else must stay unanswered
    answerable = 0
    for packet in packets:
        try:
            decode_request(packet, confd.key, time.time())
            answerable += 1
        except PacketError:
            pass
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    answers = 0
    started = time.monotonic()
    try:
        for i, packet in enumerate(packets):
            with contextlib.suppress(BlockingIOError):
                sock.sendto(packet, (HOST, confd.port))
            if i % 256 == 255:
                time.sleep(0.001)  # let the receive buffer drain now and then
                while True:
                    try:
                        sock.recv(65536)
                        answers += 1
                    except BlockingIOError:
                        break
        time.sleep(0.5)
        while True:
            try:
                sock.recv(65536)
                answers += 1
            except BlockingIOError:
                break
    finally:
        sock.close()
    elapsed = time.monotonic() - started
    stats = confd.stats()
    received = stats["received"] - stats_before["received"]
    print(f"fuzz: sent {len(packets)} in {elapsed:.1f}s, confd received {received}, "
          f"answered {answers} (answerable {answerable}), counters {stats}")
    assert answers <= answerable
    assert stats["errors"] == 0
    assert stats["dropped_forged"] > stats_before["dropped_forged"]
    assert stats["dropped_stale"] > stats_before["dropped_stale"]
    assert stats["dropped_malformed"] > stats_before["dropped_malformed"]
    assert received > len(packets) // 10
    # still answering, still the same process, memory flat
    assert confd.answer(QueryType.CLUSTER_MASTER)[:2] == (Status.OK, "node1")
    assert running_pid(confd.paths.pid_file("confd")) == confd.pid
    growth = confd.rss_kib() - rss_before
    assert growth < 16 * 1024, f"RSS grew by {growth} KiB"


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_drops_privileges_after_reading_key_and_config(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "node")
    paths.ensure_dirs()
    build_config(paths.config_replica).close()
    write_private(paths.confd_hmac_key, generate_hmac_key())
    port = free_port(HOST, socket.SOCK_DGRAM)
    env = {**os.environ, ROOT_ENV: str(paths.root)}
    pid = start_daemon("corral-confd", [sys.executable, "-m", "corral.confd", "--bind", HOST,
                                        "--port", str(port), "--user", "nobody"],
                       log_file=paths.log_file("confd-start"), env=env)
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        nobody = subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True,
                                check=True).stdout.strip()
        assert set(uids) == {nobody}
        confd = Confd(paths, port, pid, paths.confd_hmac_key.read_bytes())
        assert confd.answer(QueryType.CLUSTER_MASTER)[:2] == (Status.OK, "node1")
    finally:
        stop_daemon(paths.pid_file("confd"))
