"""The checks of one node group, over what its nodes answered: pure functions.

:mod:`corral.cmdlib.verify_group` gathers (one ``node_verify`` call per node, see
:mod:`corral.noded.verify`) into one :class:`NodeImage` per node and a
:class:`Gathered` for the round, then calls these functions, which only compare and
report through :class:`~corral.cmdlib.verify_findings.Findings`. Wording, codes and
severities are Ganeti's where Ganeti has the check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral import __version__
from corral.cmdlib.aggregates import instance_constraints, node_violations
from corral.cmdlib.ipolicy import group_ipolicy, stored_instance_violations
from corral.cmdlib.verify import NODE_MAX_CLOCK_SKEW, certificate_finding
from corral.cmdlib.verify_findings import Findings
from corral.config import ConfigStore
from corral.objects import Disk, Instance, Node, params
from corral.objects.verify_codes import WARNING
from corral.paths import Paths
from corral.rpc.protocol import RPC_VERSION
from corral.utils.nicesort import nice_sorted

__all__ = [
    "STORAGE",
    "ExpectedFile",
    "Gathered",
    "NodeImage",
    "StorageKind",
    "check_files",
    "check_instances",
    "check_node",
    "check_nplusone",
    "check_orphan_volumes",
    "check_os",
    "check_running",
    "disk_volume",
    "expected_files",
    "other_notes",
]


@dataclass(frozen=True, slots=True)
class StorageKind:
    """How the master verifies one disk template's storage on its nodes."""

    #: The cluster attribute naming where the template's storage is (sent to nodes).
    location: str
    #: The code of a finding about it.
    code: str
    #: The message of an unusable storage: ``{}`` is the node's explanation.
    unusable: str
    #: Whether all nodes see the same volumes (shared storage).
    shared: bool = False


#: The templates whose storage verify checks, with the node-side hooks of
#: :mod:`corral.storage.verify` (another template adds its entry to both).
STORAGE: dict[str, StorageKind] = {
    "file": StorageKind("file_storage_dir", "ENODEFILESTORAGEPATHUNUSABLE",
                        "The configured file storage path is unusable: {}"),
    "sharedfile": StorageKind("shared_file_storage_dir",
                              "ENODESHAREDFILESTORAGEPATHUNUSABLE",
                              "The configured sharedfile storage path is unusable: {}",
                              shared=True),
    "plain": StorageKind("volume_group_name", "ENODELVM", "{}"),
}


def disk_volume(disk: Disk, vg_name: str = "") -> tuple[str, str] | None:
    """The template and volume name under which a node lists ``disk``, if verify checks
    its template: a file disk's cluster-wide path, an LV in the cluster's volume group
    ``vg_name`` as ``vg/lv`` (nodes list that group's volumes only)."""
    if disk.dev_type in ("file", "sharedfile") and len(disk.logical_id) == 2:
        return disk.dev_type, disk.logical_id[1]
    if (disk.dev_type == "plain" and len(disk.logical_id) == 2 and vg_name
            and disk.logical_id[0] == vg_name):
        return disk.dev_type, f"{disk.logical_id[0]}/{disk.logical_id[1]}"
    return None


@dataclass
class NodeImage:
    """One node: its configuration and what it answered."""

    node: Node
    #: The ``node_verify`` answer; None when the node was not asked or did not answer.
    answer: dict[str, Any] | None = None
    #: Why the node did not answer.
    rpc_error: str | None = None
    #: Instance name -> hypervisor, for every instance running here.
    running: dict[str, str] = field(default_factory=dict)
    #: Whether some hypervisor's instance list failed.
    hv_fail: bool = False
    #: Template -> the volumes listed here; templates whose listing failed are absent.
    volumes: dict[str, set[str]] = field(default_factory=dict)
    #: Template -> why its volumes could not be listed.
    volume_errors: dict[str, str] = field(default_factory=dict)
    #: Free memory (MiB) as the default hypervisor reports it.
    mfree: int | None = None

    @property
    def usable(self) -> bool:
        """Online and answered."""
        return self.answer is not None


@dataclass
class Gathered:
    """One round of ``node_verify`` calls."""

    images: dict[str, NodeImage]
    #: The master's clock just before the calls and just after the last answer.
    start: float
    end: float
    #: The configuration serial when verification began.
    serial: int
    master_uuid: str
    #: The storage templates asked about, with their location.
    storage: dict[str, str]


@dataclass(frozen=True, slots=True)
class ExpectedFile:
    """An ancillary file and who should have which content."""

    #: The ``node_verify`` entry naming it.
    entry: str
    #: How findings name it.
    shown: str
    #: Its SHA-256 on the master (hex).
    checksum: str
    #: Only master candidates (and the master) keep it.
    candidates_only: bool


#: How findings name the known files: their places on a node installed at ``/``.
_DEFAULT_PATHS = Paths(Path("/"))
_SHOWN = {"ca_cert": _DEFAULT_PATHS.ca_cert, "confd_key": _DEFAULT_PATHS.confd_hmac_key,
          "rapi_users": _DEFAULT_PATHS.rapi_users,
          "master_client_cert": _DEFAULT_PATHS.master_client_cert,
          "uid_pool": _DEFAULT_PATHS.uid_pool}


def expected_files(entries: Iterable[Mapping[str, Any]]) -> list[ExpectedFile]:
    """The files to compare, from ``upload_files`` entries read on the master (with
    ``data`` in base64): known files by name, configured files by path, user files."""
    import base64

    found = []
    for entry in entries:
        name, path = entry.get("name"), entry.get("path")
        if name is not None and path is not None:
            key, shown = f"{name}:{path}", str(path)
        elif name is not None:
            key, shown = str(name), str(_SHOWN.get(name, name))
        else:
            key, shown = f"user:{path}", str(path)
        checksum = hashlib.sha256(base64.b64decode(entry["data"])).hexdigest()
        found.append(ExpectedFile(key, shown, checksum, bool(entry.get("candidates_only"))))
    return found


def _names(nodes: Iterable[str]) -> str:
    return ", ".join(nice_sorted(nodes))


def check_files(found: Findings, gathered: Gathered, files: Sequence[ExpectedFile]) -> None:
    """Every node that should have a file has it, with the master's content."""
    usable = [img for img in gathered.images.values() if img.usable]
    for spec in files:
        missing: list[str] = []
        variants: dict[str, list[str]] = {}
        for img in usable:
            answer = (img.answer or {}).get("files") or {}
            if spec.entry in answer.get("unlisted", ()):
                continue
            node = img.node
            wanted = (not spec.candidates_only or node.master_candidate
                      or node.uuid == gathered.master_uuid)
            sums = answer.get("sums") or {}
            if spec.entry not in sums:
                continue
            checksum = sums[spec.entry]
            if checksum is None:
                if wanted:
                    missing.append(node.name)
                continue
            if wanted:
                variants.setdefault(checksum, []).append(node.name)
        found.report_if(missing, "ECLUSTERFILECHECK", None, (
            f"File {spec.shown} is missing from node(s) {_names(missing)}"))
        differ = len(variants) > 1 or (len(variants) == 1 and spec.checksum not in variants)
        if differ or found.simulate:
            ordered = sorted(variants.items())
            text = "; ".join(
                f"variant {index} on {_names(names)}"
                + (" (the master's)" if checksum == spec.checksum else "")
                for index, (checksum, names) in enumerate(ordered, 1))
            found.report("ECLUSTERFILECHECK", None,
                         f"File {spec.shown} found with {len(variants)} different checksums "
                         f"({text})")


def check_node(found: Findings, img: NodeImage, gathered: Gathered) -> None:
    """The node's own findings: versions, clock, hypervisors, storage, network,
    daemons, certificate and configuration replica."""
    node, answer = img.node, img.answer or {}
    name = node.name
    version = answer.get("version") or {}
    if found.report_if(version.get("rpc_version") != RPC_VERSION, "ENODEVERSION", name,
                       f"incompatible protocol versions: master {RPC_VERSION}, "
                               f"node {version.get('rpc_version')}"):
        return
    found.report_if(version.get("version") != __version__, "ENODEVERSION", name,
                    f"software version mismatch: master {__version__}, node "
                            f"{version.get('version')}", severity=WARNING)
    _check_time(found, name, answer.get("time"), gathered)
    if node.vm_capable:
        for hv, result in sorted((answer.get("hypervisors") or {}).items()):
            found.report_if(result.get("problem"), "ENODEHV", name,
                            (
                                f"hypervisor {hv} verify failure: '{result.get('problem')}'"))
            listing = result.get("instances")
            if found.report_if(not isinstance(listing, list), "ENODEHV", name,
                               (
                                   "rpc call to node failed (instancelist): "
                                   f"{_error(listing)}")):
                img.hv_fail = True
            else:
                img.running.update(dict.fromkeys(listing or (), hv))
        memory = answer.get("memory")
        free = memory.get("memory_free") if isinstance(memory, dict) else None
        failed = found.report_if(not isinstance(free, int), "ENODEHV", name,
                                 "rpc call to node failed (hvinfo)")
        img.mfree = free if isinstance(free, int) and not failed else None
    for template, problem in sorted((answer.get("storage") or {}).items()):
        kind = STORAGE[template]
        text = problem.get("error") if isinstance(problem, dict) else problem
        found.report_if(text, kind.code, name, (
            kind.unusable.format(text)))
    for template, listing in sorted((answer.get("volumes") or {}).items()):
        if isinstance(listing, list):
            img.volumes[template] = set(listing)
        else:
            img.volume_errors[template] = _error(listing)
            found.report(STORAGE[template].code, name,
                         f"cannot list the {template} volumes: {_error(listing)}")
    bridges = answer.get("bridges")
    if bridges is not None:
        found.report_if(not isinstance(bridges, list), "ENODENET", name,
                        "did not return valid bridge information")
        if isinstance(bridges, list):
            found.report_if(bridges, "ENODENET", name,
                            f"missing bridges: {', '.join(bridges)}")
    if "confd" in answer:
        confd = answer["confd"]
        found.report_if(confd, "ENODESETUP", name,
                        f"node setup error: {_error(confd)}")
    if "config_serial" in answer:
        serial = answer["config_serial"]
        behind = not isinstance(serial, int) or serial < gathered.serial
        found.report_if(behind, "ECLUSTERFILECHECK", None, (
            f"the configuration replica of master candidate {name} is at serial "
            f"{_error(serial)}, the master's configuration at {gathered.serial}"))
    _check_certificate(found, img, gathered)


def _error(value: Any) -> str:
    if isinstance(value, dict) and "error" in value:
        return str(value["error"])
    return str(value)


def _check_time(found: Findings, name: str, node_time: Any, gathered: Gathered) -> None:
    if not isinstance(node_time, int | float):
        found.report("ENODETIME", name, "Node returned invalid time")
        return
    if node_time < gathered.start - NODE_MAX_CLOCK_SKEW:
        diff: str | None = f"{abs(gathered.start - node_time):.1f}s"
    elif node_time > gathered.end + NODE_MAX_CLOCK_SKEW:
        diff = f"{abs(node_time - gathered.end):.1f}s"
    else:
        diff = None
    found.report_if(diff, "ENODETIME", name,
                    f"Node time diverges by at least {diff} from master node time")


def _check_certificate(found: Findings, img: NodeImage, gathered: Gathered) -> None:
    certificates = (img.answer or {}).get("certificates")
    if not isinstance(certificates, dict):
        return
    if "error" in certificates:
        found.report("ECLUSTERCERT", None, f"cannot check the certificates of node "
                     f"{img.node.name}: {certificates['error']}")
        return
    for _name, info in sorted(certificates.items()):
        path = f"{info.get('path')} (node {img.node.name})"
        finding = certificate_finding(path, info, gathered.end)
        if finding is not None:
            found.report("ECLUSTERCERT", None, finding[1], severity=finding[0])


def _os_table(answer: Any) -> dict[str, dict[str, Any]] | None:
    if not isinstance(answer, list):
        return None
    return {str(item.get("name")): item for item in answer if isinstance(item, dict)}


def _joined(values: Iterable[Any]) -> str:
    return ", ".join(sorted(str(v) for v in values))


def check_os(found: Findings, images: Sequence[NodeImage]) -> None:
    """Every OS definition valid, and the same on every node as on the first node
    that answered (the reference): API versions, variants, parameters, version."""
    reference: tuple[str, dict[str, dict[str, Any]]] | None = None
    for img in images:
        answer = (img.answer or {}).get("os")
        if answer is None:
            continue
        name = img.node.name
        table = _os_table(answer)
        if found.report_if(table is None, "ENODEOS", name,
                           f"node hasn't returned valid OS data: {_error(answer)}"):
            continue
        assert table is not None
        if reference is None:
            reference = (name, table)
        ref_name, ref = reference
        for os_name, info in sorted(table.items()):
            found.report_if(not info.get("valid"), "ENODEOS", name,
                            f"Invalid OS {os_name} (located at {info.get('path')}): "
                            f"{info.get('message')}")
            base = ref.get(os_name)
            if found.report_if(base is None, "ENODEOS", name,
                               f"Extra OS {os_name} not present on reference node "
                               f"({ref_name})") or base is None or not base.get("valid"):
                continue
            for kind, key in (("API version", "api_versions"), ("variants list", "variants"),
                              ("parameters", "parameters"), ("version", "os_version")):
                mine, theirs = _os_values(info.get(key)), _os_values(base.get(key))
                found.report_if(mine != theirs, "ENODEOS", name,
                                f"OS {kind} for {os_name} differs from reference node "
                                f"{ref_name}: [{_joined(mine)}] vs. [{_joined(theirs)}]")
        missing = set(ref) - set(table)
        found.report_if(missing, "ENODEOS", name,
                        f"OSes present on reference node {ref_name} but missing on this "
                        f"node: {_joined(missing)}")


def _os_values(value: Any) -> set[str]:
    """A compared OS field as a set of strings (a parameter is ``name: doc``)."""
    if value is None:
        return set()
    if not isinstance(value, list):
        return {str(value)}
    return {": ".join(map(str, v)) if isinstance(v, list) else str(v) for v in value}


def check_running(found: Findings, img: NodeImage, store: ConfigStore,
                  skip: set[str]) -> None:
    """Instances running on the node that should not: another node's (wrong node) or
    unknown ones; instances in ``skip`` (busy, being created) are left alone."""
    for name in sorted(img.running):
        if name in skip:
            continue
        inst = store.find("instance", name)
        if inst is None:
            found.report("ENODEORPHANINSTANCE", img.node.name,
                         f"node is running unknown instance {name}")
        elif inst.primary_node != img.node.uuid:
            found.report("EINSTANCEWRONGNODE", inst.name,
                         f"instance should not run on node {img.node.name}")


def check_instances(found: Findings, instances: Sequence[Instance], gathered: Gathered,
                    store: ConfigStore) -> None:
    """Each instance against its group's instance policy (a warning, as in Ganeti),
    its placement constraints (an error) and its nodes: running where it should, its
    disks there."""
    images = gathered.images
    policies: dict[str, Mapping[str, Any]] = {}
    for inst in instances:
        found.note(f"* Verifying instance {inst.name}")
        primary = store.find("node", inst.primary_node)
        if primary is None:
            continue  # the configuration check reports it
        if primary.group not in policies:
            policies[primary.group] = group_ipolicy(store, store.get("nodegroup",
                                                                     primary.group))
        broken = stored_instance_violations(store, inst, policies[primary.group])
        found.report_if(broken, "EINSTANCEPOLICY", inst.name, ", ".join(broken),
                        severity=WARNING)
        unmet = node_violations(store, primary, instance_constraints(inst))
        found.report_if(unmet, "EINSTANCEUNSUITABLENODE", inst.name,
                        f"instance lives on node {primary.name}, which does not meet its "
                        f"placement constraints: {'; '.join(unmet) or 'none given'}")
        pimg = images.get(primary.uuid)
        if inst.admin_state == "up":
            found.report_if(primary.offline, "EINSTANCEBADNODE", inst.name, (
                f"instance is marked as running and lives on offline node {primary.name}"))
            down = (pimg is not None and pimg.usable and not pimg.hv_fail
                    and inst.name not in pimg.running)
            found.report_if(down and not primary.offline, "EINSTANCEDOWN", inst.name,
                            f"instance not running on its primary node {primary.name}")
        if pimg is not None and pimg.rpc_error is not None and not primary.offline:
            found.report("ENODERPC", primary.name,
                         f"instance {inst.name}, connection to primary node failed")
        found.report_if(not primary.vm_capable, "EINSTANCEBADNODE", inst.name, (
            f"instance lives on non-vm_capable node {primary.name}"))
        for index, uuid in enumerate(inst.disks):
            disk = store.find("disk", uuid)
            if disk is not None:
                _check_disk(found, inst, index, disk, images, store)


def _check_disk(found: Findings, inst: Instance, index: int, disk: Disk,
                images: Mapping[str, NodeImage], store: ConfigStore) -> None:
    volume = disk_volume(disk, store.cluster.volume_group_name)
    if volume is None:
        return
    template, name = volume
    for node_uuid in disk.nodes:
        img = images.get(node_uuid)
        if img is None or not img.usable:
            continue
        node = img.node
        if template in img.volume_errors:
            found.report("EINSTANCEFAULTYDISK", inst.name,
                         f"couldn't retrieve status for disk/{index} on {node.name}: "
                         f"{img.volume_errors[template]}")
        elif template in img.volumes:
            found.report_if(name not in img.volumes[template], "EINSTANCEMISSINGDISK",
                            inst.name, (
                                f"volume {name} missing on node {node.name}"))


def check_orphan_volumes(found: Findings, gathered: Gathered, expected: Mapping[str, set[str]],
                         shared_expected: Mapping[str, set[str]], skip_nodes: set[str]) -> None:
    """Volumes on a node that no disk of the configuration claims there (a warning).
    ``expected`` maps a node UUID to its volumes; a shared template's volumes are
    compared with every volume of that template (``shared_expected``) and each is
    reported once. Nodes in ``skip_nodes`` (a creation is under way) are left alone."""
    seen_shared: set[str] = set()
    for img in sorted(gathered.images.values(), key=lambda i: i.node.name):
        if not img.usable or img.node.uuid in skip_nodes:
            continue
        mine = expected.get(img.node.uuid, set())
        for template, volumes in sorted(img.volumes.items()):
            kind = STORAGE[template]
            for volume in sorted(volumes):
                if kind.shared:
                    if volume in shared_expected.get(template, set()) or volume in seen_shared:
                        continue
                    seen_shared.add(volume)
                elif volume in mine:
                    continue
                found.report("ENODEORPHANLV", img.node.name, f"volume {volume} is unknown",
                             severity=WARNING)


def check_nplusone(found: Findings, gathered: Gathered, instances: Sequence[Instance],
                   store: ConfigStore) -> None:
    """Each node holding instances as secondary (their disks' other nodes) has the
    free memory to start those of any one failed primary (auto-balanced ones, at their
    ``minmem``), as Ganeti computes it."""
    cluster = store.cluster
    needs: dict[str, dict[str, int]] = {}
    for inst in instances:
        secondaries = {n for uuid in inst.disks if (d := store.find("disk", uuid)) is not None
                       for n in d.nodes} - {inst.primary_node}
        if not secondaries:
            continue
        group = store.find("nodegroup", (store.find("node", inst.primary_node) or
                                         Node(name="", primary_ip="", group="")).group)
        filled = params.fill_params(cluster.beparams.get("default", {}),
                                    group.beparams if group else {}, inst.beparams)
        if not filled.get("auto_balance", True):
            continue
        memory = params.parse_size(filled.get("minmem", 0))
        for secondary in secondaries:
            per_primary = needs.setdefault(secondary, {})
            per_primary[inst.primary_node] = per_primary.get(inst.primary_node, 0) + memory
    for node_uuid, per_primary in sorted(needs.items()):
        img = gathered.images.get(node_uuid)
        if img is None or img.node.offline or img.mfree is None:
            continue
        for primary_uuid, needed in sorted(per_primary.items()):
            primary = store.find("node", primary_uuid)
            found.report_if(img.mfree < needed, "ENODEN1", img.node.name, (
                "not enough memory to accomodate instance failovers should node "
                f"{primary.name if primary else primary_uuid} fail ({needed}MiB needed, "
                f"{img.mfree}MiB available)"))


def other_notes(found: Findings, instances: Sequence[Instance], nodes: Sequence[Node],
                store: ConfigStore) -> None:
    """Ganeti's closing notices: counts of instances and nodes worth knowing about."""
    cluster = store.cluster
    non_redundant = non_balanced = offline = 0
    for inst in instances:
        templates = {d.dev_type for uuid in inst.disks
                     if (d := store.find("disk", uuid)) is not None}
        if templates - {"sharedfile", "rbd", "ext", "drbd", "blockdev", "gluster"}:
            non_redundant += 1
        filled = params.fill_params(cluster.beparams.get("default", {}), inst.beparams)
        if not filled.get("auto_balance", True):
            non_balanced += 1
        if inst.admin_state == "offline":
            offline += 1
    found.step("* Other Notes")
    for count, what in ((non_redundant, "non-redundant instance(s)"),
                        (non_balanced, "non-auto-balanced instance(s)"),
                        (offline, "offline instance(s)"),
                        (sum(1 for n in nodes if n.offline), "offline node(s)"),
                        (sum(1 for n in nodes if n.drained and not n.offline),
                         "drained node(s)")):
        if count:
            found.step(f"  - NOTICE: {count} {what} found.")
