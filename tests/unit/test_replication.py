"""Configuration replication without daemons: the replica file, the node procedure and
the master's replicator (deltas, coalescing, snapshots, catching up)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.base import RpcArgs
from corral.config import ConfigStore, Replica, Row
from corral.errors import CorralError, NodeUnreachableError, ParameterError
from corral.jobs import JobStore
from corral.jobs.store import JobReplica
from corral.masterd.replication import ConfigReplicator, JobReplicator
from corral.noded import replication as node_side
from corral.noded.files import read_ancillary_files
from corral.noded.procedures import PROCEDURES
from corral.objects import Node
from corral.paths import Paths
from corral.rpc.protocol import RpcResult
from tests.unit.config_helpers import new_store, snapshot
from tests.unit.lu_helpers import FakeRpc, RpcCall
from tests.unit.test_jobs_store import make_job


def _row(uuid: str, serial: int = 1, data: str = "{}") -> Row:
    return Row("filter", uuid, serial, data.encode())


def test_replica_applies_deltas_in_order_only(tmp_path: Path) -> None:
    replica = Replica.open(tmp_path / "r.db")
    assert replica.serial == 0
    assert replica.apply(0, 2, [_row("a")], []) is True
    assert replica.serial == 2
    assert replica.apply(5, 6, [_row("b")], []) is False  # a gap: nothing written
    assert replica.apply(0, 2, [_row("a")], []) is True  # already there: accepted
    assert replica.serial == 2
    replica.reset(9, [_row("c")])
    assert replica.serial == 9
    replica.close()
    # Reopening keeps it; a corrupt file is replaced by an empty replica.
    assert Replica.open(tmp_path / "r.db").serial == 9
    (tmp_path / "bad.db").write_bytes(b"not a database at all")
    assert Replica.open(tmp_path / "bad.db").serial == 0


def _cluster(tmp_path: Path, candidates: int = 2) -> ConfigStore:
    store = new_store(tmp_path / "config.db")
    with store.transaction() as txn:
        master = txn.get("node", "node1")
        for index in range(2, 2 + candidates):
            txn.add(Node(name=f"node{index}", primary_ip=f"192.0.2.{index}",
                         group=master.group, master_candidate=True))
    return store


@dataclass
class NodeSideRpc(FakeRpc):
    """A fake RPC whose nodes run the real (asynchronous) node procedures, each on its
    own files under ``root``; ``fail_after`` makes a node stop answering after that
    many more calls."""

    root: Path = Path()
    roots: dict[str, Paths] = field(default_factory=dict)
    fail_after: dict[str, int] = field(default_factory=dict)

    async def call(self, nodes: Sequence[Node], procedure: str, args: RpcArgs, *,
                   timeout: float = 60.0) -> dict[str, RpcResult]:  # noqa: ASYNC109
        results: dict[str, RpcResult] = {}
        for node in nodes:
            node_args = args(node) if callable(args) else args
            self.calls.append(RpcCall(node.name, procedure, node_args))
            left = self.fail_after.get(node.name)
            if left is not None:
                self.fail_after[node.name] = left - 1
            if node.name in self.down or (left is not None and left <= 0):
                results[node.name] = RpcResult(
                    node.name, error=NodeUnreachableError(f"node {node.name} is down"))
                continue
            paths = self.roots.setdefault(node.name, Paths(self.root / node.name))
            paths.data_dir.mkdir(parents=True, exist_ok=True)
            try:
                payload = await PROCEDURES[procedure](paths, node_args)
            except CorralError as err:
                results[node.name] = RpcResult(node.name, error=err)
            else:
                results[node.name] = RpcResult(node.name, payload=payload)
        return results


@pytest.fixture(autouse=True)
def _close_replicas() -> Iterator[None]:
    yield
    node_side.close_replicas()


def _wired_rpc(tmp_path: Path) -> tuple[NodeSideRpc, dict[str, Paths]]:
    """A fake RPC whose nodes run the real ``config_replicate`` on their own files."""
    rpc = NodeSideRpc(root=tmp_path)
    return rpc, rpc.roots


def _run_sync(coro: Any) -> Any:
    """Run a procedure's coroutine to its end from inside a synchronous test."""
    return asyncio.run(coro)


def _replica_objects(paths: Paths) -> dict[str, Any]:
    store = ConfigStore.open(paths.config_replica)
    try:
        return snapshot(store)
    finally:
        store.close()


async def test_commits_reach_every_candidate_coalesced(tmp_path: Path) -> None:
    store = _cluster(tmp_path)
    rpc, roots = _wired_rpc(tmp_path)
    replicator = ConfigReplicator(store, rpc, retry_interval=0.05)
    replicator.start()
    try:
        assert await replicator.wait_replicated(5)
        first = [c.args for c in rpc.calls if c.node == "node2"]
        assert first[0] == {"serial_only": True}
        assert first[1]["snapshot"] is True  # an empty replica is seeded
        rpc.calls.clear()
        for tag in ("a", "b", "c"):  # three commits while nothing is pushed
            with store.transaction() as txn:
                cluster = txn.cluster()
                cluster.tags = [*cluster.tags, tag]
                txn.update(cluster)
        assert await replicator.wait_replicated(5)
        deltas = [c.args for c in rpc.calls if c.node == "node3"]
        # The cluster changed three times and travels once, in its last state.
        assert len(deltas) == 1 and deltas[0]["serial"] == store.serial
        assert len(deltas[0]["upserts"]) == 1
    finally:
        await replicator.stop()
    for name in ("node2", "node3"):
        assert _replica_objects(roots[name]) == snapshot(store)
    assert "node1" not in roots  # the master has no replica


async def test_a_candidate_that_was_down_catches_up(tmp_path: Path) -> None:
    store = _cluster(tmp_path)
    rpc, roots = _wired_rpc(tmp_path)
    replicator = ConfigReplicator(store, rpc, retry_interval=0.05, log_size=10)
    replicator.start()
    try:
        assert await replicator.wait_replicated(5)
        rpc.down.add("node3")
        for index in range(25):  # more commits than the log keeps
            with store.transaction() as txn:
                cluster = txn.cluster()
                cluster.tags = [*cluster.tags, f"t{index}"]
                txn.update(cluster)
        assert not await replicator.wait_replicated(0.3)
        assert replicator.replica_serials()["node2"] == store.serial
        rpc.calls.clear()
        rpc.down.clear()
        assert await replicator.wait_replicated(5)
        # Too far behind for the log: node3 gets a snapshot.
        assert any(c.args.get("snapshot") for c in rpc.calls if c.node == "node3")
    finally:
        await replicator.stop()
    assert _replica_objects(roots["node3"]) == snapshot(store)


@dataclass
class HangingRpc(NodeSideRpc):
    """Calls to the nodes in ``hang`` wait until ``release`` is set (a node cut off
    from the network: no refusal, no answer), then fail."""

    hang: set[str] = field(default_factory=set)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def call(self, nodes: Sequence[Node], procedure: str, args: RpcArgs, *,
                   timeout: float = 60.0) -> dict[str, RpcResult]:  # noqa: ASYNC109
        if any(node.name in self.hang for node in nodes):
            await self.release.wait()
            return {node.name: RpcResult(node.name, error=NodeUnreachableError(
                f"node {node.name} did not answer")) for node in nodes}
        return await super().call(nodes, procedure, args, timeout=timeout)


async def test_a_candidate_that_hangs_holds_up_no_other(tmp_path: Path) -> None:
    store = _cluster(tmp_path)
    rpc = HangingRpc(root=tmp_path)
    replicator = ConfigReplicator(store, rpc, retry_interval=0.05)
    replicator.start()
    try:
        assert await replicator.wait_replicated(5)
        rpc.hang.add("node3")
        for tag in ("a", "b"):
            with store.transaction() as txn:
                cluster = txn.cluster()
                cluster.tags = [*cluster.tags, tag]
                txn.update(cluster)
            for _ in range(500):  # node3's pusher hangs meanwhile
                if replicator.replica_serials()["node2"] == store.serial:
                    break
                await asyncio.sleep(0.01)
            assert replicator.replica_serials()["node2"] == store.serial
        assert replicator.replica_serials()["node3"] == store.serial - 2
        rpc.hang.clear()
        rpc.release.set()
        assert await replicator.wait_replicated(5)
    finally:
        await replicator.stop()
    assert _replica_objects(rpc.roots["node3"]) == snapshot(store)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.data_dir.mkdir(parents=True)
    with pytest.raises(ParameterError, match="config_replicate"):
        _run_sync(PROCEDURES["config_replicate"](paths, {"serial": "x"}))
    with pytest.raises(ParameterError, match="needs 'base'"):
        _run_sync(PROCEDURES["config_replicate"](paths, {"serial": 3}))


async def test_job_queue_batches_reach_the_candidates(tmp_path: Path) -> None:
    store = _cluster(tmp_path, candidates=1)
    jobs = JobStore.open(tmp_path / "jobs.db")
    rpc, roots = _wired_rpc(tmp_path)
    replicator = JobReplicator(store, jobs, rpc, retry_interval=0.05)
    replicator.start()
    try:
        first = [make_job(jobs.new_id()) for _ in range(3)]
        for job in first:
            jobs.save(job)
        await jobs.barrier()
        assert await replicator.wait_replicated(5)
        later = make_job(jobs.new_id())
        jobs.save(later)
        await jobs.archive(first[:1])
        assert await replicator.wait_replicated(5)
    finally:
        await replicator.stop()
    node_side.close_replicas()
    # The replica opens as a job queue: the same live jobs, archive and last id.
    copy = JobStore.open(roots["node2"].jobs_replica)
    try:
        loaded = copy.load()
        assert [job.id for job in loaded.jobs] == [first[1].id, first[2].id, later.id]
        assert loaded.last_id == later.id
        assert list(await copy.read_archived([first[0].id])) == [first[0].id]
        assert copy.serial == jobs.serial
    finally:
        await copy.close()
        await jobs.close()
    assert JobReplica.open(roots["node2"].jobs_replica).serial == jobs.serial


def test_upload_files_writes_known_files_and_paths_the_nodes_own_list_names(
        tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.data_dir.mkdir(parents=True)
    paths.user_file_list.write_text("/etc/motd\n")  # written on the node itself

    upload = PROCEDURES["upload_files"]  # arguments decoded as a node daemon does

    def entry(data: bytes, **where: Any) -> dict[str, Any]:
        return {**where, "data": base64.b64encode(data).decode(), "mode": 0o600}

    written = _run_sync(upload(paths, {"files": [
        entry(b"hello\n", path="/etc/motd"),
        entry(b"KEY", name="confd_key"),
    ]}))
    assert sorted(written) == ["/etc/motd", "confd_key"]
    assert paths.node_path("/etc/motd").read_bytes() == b"hello\n"
    assert paths.confd_hmac_key.stat().st_mode & 0o777 == 0o400  # the known mode wins
    # The user-id pool, made from the configuration, as every node keeps it.
    assert _run_sync(upload(paths, {"files": [entry(b"4000-4009\n", name="uid_pool")]})
                     ) == ["uid_pool"]
    assert paths.uid_pool.read_text() == "4000-4009\n"
    assert paths.uid_pool.stat().st_mode & 0o777 == 0o444
    with pytest.raises(ParameterError, match="'/etc/shadow': it is not in its own user"):
        _run_sync(upload(paths, {"files": [entry(b"x", path="/etc/shadow")]}))
    # The list is the node's: the master can neither replace it nor extend it.
    with pytest.raises(ParameterError, match="does not accept the file 'user_file_list'"):
        _run_sync(upload(paths, {"files": [
            entry(b"/etc/shadow\n", name="user_file_list"),
            entry(b"x", path="/etc/shadow")]}))
    with pytest.raises(ParameterError, match="does not accept the file 'ssh_key'"):
        _run_sync(upload(paths, {"files": [entry(b"x", name="ssh_key")]}))
    with pytest.raises(ParameterError, match="base64"):
        _run_sync(upload(paths, {"files": [{"name": "ca_cert", "data": "%%"}]}))
    with pytest.raises(ParameterError, match="set-user-ID"):
        _run_sync(upload(paths, {"files": [
            {**entry(b"#!/bin/sh\n", path="/etc/motd"), "mode": 0o4755}]}))
    assert paths.node_path("/etc/motd").read_bytes() == b"hello\n"
    assert paths.user_file_list.read_text() == "/etc/motd\n"
    assert not paths.node_path("/etc/shadow").exists()


def test_vnc_password_files_travel_to_the_path_the_configuration_names(
        tmp_path: Path) -> None:
    master, node = Paths(tmp_path / "master"), Paths(tmp_path / "node")
    node.data_dir.mkdir(parents=True)
    secret = master.node_path("/etc/corral/vnc-cluster-password")
    secret.parent.mkdir(parents=True)
    secret.write_text("s3cret\n")
    files = [f for f in read_ancillary_files(master, ["/etc/corral/vnc-cluster-password",
                                                      "/etc/corral/missing"])
             if f.get("name") == "vnc_password_file"]
    assert [(f["path"], f["candidates_only"]) for f in files] == [
        ("/etc/corral/vnc-cluster-password", False)]  # a missing one is left out
    upload = PROCEDURES["upload_files"]
    wire = [{k: v for k, v in f.items() if k != "candidates_only"} for f in files]
    assert _run_sync(upload(node, {"files": wire})) == [
        "vnc_password_file /etc/corral/vnc-cluster-password"]
    copy = node.node_path("/etc/corral/vnc-cluster-password")
    assert copy.read_text() == "s3cret\n"
    assert copy.stat().st_mode & 0o777 == 0o400
    with pytest.raises(ParameterError, match="not an absolute path"):
        _run_sync(upload(node, {"files": [{"name": "vnc_password_file", "path": "../x",
                                           "data": "eA=="}]}))
    with pytest.raises(ParameterError, match="needs the 'path'"):
        _run_sync(upload(node, {"files": [{"name": "vnc_password_file", "data": "eA=="}]}))
