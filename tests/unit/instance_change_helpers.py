"""A cluster of three nodes whose node daemons run in this process (the real noded
procedures over the fake hypervisor and file storage, each node in its own directory),
for the tests of instance changes (modify, disks, console) and of moving instances
(migrate, failover, move)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import msgspec

from corral.cmdlib import Processor
from corral.cmdlib.common import instance_spec
from corral.config import ConfigStore
from corral.noded import procedures
from corral.objects import NIC, Disk, Instance, Node
from corral.paths import Paths

from .config_helpers import new_store
from .lu_helpers import LocalRpc, make_processor, run_op

REASON = [["gnt:client:gnt-instance", "modify", 1700000000000000000]]
FILE_DIR = "/srv/corral/file-storage"


OS_SEARCH = "/srv/ganeti/os"


def _sparse_copy(src: Path, dst: Path) -> int:
    """Copy only the data of sparse file ``src`` into ``dst``; its size in bytes."""
    size = src.stat().st_size
    with src.open("rb") as fin, dst.open("r+b" if dst.exists() else "wb") as fout:
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fin.fileno(), offset, os.SEEK_DATA)
            except OSError:  # no data after offset
                break
            end = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            fin.seek(start)
            fout.seek(start)
            fout.write(fin.read(end - start))
            offset = end
        fout.truncate(size)
    return size


class Cluster:
    """A store with three nodes running in this process (the real noded procedures),
    with faults injected on request."""

    def __init__(self, tmp_path: Path) -> None:
        self.store: ConfigStore = new_store(tmp_path / "config.db")
        group = self.store.all("nodegroup")[0]
        with self.store.transaction() as txn:
            cluster = txn.cluster()
            cluster.file_storage_dir = FILE_DIR
            cluster.shared_file_storage_dir = "/srv/shared"
            cluster.blacklisted_os = ["oldos"]
            cluster.os_search_path = [OS_SEARCH]
            txn.update(cluster)
            txn.add(Node(name="node2", primary_ip="192.0.2.2", group=group.uuid))
            txn.add(Node(name="node3", primary_ip="192.0.2.3", group=group.uuid))
        self.rpc = LocalRpc(self.store, tmp_path / "cluster")
        self.rpc.allow_storage(FILE_DIR, "/srv/shared")
        # The shared file storage is one directory every node sees, as a mount would.
        shared = tmp_path / "shared-storage"
        shared.mkdir()
        for node in ("node1", "node2", "node3"):
            mount = self.rpc.nodes.paths(node).node_path("/srv/shared")
            mount.parent.mkdir(parents=True, exist_ok=True)
            mount.symlink_to(shared)
        self.rpc.install_os(OS_SEARCH, "debian", parameters=["flavour a flavour",
                                                             "fail fail on purpose"])
        #: A procedure that fails on every node with this error (fault injection).
        self.fail: dict[str, Exception] = {}
        #: What a node says it lacks when asked about an instance (instance_check_host):
        #: scripted, as a missing bridge cannot be made in a test.
        self.lacking: dict[str, list[str]] = {}
        for proc in procedures.PROCEDURES:
            self.rpc.nodes.overrides[proc] = self._handler(proc)
        self._processor: Processor | None = None

    def _paths(self, node: str) -> Paths:
        return self.rpc.nodes.paths(node)

    def _handler(self, proc: str) -> Any:
        async def handle(node: str, args: Mapping[str, Any]) -> Any:
            if proc in self.fail:
                raise self.fail[proc]
            if proc == "instance_check_host" and self.lacking.get(node):
                return {"missing": list(self.lacking[node])}
            if proc == "blockdev_copy_from":
                return self._copy(node, args)
            return await procedures.dispatch(self._paths(node), proc, args)
        return handle

    def _copy(self, node: str, args: Mapping[str, Any]) -> Any:
        """blockdev_copy_from reads the source node daemon's HTTPS disk stream, which
        in-process nodes do not serve: copy the source node's file instead."""
        source = next(n.name for n in self.store.all("node")
                      if n.primary_ip == args["source_ip"])
        src = self._paths(source).node_path(args["source_disk"]["logical_id"][1])
        dst = self._paths(node).node_path(args["disk"]["logical_id"][1])
        return {"bytes": _sparse_copy(src, dst)}

    def _on_node(self, node: str, proc: str, args: Mapping[str, Any]) -> Any:
        """Run a real procedure on ``node`` behind the master's back (not recorded)."""
        return asyncio.run(procedures.dispatch(self._paths(node), proc, args))

    def _spec(self, name: str) -> dict[str, Any]:
        spec = msgspec.to_builtins(instance_spec(self.store, self.instance(name)))
        return cast(dict[str, Any], spec)

    @property
    def running(self) -> dict[str, set[str]]:
        """Which instances each node's fake hypervisor runs."""
        return {node: set(self._on_node(node, "all_instances_info", {}))
                for node in ("node1", "node2", "node3")}

    def start_on(self, node: str, name: str) -> None:
        """Someone starts the instance on ``node`` without the master."""
        self._on_node(node, "instance_start", {"instance": self._spec(name)})

    def stop_on(self, node: str, name: str) -> None:
        """The instance stops on ``node`` on its own."""
        self._on_node(node, "instance_shutdown", {"instance": self._spec(name)})

    def add_instance(self, name: str, *, template: str = "file", disks: int = 1,
                     node: str = "node1", up: bool = False, nics: list[NIC] | None = None,
                     directory: str | None = None) -> Instance:
        pnode = self.store.get("node", node)
        inst = Instance(name=name, primary_node=pnode.uuid, os="debian", disk_template=template,
                        admin_state="up" if up else "down", nics=nics or [])
        directory = directory or (FILE_DIR if template == "file" else "/srv/shared")
        objs = []
        for index in range(disks if template != "diskless" else 0):
            disk = Disk(dev_type=template, size=1024, iv_name=f"disk/{index}",
                        nodes=[pnode.uuid])
            disk.logical_id = ["loop", f"{directory}/{inst.uuid}/{disk.uuid}.disk{index}"]
            objs.append(disk)
        inst.disks = [d.uuid for d in objs]
        with self.store.transaction() as txn:
            for disk in objs:
                txn.add(disk)
            txn.add(inst)
        spec = self._spec(name)
        for disk_spec in spec["disks"]:
            self._on_node(node, "blockdev_create", {"disk": disk_spec})
        if up:
            self.start_on(node, name)
        return self.store.get("instance", name)

    def run(self, op_id: str, **params: Any) -> Any:
        if self._processor is None:
            self._processor, _ctx = make_processor(self.store, self.rpc)
        return run_op(self._processor, {"OP_ID": op_id, "reason": REASON, **params})

    def instance(self, name: str) -> Instance:
        return self.store.get("instance", name)

    def node_name(self, inst: Instance) -> str:
        return self.store.get("node", inst.primary_node).name

    def calls(self, proc: str) -> list[tuple[str, Mapping[str, Any]]]:
        return [(c.node, c.args) for c in self.rpc.calls if c.procedure == proc]
