"""``OP_CLUSTER_VERIFY_GROUP``: a node group's nodes and instances against what they run.

One round trip per node, all nodes at once: every online node of the group answers
one ``node_verify`` call (:mod:`corral.noded.verify`) with its versions, clock,
hypervisor health and running instances, memory, file checksums, storage and volumes,
bridges, and on master candidates confd and the configuration replica's serial. An
unreachable node is a finding (``ENODERPC``), never a failure of the job. The
comparisons are in :mod:`corral.cmdlib.verify_checks`.

Locks. An operation in progress makes the cluster look wrong for a moment (an
instance being started is "up" but not running yet; a new instance's disks exist
before the instance is in the configuration), so, as in Ganeti, the group's
instances are locked shared while the nodes are asked. Unlike Ganeti's, verify never
waits for an operation: instances whose lock another job holds or waits for are left
out of this round (``--verbose`` names them), the others are locked shared only for
the round trip and released before the results are judged, so a job that wants one
of them waits at most that long. An instance whose configuration changed during the
round is left out too, and volumes are not called orphans on a node where an instance
is being created. No cluster-level lock is taken.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from corral.cmdlib.base import LogicalUnit
from corral.cmdlib.common import expand_group
from corral.cmdlib.config_files import config_files
from corral.cmdlib.verify_checks import (
    STORAGE,
    ExpectedFile,
    Gathered,
    NodeImage,
    check_files,
    check_instances,
    check_node,
    check_nplusone,
    check_orphan_volumes,
    check_os,
    check_running,
    disk_volume,
    expected_files,
    other_notes,
)
from corral.cmdlib.verify_findings import Findings
from corral.errors import CorralError
from corral.locking import LockLevel
from corral.objects import Instance, Node, NodeGroup, params
from corral.objects.params import HV_PARAMS
from corral.objects.verify_codes import NPLUSONE_MEM
from corral.opcodes import OpClusterVerifyGroup
from corral.paths import Paths

__all__ = ["LOCK_TIMEOUT", "NODE_TIMEOUT", "REPLICATION_WAIT", "LUClusterVerifyGroup"]

#: How long a node may take to answer ``node_verify`` (seconds).
NODE_TIMEOUT = 30.0
#: How long verify waits for the master candidates to hold the current configuration
#: before it compares their replicas (seconds).
REPLICATION_WAIT = 1.0
#: How long one attempt to lock the idle instances may wait (seconds): only another
#: job queueing for one of them in the meantime makes it wait at all.
LOCK_TIMEOUT = 0.2
_LOCK_ATTEMPTS = 3


class LUClusterVerifyGroup(LogicalUnit[OpClusterVerifyGroup]):
    """``OP_CLUSTER_VERIFY_GROUP``: see the module doc; True when no error was found."""

    OP_ID = "OP_CLUSTER_VERIFY_GROUP"
    USES_BGL = False

    def expand_names(self) -> None:
        """The group, by name or UUID (an unknown one fails the job, as in Ganeti)."""
        self.group: NodeGroup = expand_group(self.master.store, self.op.group_name)

    async def execute(self) -> bool:
        """Gather, then judge."""
        store = self.master.store
        found = Findings(self.op, self.feedback)
        found.step(f"* Verifying group '{self.group.name}'")
        nodes = sorted((n for n in store.all("node") if n.group == self.group.uuid),
                       key=lambda n: n.name)
        if not nodes:
            found.step("* Empty node group, skipping verification")
            return True
        member = {n.uuid for n in nodes}
        instances = [i for i in store.all("instance") if i.primary_node in member]
        found.step(f"* Gathering data ({len(nodes)} nodes)")
        serial = store.serial
        await self.master.wait_replicated(REPLICATION_WAIT)
        files = self._files(found)
        skip, creating_nodes, gathered = await self._gather(found, nodes, instances, files,
                                                            serial)
        checked = [i for i in instances if i.name not in skip]

        found.step("* Verifying configuration file consistency")
        check_files(found, gathered, files)

        found.step("* Verifying node status")
        master_uuid = store.cluster.master_node
        for node in nodes:
            img = gathered.images[node.uuid]
            if node.offline:
                found.note(f"* Skipping offline node {node.name}")
                continue
            role = ("master" if node.uuid == master_uuid else "master candidate"
                    if node.master_candidate else "drained" if node.drained else "regular")
            found.note(f"* Verifying node {node.name} ({role})")
            if found.report_if(img.rpc_error, "ENODERPC", node.name,
                               f"while contacting node: {img.rpc_error}"):
                continue
            check_node(found, img, gathered)
            if node.vm_capable:
                check_running(found, img, store, skip)
        check_os(found, [gathered.images[n.uuid] for n in nodes if n.vm_capable])

        found.step("* Verifying instance status")
        for name in sorted(skip & {i.name for i in instances}):
            found.note(f"* Skipping instance {name}: another job is working on it")
        check_instances(found, checked, gathered, store)

        found.step("* Verifying orphan volumes")
        expected, shared = self._expected_volumes()
        check_orphan_volumes(found, gathered, expected, shared, creating_nodes)

        if NPLUSONE_MEM not in self.op.skip_checks:
            found.step("* Verifying N+1 Memory redundancy")
            check_nplusone(found, gathered, checked, store)
        other_notes(found, instances, nodes, store)
        return not found.bad

    # -- what to ask ---------------------------------------------------------------------
    def _files(self, found: Findings) -> list[ExpectedFile]:
        """The files the master distributes, with the master's checksums; when the
        master cannot read its own copies, only those made from the configuration."""
        entries = config_files(self.master.store.cluster)
        try:
            entries += self.master.ancillary_files()
        except (OSError, CorralError) as err:
            text = err.message if isinstance(err, CorralError) else str(err)
            found.report("ECLUSTERFILECHECK", None, "cannot read the master's copies of the "
                         f"distributed files, they are not compared: {text}")
        return expected_files(entries)

    def _args(self, node: Node, instances: Sequence[Instance],
              files: list[ExpectedFile]) -> dict[str, Any]:
        store = self.master.store
        cluster = store.cluster
        args: dict[str, Any] = {
            "files": [f.entry for f in files],
            "candidate": node.master_candidate or node.uuid == cluster.master_node,
        }
        if node.uuid != cluster.master_node:
            args["certificates"] = ["node_cert"]  # the master's: the configuration job
        if node.vm_capable:
            args["hypervisors"] = {
                hv: params.fill_params(params.defaults(HV_PARAMS[hv]), cluster.hvparams.get(hv, {}))
                for hv in cluster.enabled_hypervisors if hv in HV_PARAMS}
            if cluster.default_hypervisor:
                args["memory_hypervisor"] = cluster.default_hypervisor
            storage = self._storage()
            args["storage"] = storage
            args["volumes"] = sorted(storage)
            args["bridges"] = self._bridges(node, instances)
            args["os_search_path"] = list(cluster.os_search_path
                                          or Paths.DEFAULT_OS_SEARCH_PATH)
        return args

    def _storage(self) -> dict[str, str]:
        cluster = self.master.store.cluster
        return {template: getattr(cluster, kind.location) for template, kind in STORAGE.items()
                if template in cluster.enabled_disk_templates
                and getattr(cluster, kind.location)}

    def _bridges(self, node: Node, instances: Sequence[Instance]) -> list[str]:
        """The bridges the kvm instances of ``node`` connect to (the fake hypervisor's
        instances use no network)."""
        store = self.master.store
        cluster = store.cluster
        defaults = params.fill_params(cluster.nicparams.get("default", {}),
                                      self.group.nicparams)
        links = set()
        for inst in instances:
            if inst.primary_node != node.uuid or inst.hypervisor != "kvm":
                continue
            for nic in inst.nics:
                filled = params.fill_params(defaults, nic.nicparams)
                if filled.get("mode") == "bridged" and filled.get("link"):
                    links.add(str(filled["link"]))
        return sorted(links)

    def _expected_volumes(self) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """The volumes the configuration puts on each node, and every volume of each
        shared template."""
        store = self.master.store
        per_node: dict[str, set[str]] = {}
        shared: dict[str, set[str]] = {}
        for disk in store.all("disk"):
            volume = disk_volume(disk, store.cluster.volume_group_name)
            if volume is None:
                continue
            template, name = volume
            if template in STORAGE and STORAGE[template].shared:
                shared.setdefault(template, set()).add(name)
            for node_uuid in disk.nodes:
                per_node.setdefault(node_uuid, set()).add(name)
        return per_node, shared

    # -- asking ----------------------------------------------------------------------------
    async def _gather(self, found: Findings, nodes: list[Node], instances: list[Instance],
                      files: list[ExpectedFile], serial: int
                      ) -> tuple[set[str], set[str], Gathered]:
        """Lock the idle instances, ask every online node, release; what to leave out
        (busy instances, nodes with a creation under way) and what was gathered."""
        store = self.master.store
        images = {n.uuid: NodeImage(n) for n in nodes}
        online = [n for n in nodes if not n.offline]
        busy, creating_nodes = self._busy()
        before = {i.uuid: i for i in instances}
        locked = await self._lock(instances, busy)
        try:
            found.step(f"* Gathering information about nodes ({len(nodes)} nodes)")
            start = time.time()
            results = (await self.master.rpc.call(
                online, "node_verify", lambda n: self._args(n, instances, files),
                timeout=NODE_TIMEOUT)) if online else {}
            end = time.time()
        finally:
            if locked:
                self.master.locks.release(LockLevel.INSTANCE, owner=self.owner)
        for node in online:
            result = results[node.name]
            if result.error is not None:
                images[node.uuid].rpc_error = result.error.message
            else:
                images[node.uuid].answer = result.payload or {}
        # Left out: what was busy, and what changed while the nodes were asked.
        skip = {i.name for i in instances if i.name not in locked}
        skip.update(i.name for i in instances
                    if store.find("instance", i.uuid) is not before[i.uuid])
        skip.update(busy)
        gathered = Gathered(images=images, start=start, end=end, serial=serial,
                            master_uuid=store.cluster.master_node, storage=self._storage())
        return skip, creating_nodes, gathered

    def _busy(self) -> tuple[set[str], set[str]]:
        """Names of instances another job holds exclusively or queues for (instance locks
        without an instance: creations), and the nodes those creations hold."""
        locks = self.master.locks
        busy: set[str] = set()
        creators: set[str] = set()
        known = {i.name for i in self.master.store.all("instance")}
        for info in locks.lockset(LockLevel.INSTANCE).info():
            name = info.name.partition("/")[2]
            if name == "[lockset]":
                continue
            if info.mode == "exclusive" or info.pending:
                busy.add(name)
                if name not in known:
                    creators.update(info.holders)
        creating_nodes: set[str] = set()
        if creators:
            by_name = {n.name: n.uuid for n in self.master.store.all("node")}
            for info in locks.lockset(LockLevel.NODE).info():
                name = info.name.partition("/")[2]
                if name in by_name and creators & set(info.holders):
                    creating_nodes.add(by_name[name])
        return busy, creating_nodes

    async def _lock(self, instances: list[Instance], busy: set[str]) -> set[str]:
        """Lock the group's idle instances shared, without waiting behind any job; the
        names locked (none, after a few tries, when jobs keep queueing for them)."""
        locks = self.master.locks
        for _attempt in range(_LOCK_ATTEMPTS):
            wanted = sorted(i.name for i in instances if i.name not in busy)
            if not wanted:
                return set()
            got = await locks.acquire(LockLevel.INSTANCE, wanted, shared=True,
                                      timeout=LOCK_TIMEOUT, owner=self.owner)
            if got is not None:
                return set(got)
            busy |= self._busy()[0]
        return set()
