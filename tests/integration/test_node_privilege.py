"""Least privilege of real node daemons: each hole closed, shown with a valid certificate.

A cluster of real ``corral-noded`` processes on loopback: node1 (the master, made by
``init_cluster``), node2 (joined, a plain node) and, for the join tests, node3 and
node4 waiting to join. Every caller below holds a certificate the cluster CA signed
(or the RAPI's, which corral-rapi really serves with), so the handshake lets it in
and what is refused is refused by the node daemon's own checks.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from corral import bootstrap, x509
from corral.config import ConfigStore
from corral.errors import AccessDeniedError, JoinError, ParameterError
from corral.masterd.rpc import MasterRpc
from corral.objects import Node
from corral.paths import ROOT_ENV, Paths
from corral.rpc import RpcClient
from corral.rpc.client import node_client_context
from corral.rpc.protocol import JOIN_PATH, rpc_path
from corral.utils.process import start_daemon, stop_daemon
from corral.x509.tls import client_context
from tests.conftest import free_port

pytestmark = pytest.mark.integration

IPS = {1: "127.0.1.1", 2: "127.0.1.2", 3: "127.0.1.3", 4: "127.0.1.4"}


def _start_noded(paths: Paths, ip: str, port: int) -> None:
    paths.ensure_dirs()
    x509.write_public(paths.noded_settings, json.dumps({"bind": ip, "port": port}))
    env = {**os.environ, ROOT_ENV: str(paths.root)}
    start_daemon("corral-noded", [sys.executable, "-m", "corral.noded", "--no-mlock"],
                 log_file=paths.log_file("noded"), env=env)


@dataclass
class Cluster:
    roots: dict[int, Paths]
    port: int
    store: ConfigStore
    rpc: MasterRpc
    client: RpcClient

    def node(self, index: int) -> Node:
        return Node(name=f"node{index}.test", primary_ip=IPS[index],
                    group=self.store.all("nodegroup")[0].uuid)

    def target(self, index: int) -> tuple[str, str, int]:
        return (f"node{index}.test", IPS[index], self.port)


@pytest.fixture
def roots(tmp_path: Path) -> Iterator[tuple[dict[int, Paths], int]]:
    port = free_port(IPS[1])
    paths = {i: Paths(tmp_path / f"n{i}") for i in IPS}
    bootstrap.init_cluster(paths[1], bootstrap.InitOptions(
        cluster_name="cluster.test", master_name="node1.test", primary_ip=IPS[1],
        noded_port=port))
    try:
        for index, root in paths.items():
            _start_noded(root, IPS[index], port)
        yield paths, port
    finally:
        for root in paths.values():
            stop_daemon(root.pid_file("noded"))
            stop_daemon(root.pid_file("rapi"))


@pytest.fixture
async def cluster(roots: tuple[dict[int, Paths], int]) -> AsyncIterator[Cluster]:
    paths, port = roots
    store = ConfigStore.open(paths[1].config_db)
    client = RpcClient(paths[1])
    rpc = MasterRpc(store, paths[1], client)
    result = Cluster(paths, port, store, rpc, client)
    try:
        joined = await rpc.join(result.node(2), _token(paths[2]))
        assert not joined.failed, joined.error
        yield result
    finally:
        await client.close()
        store.close()


def _token(paths: Paths) -> str:
    return paths.join_token.read_text().strip()


def _file(data: bytes, mode: int = 0o644, **where: str) -> dict[str, Any]:
    return {**where, "data": base64.b64encode(data).decode(), "mode": mode}


async def _call(client: RpcClient, cluster: Cluster, index: int, procedure: str,
                args: dict[str, Any]) -> Any:
    return (await client.call([cluster.target(index)], procedure, args, timeout=10)
            )[f"node{index}.test"]


# -- upload_files: a fixed, node-side set of files ------------------------------------
async def test_upload_of_a_path_the_node_does_not_list_is_refused(cluster: Cluster) -> None:
    node2 = cluster.roots[2]
    cron = node2.node_path("/etc/cron.d/corral")
    # Even the master's own certificate cannot make a node write where it did not agree,
    # neither directly nor by sending a user file list that names the path.
    for files in ([_file(b"* * * * * root sh\n", path="/etc/cron.d/corral")],
                  [_file(b"/etc/cron.d/corral\n", name="user_file_list"),
                   _file(b"* * * * * root sh\n", path="/etc/cron.d/corral")],
                  [_file(b"-----BEGIN\n", name="ca_key")]):
        refused = await _call(cluster.client, cluster, 2, "upload_files", {"files": files})
        assert isinstance(refused.error, ParameterError), refused
        assert "does not accept the file" in refused.error.message
        named = files[0].get("path") or files[0].get("name")
        assert repr(named) in refused.error.message
    assert not cron.exists()
    assert not node2.user_file_list.exists()
    assert not node2.ca_key.exists()
    # A known file is written where this node keeps it, with this node's mode.
    done = await _call(cluster.client, cluster, 2, "upload_files",
                       {"files": [_file(b"KEY\n", 0o666, name="confd_key")]})
    assert done.payload == ["confd_key"], done
    assert node2.confd_hmac_key.read_bytes() == b"KEY\n"
    assert stat.S_IMODE(node2.confd_hmac_key.stat().st_mode) == 0o400


async def test_setuid_mode_is_refused(cluster: Cluster) -> None:
    node2 = cluster.roots[2]
    node2.user_file_list.write_text("/usr/local/bin/corral-tool\n")  # the node agrees
    tool = node2.node_path("/usr/local/bin/corral-tool")
    for mode in (0o4755, 0o2755, 0o1777):
        refused = await _call(cluster.client, cluster, 2, "upload_files", {"files": [
            _file(b"#!/bin/sh\nexec sh\n", mode, path="/usr/local/bin/corral-tool")]})
        assert isinstance(refused.error, ParameterError), refused
        assert "/usr/local/bin/corral-tool" in refused.error.message
        assert "set-user-ID" in refused.error.message
        assert not tool.exists()
    done = await _call(cluster.client, cluster, 2, "upload_files", {"files": [
        _file(b"#!/bin/sh\n", 0o755, path="/usr/local/bin/corral-tool")]})
    assert not done.failed, done
    assert stat.S_IMODE(tool.stat().st_mode) == 0o755


# -- RAPI's certificate ------------------------------------------------------------
async def test_the_certificate_rapi_serves_with_is_refused_by_every_noded(
        cluster: Cluster) -> None:
    master = cluster.roots[1]
    rapi_port = free_port(IPS[1])
    env = {**os.environ, ROOT_ENV: str(master.root)}
    start_daemon("corral-rapi", [sys.executable, "-m", "corral.rapi", "--bind", IPS[1],
                                 "--port", str(rapi_port)],
                 log_file=master.log_file("rapi"), env=env)
    served = ssl.get_server_certificate((IPS[1], rapi_port))
    assert x509.fingerprint(served) == x509.fingerprint(master.rapi_cert.read_text())
    assert x509.fingerprint(served) != x509.fingerprint(master.node_cert.read_text())
    # Whoever takes RAPI's certificate and key out of the daemon reaches no node daemon,
    # not even for the procedures any cluster member may call.
    stolen = RpcClient(master, ssl_context=client_context(
        master.ca_cert, master.rapi_cert, master.rapi_key))
    try:
        for index in (1, 2):
            answer = await _call(stolen, cluster, index, "version", {})
            assert answer.unreachable, answer
    finally:
        await stolen.close()


# -- only the master's identity changes a node ----------------------------------------
MUTATING: list[tuple[str, dict[str, Any]]] = [
    ("upload_files", {"files": [_file(b"KEY\n", name="confd_key")]}),
    ("blockdev_remove", {"disk": {"uuid": "d1", "index": 0, "dev_type": "file", "size": 1,
                                  "logical_id": ["loop", "/srv/corral/file-storage/x/d"]}}),
    ("node_leave", {}),
    ("config_replicate", {}),
    ("master_takeover", {}),
]


async def test_a_node_certificate_cannot_call_a_procedure_that_changes_a_node(
        cluster: Cluster) -> None:
    node2 = cluster.roots[2]
    # node2's own certificate and the master node's node certificate: both valid,
    # both signed by the cluster CA, neither the master's client certificate.
    callers = {
        "node2": RpcClient(node2),
        "node1's node certificate": RpcClient(
            cluster.roots[1], ssl_context=node_client_context(cluster.roots[1],
                                                              as_master=False)),
    }
    try:
        for who, client in callers.items():
            for index in (1, 2):
                version = await _call(client, cluster, index, "version", {})
                assert version.payload["rpc_version"] == 1, (who, version)
                for procedure, args in MUTATING:
                    refused = await _call(client, cluster, index, procedure, args)
                    assert isinstance(refused.error, AccessDeniedError), (who, procedure,
                                                                          refused)
                    assert f"procedure {procedure} changes this node" in refused.error.message
    finally:
        for client in callers.values():
            await client.close()
    assert node2.node_membership.exists() and cluster.roots[1].config_db.exists()
    assert not node2.confd_hmac_key.read_text().startswith("KEY")
    # The refusal is HTTP 403 on the wire.
    connector = aiohttp.TCPConnector(ssl=node_client_context(node2))
    async with aiohttp.ClientSession(connector=connector) as session, session.post(
            f"https://{IPS[1]}:{cluster.port}{rpc_path('node_leave')}", json={}) as response:
        assert response.status == 403
        assert (await response.json())["error"]["code"] == "access-denied"
    # The master's client certificate may.
    done = await _call(cluster.client, cluster, 2, "upload_files",
                       {"files": [_file(b"KEY\n", name="confd_key")]})
    assert done.payload == ["confd_key"], done


# -- the join token is bound to the joining node's certificate ---------------------------
async def test_a_token_replayed_with_another_certificate_is_refused(
        cluster: Cluster) -> None:
    node3, node4 = cluster.roots[3], cluster.roots[4]
    token3, token4 = _token(node3), _token(node4)
    # The master, given node3's token but reaching a server with another certificate
    # (node4 here; an impostor in general), sends it nothing.
    replayed = await cluster.rpc.join(cluster.node(4), token3)
    assert isinstance(replayed.error, JoinError), replayed
    assert "certificate other than the one its join token names" in replayed.error.message
    assert not node4.node_membership.exists() and _token(node4) == token4
    # Someone holding node3's token and a proof made for another certificate (node4's)
    # cannot join node3 to anything either; nor can the bare token.
    secret, _fingerprint = x509.split_join_token(token3)
    _secret4, fingerprint4 = x509.split_join_token(token4)
    bundle = {"ca_cert": "", "node_cert": "", "node_key": "", "confd_key": "",
              "membership": {}}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        for body in ({"proof": x509.join_proof(secret, fingerprint4), "bundle": bundle},
                     {"token": token3, "bundle": bundle}):
            async with session.post(f"https://{IPS[3]}:{cluster.port}{JOIN_PATH}",
                                    json=body) as response:
                assert response.status == 403
                message = (await response.json())["error"]["message"]
                assert "proof" in message
    assert not node3.node_membership.exists() and _token(node3) == token3
    # With the certificate it names, the token joins node3.
    joined = await cluster.rpc.join(cluster.node(3), token3)
    assert not joined.failed, joined.error
    assert node3.node_membership.exists()
