"""A cluster for instance logical-unit tests: a real configuration store and lock
manager, and node daemons in this process (the real noded procedures over the fake
hypervisor, file storage and installed test OS definitions)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import msgspec

from corral.cmdlib.common import instance_spec
from corral.config import ConfigStore
from corral.errors import CorralError
from corral.locking import LockLevel
from corral.noded import procedures
from corral.objects import Node
from tests.unit.config_helpers import check_invariants, new_store
from tests.unit.lu_helpers import JobCtx, LocalRpc, make_processor, run_op

__all__ = ["OS_SEARCH", "REASON", "Cluster", "Nodes", "fail", "open_cluster", "query_rows"]

#: The reason trail the tests' instances are created with.
REASON = [["gnt:client:gnt-instance", "add", 1], ["user", "testing", 2]]
#: Where the test OS definitions are installed on every node.
OS_SEARCH = "/srv/ganeti/os"


class Nodes:
    """What the in-process nodes run, read (and changed behind the master's back)
    through the real procedures without being recorded as the master's calls."""

    def __init__(self, rpc: LocalRpc) -> None:
        self.rpc = rpc

    def _run(self, node: str, procedure: str, args: Mapping[str, Any]) -> Any:
        return asyncio.run(procedures.dispatch(self.rpc.nodes.paths(node), procedure, args))

    @property
    def running(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per node, the info of every instance its fake hypervisor runs."""
        return {node.name: self._run(node.name, "all_instances_info", {})
                for node in self.rpc.store.all("node")}

    def _spec(self, name: str, **beparams: Any) -> dict[str, Any]:
        store = self.rpc.store
        spec = msgspec.to_builtins(instance_spec(store, store.get("instance", name)))
        spec["beparams"].update(beparams)
        return cast(dict[str, Any], spec)

    def stop(self, node: str, name: str) -> None:
        """The instance stops on its own."""
        self._run(node, "instance_shutdown", {"instance": self._spec(name)})

    def start(self, node: str, name: str, **beparams: Any) -> None:
        """The instance is started on ``node`` by someone else than the master."""
        self._run(node, "instance_start", {"instance": self._spec(name, **beparams)})

    def limit_storage(self, node: str, free: int) -> None:
        """``node`` reports only ``free`` MiB free in its storage directories.

        Scripted: the real free space is the test file system's, far more than a test
        can fill."""
        paths = self.rpc.nodes.paths

        async def node_info(name: str, args: Mapping[str, Any]) -> Any:
            info = await procedures.dispatch(paths(name), "node_info", args)
            if name == node:
                for space in info["storage"].values():
                    space["free"] = free
            return info

        self.rpc.nodes.overrides["node_info"] = node_info


class Cluster:
    """A store with nodes node1..node4, in-process node daemons and a processor."""

    def __init__(self, tmp_path: Path) -> None:
        self.store: ConfigStore = new_store(tmp_path / "config.db")
        group = self.store.all("nodegroup")[0]
        with self.store.transaction() as txn:
            for number in (2, 3, 4):
                txn.add(Node(name=f"node{number}", primary_ip=f"192.0.2.{number}",
                             group=group.uuid))
            cluster = txn.cluster()
            cluster.file_storage_dir = "/srv/corral/file-storage"
            cluster.shared_file_storage_dir = "/srv/corral/shared"
            cluster.os_search_path = [OS_SEARCH]
            txn.update(cluster)
        self.rpc = LocalRpc(self.store, tmp_path / "cluster")
        self.rpc.allow_storage("/srv/corral/file-storage", "/srv/corral/shared")
        self.rpc.install_os(OS_SEARCH, "corral-ext4", variants=["default", "minimal"],
                            parameters=["filesystem file system type",
                                        "fail fail on purpose"])
        self.rpc.install_os(OS_SEARCH, "plainos")
        self.nodes = Nodes(self.rpc)
        self.processor, self.ctx = make_processor(self.store, self.rpc)

    def run(self, op_id: str, job: JobCtx | None = None, **params: Any) -> Any:
        return run_op(self.processor, {"OP_ID": op_id, **params}, job)

    def create(self, name: str = "web1", **params: Any) -> Any:
        args: dict[str, Any] = {
            "instance_name": name, "disk_template": "file", "disks": [{"size": "1G"}],
            "nics": [{}], "os_type": "corral-ext4+default", "pnode": "node1",
            "reason": REASON,
        }
        args.update(params)
        return self.run("OP_INSTANCE_CREATE", **args)

    def instance_locks(self) -> list[str]:
        return self.ctx.locks.lockset(LockLevel.INSTANCE).names()

    def set_cluster(self, **changes: Any) -> None:
        """Commit attribute ``changes`` to the cluster object, behind the master's back."""
        with self.store.transaction() as txn:
            cluster = txn.cluster()
            for key, value in changes.items():
                setattr(cluster, key, value)
            txn.update(cluster)

    def set_node(self, name: str, **changes: Any) -> None:
        with self.store.transaction() as txn:
            node = txn.get("node", name)
            for key, value in changes.items():
                setattr(node, key, value)
            txn.update(node)


def open_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` for one test; its invariants are checked afterwards."""
    cluster = Cluster(tmp_path)
    yield cluster
    check_invariants(cluster.store)
    cluster.store.close()


def fail(message: str, cls: type[CorralError] = CorralError) -> Any:
    """An RPC handler that raises ``cls(message)``: a node failing on purpose."""
    def handler(node: Node, args: Mapping[str, Any]) -> Any:
        raise cls(message)
    return handler


def query_rows(cl: Cluster, fields: list[str], qfilter: Any = None) -> list[list[Any]]:
    """The instance query resource's rows for ``fields`` (``[status, value]`` pairs)."""
    async def ask() -> dict[str, Any]:
        return await cl.ctx.queries["instance"].query(fields, qfilter)

    data: list[list[Any]] = asyncio.run(ask())["data"]
    return data
