"""Real noded processes on loopback: joining by token, mutual TLS, concurrent calls."""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral import bootstrap, x509
from corral.config import ConfigStore
from corral.errors import JoinError, NodeUnreachableError, ParameterError
from corral.masterd.rpc import MasterRpc
from corral.noded import daemon as noded_daemon
from corral.noded.daemon import ConsoleFallbackHandler
from corral.objects import Node
from corral.objects.specs import DiskSpec
from corral.paths import ROOT_ENV, Paths
from corral.rpc import RpcClient
from corral.utils.process import start_daemon, stop_daemon
from corral.x509.tls import client_context
from tests.conftest import free_port

pytestmark = pytest.mark.integration

MASTER_IP = "127.0.1.1"
NODE2_IP = "127.0.1.2"


def _start_noded(paths: Paths, ip: str, port: int) -> int:
    paths.ensure_dirs()
    x509.write_public(paths.noded_settings, json.dumps({"bind": ip, "port": port}))
    env = {**os.environ, ROOT_ENV: str(paths.root)}
    return start_daemon("corral-noded", [sys.executable, "-m", "corral.noded", "--no-mlock"],
                        log_file=paths.log_file("noded"), env=env)


@dataclass
class Cluster:
    master: Paths
    node2: Paths
    port: int


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """An initialised master root and a fresh node root, each with a running noded."""
    port = free_port(MASTER_IP)
    master = Paths(tmp_path / "n1")
    node2 = Paths(tmp_path / "n2")
    bootstrap.init_cluster(master, bootstrap.InitOptions(
        cluster_name="cluster.test", master_name="node1.test", primary_ip=MASTER_IP,
        noded_port=port))
    try:
        _start_noded(master, MASTER_IP, port)
        _start_noded(node2, NODE2_IP, port)
        yield Cluster(master, node2, port)
    finally:
        for paths in (master, node2):
            stop_daemon(paths.pid_file("noded"))


@dataclass
class Master:
    store: ConfigStore
    rpc: MasterRpc
    client: RpcClient
    master_node: Node
    node2: Node


@pytest.fixture
async def master(cluster: Cluster) -> AsyncIterator[Master]:
    store = ConfigStore.open(cluster.master.config_db)
    client = RpcClient(cluster.master)
    group = store.all("nodegroup")[0]
    node2 = Node(name="node2.test", primary_ip=NODE2_IP, group=group.uuid)
    try:
        yield Master(store, MasterRpc(store, cluster.master, client), client,
                     store.get("node", store.cluster.master_node), node2)
    finally:
        await client.close()
        store.close()


def _token(paths: Paths) -> str:
    return paths.join_token.read_text().strip()


async def test_join_then_call_both_nodes(cluster: Cluster, master: Master) -> None:
    token_file = cluster.node2.join_token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o400
    token = _token(cluster.node2)
    assert f"join token: {token}" in cluster.node2.log_file("noded").read_text()
    assert not cluster.master.join_token.exists(), "a joined node makes no token"

    # Before joining, the fresh node is not reachable by RPC (its certificate is its own).
    before = await master.rpc.call([master.node2], "version", {}, timeout=5)
    assert before["node2.test"].unreachable

    wrong = await master.rpc.join(master.node2, token[::-1])
    assert isinstance(wrong.error, JoinError) and "invalid join token" in str(wrong.error)
    assert _token(cluster.node2) == token

    joined = await master.rpc.join(master.node2, token)
    assert not joined.failed, joined.error
    assert not token_file.exists()
    membership = json.loads(cluster.node2.node_membership.read_text())
    assert membership["node_name"] == "node2.test"
    assert membership["cluster_name"] == "cluster.test"
    assert membership["noded_port"] == cluster.port
    for key in (cluster.node2.node_key, cluster.node2.confd_hmac_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o400

    nodes = [master.master_node, master.node2]
    versions = await master.rpc.call(nodes, "version", {}, timeout=10)
    assert [versions[n.name].payload["rpc_version"] for n in nodes] == [1, 1]
    info = await master.rpc.call(
        nodes, "node_info",
        {"storage_dirs": [master.store.cluster.file_storage_dir], "hypervisors": ["fake"]},
        timeout=10)
    for node in nodes:
        payload = info[node.name].get("node_info")
        assert payload["memory_total"] > 0 and payload["cpu_count"] >= 1
        # What Ganeti's node info has too (htools read these through RAPI).
        assert payload["cpu_total"] == payload["cpu_dom0"] == payload["cpu_count"]
        assert payload["cpu_sockets"] >= 1 and payload["cpu_nodes"] >= 1
        assert payload["memory_hv"] == 0  # no instance runs yet
        assert payload["storage"][master.store.cluster.file_storage_dir]["free"] > 0

    again = await master.rpc.join(master.node2, token)
    assert isinstance(again.error, JoinError)
    assert "already a member of cluster cluster.test" in str(again.error)


async def test_clients_without_cluster_certificate_are_refused(
    cluster: Cluster, master: Master, tmp_path: Path
) -> None:
    target = [("node1.test", MASTER_IP, cluster.port)]
    anonymous = RpcClient(cluster.master, ssl_context=client_context(cluster.master.ca_cert))
    foreign_ca = x509.create_ca("intruder CA", 1)
    cert, key = x509.sign_node_cert(foreign_ca[0], foreign_ca[1], "node1.test", [MASTER_IP], 1)
    x509.write_public(tmp_path / "intruder.pem", cert)
    x509.write_private(tmp_path / "intruder-key.pem", key)
    intruder = RpcClient(cluster.master, ssl_context=client_context(
        cluster.master.ca_cert, tmp_path / "intruder.pem", tmp_path / "intruder-key.pem"))
    try:
        for client in (anonymous, intruder):
            results = await client.call(target, "version", {}, timeout=5)
            assert results["node1.test"].unreachable, results
    finally:
        await anonymous.close()
        await intruder.close()
    ok = await master.client.call(target, "version", {}, timeout=5)
    assert not ok["node1.test"].failed


async def test_offline_unknown_and_bad_arguments(cluster: Cluster, master: Master) -> None:
    offline = Node(name="node9.test", primary_ip="127.0.1.9", group=master.node2.group,
                   offline=True)
    results = await master.rpc.call([offline, master.master_node], "version", {}, timeout=5)
    assert list(results) == ["node9.test", "node1.test"]
    assert isinstance(results["node9.test"].error, NodeUnreachableError)
    assert "node node9.test is offline" in str(results["node9.test"].error)

    unknown = await master.rpc.call([master.master_node], "fly", {}, timeout=5)
    assert isinstance(unknown["node1.test"].error, ParameterError)
    assert "unknown procedure 'fly'" in str(unknown["node1.test"].error)
    bad = await master.rpc.call([master.master_node], "blockdev_create", {"disk": 3}, timeout=5)
    assert isinstance(bad["node1.test"].error, ParameterError)
    assert "blockdev_create" in str(bad["node1.test"].error)


async def test_leave_and_rejoin_with_a_new_token(cluster: Cluster, master: Master) -> None:
    first = _token(cluster.node2)
    assert not (await master.rpc.join(master.node2, first)).failed
    left = await master.rpc.call([master.node2], "node_leave", {}, timeout=10)
    assert not left["node2.test"].failed, left
    assert not cluster.node2.node_membership.exists()
    second = _token(cluster.node2)
    assert second != first
    gone = (await master.rpc.call([master.node2], "version", {}, timeout=5))["node2.test"]
    # A new connection fails the handshake; one kept alive from before is refused.
    assert gone.unreachable or "left the cluster" in str(gone.error)
    assert not (await master.rpc.join(master.node2, second)).failed
    back = await master.rpc.call([master.node2], "version", {}, timeout=5)
    assert back["node2.test"].payload["rpc_version"] == 1

    refused = await master.rpc.call([master.master_node], "node_leave", {}, timeout=5)
    assert "master" in str(refused["node1.test"].error)


def _write_at(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def _same_content(one: Path, other: Path) -> bool:
    return one.read_bytes() == other.read_bytes()


async def test_disk_copied_between_nodes(cluster: Cluster, master: Master) -> None:
    assert not (await master.rpc.join(master.node2, _token(cluster.node2))).failed
    storage_dir = master.store.cluster.file_storage_dir
    disk = DiskSpec(uuid="d1", index=0, dev_type="file", size=4,
                    logical_id=["loop", f"{storage_dir}/inst1/d1.disk0"])
    spec = {"uuid": disk.uuid, "index": 0, "dev_type": "file", "size": 4,
            "logical_id": disk.logical_id}
    created = await master.rpc.call([master.master_node], "blockdev_create", {"disk": spec},
                                    timeout=10)
    local = Path(created["node1.test"].get("creating the disk")["path"])
    _write_at(local, 3 << 20, b"corral" * 1000)
    copied = await master.rpc.call(
        [master.node2], "blockdev_copy_from",
        {"disk": spec, "source_disk": spec, "source_ip": MASTER_IP,
         "source_port": cluster.port}, timeout=30)
    assert copied["node2.test"].get("copying")["bytes"] == 4 << 20
    target = cluster.node2.node_path(disk.logical_id[1])
    assert _same_content(target, local)

    missing = dict(spec, logical_id=["loop", f"{storage_dir}/inst1/none.disk0"])
    failed = await master.rpc.call(
        [master.node2], "blockdev_copy_from",
        {"disk": missing, "source_disk": missing, "source_ip": MASTER_IP,
         "source_port": cluster.port}, timeout=30)
    assert failed["node2.test"].failed
    assert "source node 127.0.1.1" in str(failed["node2.test"].error)


def test_log_records_that_cannot_be_written_go_to_the_console(tmp_path: Path) -> None:
    console = tmp_path / "console"
    handler = ConsoleFallbackHandler(str(tmp_path / "noded.log"), console=str(console))
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.stream.close()
    handler.stream = (tmp_path / "noded.log").open("r")  # every write now fails
    try:
        handler.emit(logging.LogRecord("corral.noded", logging.ERROR, __file__, 1,
                                       "disk %s failed", ("sda",), None))
    finally:
        handler.close()
    assert console.read_text() == "ERROR disk sda failed\n"


def test_refused_mlockall_is_logged_not_fatal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class RefusingLibc:
        def mlockall(self, flags: int) -> int:
            assert flags == 3  # MCL_CURRENT | MCL_FUTURE
            return -1

    monkeypatch.setattr(noded_daemon.ctypes, "CDLL", lambda *_a, **_k: RefusingLibc())
    monkeypatch.setattr(noded_daemon.ctypes, "get_errno", lambda: errno.EPERM)
    with caplog.at_level(logging.WARNING, logger="corral.noded"):
        assert noded_daemon.lock_memory() is False
    assert "mlockall" in caplog.text and os.strerror(errno.EPERM) in caplog.text


def test_settings_file_is_checked(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.ensure_dirs()
    assert (noded_daemon.read_settings(paths).bind, noded_daemon.read_settings(paths).port) == (
        "0.0.0.0", 1811)
    x509.write_public(paths.noded_settings, json.dumps({"bind": "127.0.1.7", "port": 4000}))
    settings = noded_daemon.read_settings(paths, port=4001)
    assert (settings.bind, settings.port) == ("127.0.1.7", 4001)
    x509.write_public(paths.noded_settings, json.dumps({"bind": "here", "port": 4000}))
    with pytest.raises(ParameterError, match="bind address 'here' is not an IP address"):
        noded_daemon.read_settings(paths)
    x509.write_public(paths.noded_settings, json.dumps({"port": 4000, "colour": "red"}))
    with pytest.raises(ParameterError, match="unknown setting"):
        noded_daemon.read_settings(paths)
