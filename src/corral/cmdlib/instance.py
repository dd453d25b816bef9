"""Instance life cycle: create, remove, start, stop, reboot, reinstall, rename.

What one can learn about instances (``gnt-instance list``/``info``) lives in
:mod:`corral.cmdlib.instance_query`; this area module registers it.

Locks. Every unit locks its instance exclusively and its primary node shared at the
node and node-resource levels (the BGL shared, as for all but cluster-wide work).
Shared node locks keep a node from being removed or taken offline underneath, while
four creates on four nodes, or many on one node, run side by side: what a create on
a node needs to be safe is its own instance name (the instance lock, added by
:meth:`LUInstanceCreate.prepare` so that a second create of the same name waits for
the first and then finds the name taken), its own disk files (named by UUID) and a
unique MAC (random, checked, and checked again by the configuration at commit).
corral does not account node memory or disk space at creation yet; when it does,
the reservation will want ``NODE_RES`` exclusively.

Reason trail. Every state change stores the opcode's reason trail on the instance
(``Instance.last_reason``); ``gnt-instance info`` shows it.

Parameters accepted for compatibility and ignored: ``wait_for_sync`` (file disks
need no sync), ``ip_check``/``name_check`` (no DNS look-ups), ``conflicts_check``,
``ignore_ipolicy``, ``opportunistic_locking``, ``compress``, ``group_name``,
``helper_*_timeout``, the startup ``force`` and ``shutdown_timeout``, the shutdown
``force`` and ``admin_state_source``, the reboot ``ignore_secondaries`` and the
query-data ``use_locking`` (answers come from one consistent configuration
snapshot). Refused with an error saying what works: creation modes other than
``create``, ``iallocator`` (give ``pnode``), secondary nodes, ``file_driver`` other
than ``loop``, forthcoming instances, instance communication, private/secret OS
parameters, networks and ``ip=pool``, disk adoption and LVM/ext disk keys.
"""

from __future__ import annotations

import ipaddress
import random
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.common import (
    check_node_online,
    expand_instance,
    expand_node,
    fill_osparams,
    instance_spec,
    split_os_name,
)
from corral.cmdlib.instance_query import (
    MAX_DISKS,
    MAX_NICS,
    LUInstanceQueryData,
    filled_beparams,
    filled_hvparams,
    instance_resource,
    is_shut_down,
)
from corral.cmdlib.tags import check_tag
from corral.errors import (
    AlreadyExistsError,
    CorralError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    OsError,
    ParameterError,
)
from corral.locking import LockLevel
from corral.objects import NIC, Disk, Instance, Node, fill_params, new_uuid
from corral.objects.params import (
    BE_PARAMS,
    HV_PARAMS,
    NIC_MODES,
    NIC_PARAMS,
    parse_size,
    update_params,
    validate_params,
)
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.opcodes.instance_ops import (
    OpInstanceCreate,
    OpInstanceReboot,
    OpInstanceReinstall,
    OpInstanceRemove,
    OpInstanceRename,
    OpInstanceShutdown,
    OpInstanceStartup,
)
from corral.storage import file_logical_id

__all__ = [
    "DISK_KEYS",
    "FILE_TEMPLATES",
    "NIC_KEYS",
    "SUPPORTED_TEMPLATES",
    "UNITS",
    "LUInstanceCreate",
    "LUInstanceQueryData",
    "LUInstanceReboot",
    "LUInstanceReinstall",
    "LUInstanceRemove",
    "LUInstanceRename",
    "LUInstanceShutdown",
    "LUInstanceStartup",
    "query_resources",
]

#: Disk templates instances can be created with so far.
SUPPORTED_TEMPLATES = ("diskless", "file", "sharedfile")
#: Templates whose disks are files below a storage directory.
FILE_TEMPLATES = ("file", "sharedfile")
#: Keys of a disk definition (Ganeti's); the last ones are refused when set.
DISK_KEYS = ("size", "mode", "name", "spindles", "adopt", "vg", "metavg", "provider")
#: Keys of a NIC definition (Ganeti's, plus the legacy ``bridge``).
NIC_KEYS = ("mac", "ip", "mode", "link", "vlan", "name", "network", "bridge")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_GENERATE_MAC = ("", "auto", "generate")
_MAC_ATTEMPTS = 64

# Node RPC timeouts (seconds).
_QUICK = 60.0
_START = 300.0
_INSTALL = 3660.0


# -- small helpers ------------------------------------------------------------

def _trail(op: Any) -> list[list[Any]]:
    """The opcode's reason trail as stored on an instance."""
    return [list(entry) for entry in op.reason]


def _wire(spec: InstanceSpec | DiskSpec) -> Any:
    return msgspec.to_builtins(spec)


def check_instance_name(name: str) -> None:
    """Refuse names that cannot be host names."""
    if len(name) > 255 or not _NAME_RE.match(name):
        raise ParameterError(
            f"invalid instance name {name!r}: use letters, digits, '.', '-' and '_', "
            "starting with a letter or a digit (at most 255 characters)")


async def _call(master: MasterContext, node: Node, procedure: str, args: Mapping[str, Any],
                what: str, *, timeout: float = _QUICK,  # noqa: ASYNC109 - the RPC's
                ) -> Any:
    """Call ``procedure`` on one node; its payload, or its error naming the node."""
    results = await master.rpc.call([node], procedure, args, timeout=timeout)
    return results[node.name].get(what)


def _is_blacklisted(blacklist: list[str], os_name: str) -> bool:
    return os_name in blacklist or split_os_name(os_name)[0] in blacklist


def _used_addresses(master: MasterContext) -> tuple[set[str], set[str]]:
    """MACs (lower case) and IPs the configuration's instances use."""
    macs: set[str] = set()
    ips: set[str] = set()
    for inst in master.store.all("instance"):
        for nic in inst.nics:
            if nic.mac:
                macs.add(nic.mac.lower())
            if nic.ip:
                ips.add(nic.ip)
    return macs, ips


def _check_hv_be(hypervisor: str, hvparams: Mapping[str, Any], beparams: Mapping[str, Any]
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Validated instance-level hypervisor and backend parameter overrides."""
    hv = validate_params("hypervisor", HV_PARAMS[hypervisor], hvparams, instance_level=True)
    be_in = dict(beparams)
    if "memory" in be_in:  # Ganeti's pre-2.6 name for maxmem = minmem
        memory = be_in.pop("memory")
        be_in.setdefault("maxmem", memory)
        be_in.setdefault("minmem", memory)
    be = validate_params("backend", BE_PARAMS, be_in, instance_level=True)
    return update_params({}, hv), update_params({}, be)


async def _check_os(lu: LogicalUnit[Any], node: Node, os_name: str, *,
                    force_variant: bool, own_params: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``os_name`` on ``node`` (exists, valid, variant, parameters); return the
    OS parameters filled in the order instance > OS+variant > OS."""
    cluster = lu.master.store.cluster
    base, variant = split_os_name(os_name)
    search_path = list(cluster.os_search_path)
    info = await _call(lu.master, node, "os_get",
                       {"name": base if force_variant else os_name, "search_path": search_path},
                       f"looking up OS {os_name}")
    if not isinstance(info, dict):
        raise OsError(f"OS {os_name}: node {node.name} answered no OS description")
    if not info.get("valid", True):
        raise OsError(f"OS {os_name} is not valid on node {node.name}: {info.get('message')}")
    variants = list(info.get("variants") or [])
    # Unlike Ganeti, a name without a variant is accepted for an OS that has variants:
    # its scripts then run with an empty OS_VARIANT and pick their own default.
    if variants and variant and not force_variant:
        if variant not in variants:
            raise OsError(f"OS {base} has no variant {variant!r}; its variants: "
                          f"{', '.join(variants)}")
    elif variant and not variants and not force_variant:
        raise OsError(f"OS {base} has no variants, but {os_name!r} names one")
    known = {str(entry[0]) for entry in info.get("parameters") or [] if entry}
    unknown = sorted(set(own_params) - known)
    if unknown:
        raise OsError(f"OS {base} does not have the parameter(s) {', '.join(unknown)}; its "
                      f"parameters: {', '.join(sorted(known)) or '(none)'}")
    filled = fill_osparams(lu.master.store, os_name, dict(own_params))
    if filled or known:
        # An OS without parameters has nothing to verify: spare the script run.
        await _call(lu.master, node, "os_validate",
                    {"name": os_name, "osparams": filled, "search_path": search_path},
                    f"validating the parameters of OS {os_name}")
    return filled


def _commit_state(master: MasterContext, inst: Instance, op: Any, **changes: Any) -> Instance:
    """Store ``changes`` on the instance together with the opcode's reason trail."""
    with master.store.transaction() as txn:
        fresh = txn.get("instance", inst.uuid)
        for name, value in changes.items():
            setattr(fresh, name, value)
        fresh.last_reason = _trail(op)
        txn.update(fresh)
    return fresh


# -- disks and NICs of a new instance ------------------------------------------

def _parse_disks(template: str, disks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validated disk definitions: ``{"size": MiB, "mode", "name", "spindles"}``."""
    if template == "diskless":
        if disks:
            raise ParameterError("disk template 'diskless' takes no disks; "
                                 f"got {len(disks)}")
        return []
    if not disks:
        raise ParameterError(f"disk template {template!r} needs at least one disk, e.g. "
                             "disks=[{\"size\": \"1G\"}]")
    if len(disks) > MAX_DISKS:
        raise ParameterError(f"at most {MAX_DISKS} disks are allowed, got {len(disks)}")
    result: list[dict[str, Any]] = []
    names: set[str] = set()
    for index, disk in enumerate(disks):
        where = f"disk {index}"
        if not isinstance(disk, dict):
            raise ParameterError(f"{where}: expected an object with size, mode, name")
        unknown = sorted(set(disk) - set(DISK_KEYS))
        if unknown:
            raise ParameterError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: "
                                 f"{', '.join(DISK_KEYS)}")
        for key in ("adopt", "vg", "metavg", "provider"):
            if disk.get(key) not in (None, ""):
                raise ParameterError(f"{where}: {key!r} is not supported with the "
                                     f"{template!r} template (only plain/ext disks have it)")
        if disk.get("size") is None:
            raise ParameterError(f"{where}: the size is missing (e.g. size=10G)")
        size = parse_size(disk["size"])
        if size < 1:
            raise ParameterError(f"{where}: the size must be at least 1 MiB")
        mode = disk.get("mode") or "rw"
        if mode not in ("rw", "ro"):
            raise ParameterError(f"{where}: invalid mode {mode!r}; valid: rw, ro")
        name = disk.get("name")
        if name in ("", "none"):
            name = None
        if name is not None:
            if not isinstance(name, str) or name.isdigit():
                raise ParameterError(f"{where}: invalid name {name!r} (a non-numeric string)")
            if name in names:
                raise ParameterError(f"{where}: the name {name!r} is used twice")
            names.add(name)
        spindles = disk.get("spindles")
        if spindles is not None:
            try:
                spindles = int(spindles)
            except (TypeError, ValueError):
                raise ParameterError(f"{where}: spindles must be an integer, got "
                                     f"{spindles!r}") from None
        result.append({"size": size, "mode": mode, "name": name, "spindles": spindles})
    return result


def _check_ip(where: str, ip: Any) -> str | None:
    if ip is None or (isinstance(ip, str) and ip.lower() in ("", "none")):
        return None
    if not isinstance(ip, str):
        raise ParameterError(f"{where}: invalid IP address {ip!r}")
    if ip.lower() == "pool":
        raise ParameterError(f"{where}: ip=pool needs networks, which corral does not have "
                             "yet; give an address")
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        raise ParameterError(f"{where}: invalid IP address {ip!r}") from None


def _parse_nics(nics: list[dict[str, Any]], defaults: Mapping[str, Any]
                ) -> list[dict[str, Any]]:
    """Validated NIC definitions: ``{"mac" (None = generate), "ip", "name", "params"}``
    where ``params`` holds the given mode/link/vlan overrides."""
    if len(nics) > MAX_NICS:
        raise ParameterError(f"at most {MAX_NICS} NICs are allowed, got {len(nics)}")
    result: list[dict[str, Any]] = []
    names: set[str] = set()
    for index, nic in enumerate(nics):
        where = f"NIC {index}"
        if not isinstance(nic, dict):
            raise ParameterError(f"{where}: expected an object with mac, ip, mode, link")
        unknown = sorted(set(nic) - set(NIC_KEYS))
        if unknown:
            raise ParameterError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: "
                                 f"{', '.join(NIC_KEYS)}")
        if nic.get("network") not in (None, "", "none"):
            raise ParameterError(f"{where}: networks are not supported yet; give mode and "
                                 "link instead")
        given: dict[str, Any] = {}
        for key in ("mode", "link", "vlan"):
            if nic.get(key) not in (None, ""):
                given[key] = nic[key]
        if nic.get("bridge") not in (None, ""):
            if "link" in given and given["link"] != nic["bridge"]:
                raise ParameterError(f"{where}: give either link or bridge, not both")
            given["link"] = nic["bridge"]
        if given.get("mode") not in (None, *NIC_MODES):
            raise ParameterError(f"{where}: invalid mode {given['mode']!r}; valid: "
                                 f"{', '.join(NIC_MODES)}")
        params = update_params({}, validate_params("NIC", NIC_PARAMS, given,
                                                   instance_level=True))
        filled = fill_params(defaults, params)
        ip = _check_ip(where, nic.get("ip"))
        if filled.get("mode") == "routed" and ip is None:
            raise ParameterError(f"{where}: routed mode needs an IP address (ip=...)")
        mac = nic.get("mac")
        mac = "" if mac is None else str(mac).lower()
        if mac in _GENERATE_MAC:
            mac = ""
        elif not _MAC_RE.match(mac):
            raise ParameterError(f"{where}: invalid MAC address {nic['mac']!r}; use "
                                 "xx:xx:xx:xx:xx:xx (hex), 'auto' or 'generate'")
        name = nic.get("name")
        if name in ("", "none"):
            name = None
        if name is not None:
            if name in names:
                raise ParameterError(f"{where}: the name {name!r} is used twice")
            names.add(name)
        result.append({"mac": mac, "ip": ip, "name": name, "params": params})
    return result


def _generate_mac(prefix: str, used: set[str]) -> str:
    """A MAC of the cluster prefix and three random bytes, not in ``used`` (added to it)."""
    for _attempt in range(_MAC_ATTEMPTS):
        suffix = random.getrandbits(24)
        mac = f"{prefix.lower()}:{suffix >> 16:02x}:{(suffix >> 8) & 0xff:02x}:{suffix & 0xff:02x}"
        if mac not in used:
            used.add(mac)
            return mac
    raise OpExecError(f"no free MAC address found with the prefix {prefix} after "
                      f"{_MAC_ATTEMPTS} attempts; set another prefix with "
                      "'gnt-cluster modify --mac-prefix'")


# -- create --------------------------------------------------------------------

class LUInstanceCreate(LogicalUnit[OpInstanceCreate]):
    """``OP_INSTANCE_CREATE``: disks on the primary node, OS installed, started.

    Anything that fails before the configuration commit removes the disks created so
    far and leaves the configuration untouched; a failing start after the commit
    leaves the instance defined and stopped, and fails the job saying so.
    """

    OP_ID = "OP_INSTANCE_CREATE"

    def check_arguments(self) -> None:
        """Refuse what corral cannot do and parse disks and tags."""
        op = self.op
        if op.mode != "create":
            raise ParameterError(
                f"instance creation mode {op.mode!r} is not implemented; only 'create' is "
                "(imports arrive with gnt-backup)")
        if op.iallocator:
            raise ParameterError(
                "instance allocators are not available yet: give the primary node (pnode) "
                "instead of an iallocator")
        if op.snode or op.snode_uuid:
            raise ParameterError("the disk templates corral has (diskless, file, sharedfile) "
                                 "use no secondary node; do not give snode")
        if op.forthcoming or op.commit:
            raise ParameterError("forthcoming instances (forthcoming/commit) are not supported")
        if op.instance_communication:
            raise ParameterError("instance communication is not supported")
        if op.osparams_private or op.osparams_secret:
            raise ParameterError("private and secret OS parameters are not supported yet; "
                                 "use osparams")
        if not op.os_type and not op.no_install:
            # Ganeti wants an OS even without installation; corral records none then
            # (a later reinstall names one).
            raise ParameterError("an OS is needed to create an instance (os_type, "
                                 "'-o OS+VARIANT'), unless nothing is installed (no_install)")
        check_instance_name(op.instance_name)
        for tag in op.tags:
            check_tag(tag)
        if op.no_install and op.start:
            self.feedback("No OS installation requested: the instance is not started")
            op.start = False
        if op.file_driver not in (None, "loop"):
            raise ParameterError(f"file driver {op.file_driver!r} is not supported; corral's "
                                 "file disks use 'loop'")
        if op.file_storage_dir is not None:
            sub = op.file_storage_dir.strip("/")
            if op.file_storage_dir.startswith("/") or ".." in sub.split("/"):
                raise ParameterError(
                    f"file_storage_dir {op.file_storage_dir!r} must be a relative path "
                    "below the cluster's file storage directory (no '..')")

    def expand_names(self) -> None:
        """The primary node's canonical name (from pnode or pnode_uuid)."""
        op = self.op
        key = op.pnode or op.pnode_uuid
        if not key:
            raise ParameterError("give the primary node (pnode); instance allocators are "
                                 "not available yet")
        node = expand_node(self.master.store, key)
        if op.pnode_uuid and op.pnode_uuid != node.uuid:
            raise ParameterError(f"pnode {op.pnode!r} and pnode_uuid {op.pnode_uuid!r} name "
                                 "different nodes")
        op.pnode, op.pnode_uuid = node.name, node.uuid

    async def prepare(self) -> None:
        """Add the new instance's lock (a concurrent create of the name shares it)."""
        locks = self.master.locks
        name = self.op.instance_name
        if name not in locks.lockset(LockLevel.INSTANCE):
            try:
                await locks.add(LockLevel.INSTANCE, name, owner=self.owner)
            except CorralError:
                if name not in locks.lockset(LockLevel.INSTANCE):
                    raise

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The new name exclusively, the primary node shared (see the module doc)."""
        node = [self.op.pnode or ""]
        return {
            LockLevel.INSTANCE: LockRequest([self.op.instance_name]),
            LockLevel.NODE: LockRequest(node, shared=True),
            LockLevel.NODE_RES: LockRequest(node, shared=True),
        }

    def check_prereq(self) -> None:
        """Name free, node usable, template/hypervisor enabled, parameters valid."""
        op = self.op
        store = self.master.store
        cluster = store.cluster
        if store.find("instance", op.instance_name) is not None:
            raise AlreadyExistsError(f"instance {op.instance_name!r} already exists")
        node = store.get("node", op.pnode_uuid or "")
        check_node_online(node, f"create instance {op.instance_name}")
        if node.drained:
            raise OpPrereqError(f"cannot create instance {op.instance_name}: node {node.name} "
                                "is drained (it takes no new instances)")
        if not node.vm_capable:
            raise OpPrereqError(f"cannot create instance {op.instance_name}: node {node.name} "
                                "is not vm_capable")
        self.node = node
        template = op.disk_template or (cluster.enabled_disk_templates[:1] or [""])[0]
        if template == "plain":
            raise OpPrereqError("disk template 'plain' (LVM) is not available yet; use "
                                f"one of {', '.join(SUPPORTED_TEMPLATES)}")
        if template not in SUPPORTED_TEMPLATES:
            raise ParameterError(f"unknown disk template {template!r}; corral has "
                                 f"{', '.join(SUPPORTED_TEMPLATES)}")
        if template not in cluster.enabled_disk_templates:
            raise OpPrereqError(
                f"disk template {template!r} is not enabled on this cluster (enabled: "
                f"{', '.join(cluster.enabled_disk_templates) or 'none'}); enable it with "
                "'gnt-cluster modify --enabled-disk-templates'")
        self.template = template
        self.storage_dir = ""
        if template in FILE_TEMPLATES:
            base = (cluster.file_storage_dir if template == "file"
                    else cluster.shared_file_storage_dir)
            if not base:
                raise OpPrereqError(f"the cluster has no {template} storage directory; set "
                                    "it with 'gnt-cluster modify'")
            sub = (op.file_storage_dir or "").strip("/")
            self.storage_dir = f"{base.rstrip('/')}/{sub}" if sub else base
        hypervisor = op.hypervisor or cluster.default_hypervisor
        if hypervisor not in cluster.enabled_hypervisors:
            raise OpPrereqError(
                f"hypervisor {hypervisor!r} is not enabled on this cluster (enabled: "
                f"{', '.join(cluster.enabled_hypervisors) or 'none'})")
        if hypervisor not in HV_PARAMS:
            raise ParameterError(f"unknown hypervisor {hypervisor!r}; corral has "
                                 f"{', '.join(sorted(HV_PARAMS))}")
        self.hypervisor = hypervisor
        self.hvparams, self.beparams = _check_hv_be(hypervisor, op.hvparams, op.beparams)
        if not op.no_install and _is_blacklisted(cluster.blacklisted_os, op.os_type or ""):
            raise OsError(f"OS {op.os_type} is blacklisted: new installations are refused "
                          "(reinstall and rename still work); see 'gnt-os modify'")
        group = store.get("nodegroup", node.group)
        nic_defaults = fill_params(cluster.nicparams.get("default", {}), group.nicparams)
        self.disks = _parse_disks(template, op.disks)
        self.nics = _parse_nics(op.nics, nic_defaults)
        macs, ips = _used_addresses(self.master)
        for index, nic in enumerate(self.nics):
            if nic["mac"]:
                if nic["mac"] in macs:
                    raise AlreadyExistsError(f"NIC {index}: MAC {nic['mac']} is already in use")
                macs.add(nic["mac"])
            if nic["ip"]:
                if nic["ip"] in ips:
                    raise AlreadyExistsError(f"NIC {index}: IP {nic['ip']} is already in use")
                ips.add(nic["ip"])
        for nic in self.nics:
            if not nic["mac"]:
                nic["mac"] = _generate_mac(cluster.mac_prefix, macs)
        self._build(node)

    def _build(self, node: Node) -> None:
        """The instance and disk objects to commit (not yet in the configuration)."""
        op = self.op
        inst_uuid = new_uuid()
        disks: list[Disk] = []
        for index, d in enumerate(self.disks):
            disk_uuid = new_uuid()
            disks.append(Disk(
                uuid=disk_uuid, name=d["name"], dev_type=self.template, size=d["size"],
                mode=d["mode"], iv_name=f"disk/{index}", nodes=[node.uuid],
                spindles=d["spindles"],
                logical_id=file_logical_id(self.storage_dir, inst_uuid, disk_uuid, index),
            ))
        nics = [NIC(name=n["name"], mac=n["mac"], ip=n["ip"], nicparams=n["params"])
                for n in self.nics]
        inst = Instance(
            uuid=inst_uuid, name=op.instance_name, primary_node=node.uuid,
            os=op.os_type or "", hypervisor=self.hypervisor, hvparams=self.hvparams,
            beparams=self.beparams, osparams=dict(op.osparams),
            admin_state="up" if op.start else "down", disk_template=self.template,
            disks=[d.uuid for d in disks], nics=nics, tags=list(op.tags),
            last_reason=_trail(op),
        )
        if op.identify_defaults:
            store = self.master.store
            hv_defaults = filled_hvparams(store, msgspec.structs.replace(inst, hvparams={}),
                                          node, skip_globals=False)
            be_defaults = filled_beparams(store, msgspec.structs.replace(inst, beparams={}),
                                          node)
            os_defaults = fill_osparams(store, inst.os, {})
            inst.hvparams = {k: v for k, v in inst.hvparams.items() if hv_defaults.get(k) != v}
            inst.beparams = {k: v for k, v in inst.beparams.items() if be_defaults.get(k) != v}
            inst.osparams = {k: v for k, v in inst.osparams.items() if os_defaults.get(k) != v}
        maxmem = filled_beparams(self.master.store, inst, node)
        if maxmem.get("minmem", 0) > maxmem.get("maxmem", 0):
            raise ParameterError(
                f"minmem ({maxmem.get('minmem')} MiB) must not exceed maxmem "
                f"({maxmem.get('maxmem')} MiB)")
        self.instance = inst
        self.disk_objects = disks

    def _spec(self) -> InstanceSpec:
        store = self.master.store
        spec = instance_spec(store, msgspec.structs.replace(self.instance, disks=[]), self.node)
        spec.disks = [
            DiskSpec(uuid=d.uuid, index=i, dev_type=d.dev_type, size=d.size, mode=d.mode,
                     logical_id=list(d.logical_id), name=d.name, params=dict(d.params))
            for i, d in enumerate(self.disk_objects)
        ]
        return spec

    async def execute(self) -> list[str]:
        """Check the OS on the node, create disks, install, commit, start."""
        op = self.op
        node = self.node
        name = op.instance_name
        if not op.no_install:
            assert op.os_type is not None
            await _check_os(self, node, op.os_type, force_variant=op.force_variant,
                            own_params=self.instance.osparams)
        if op.dry_run:
            await self.abort()  # nothing was created: the new name's lock goes again
            return [node.name]
        spec = self._spec()
        created: list[DiskSpec] = []
        try:
            for disk in spec.disks:
                self.feedback(f"Creating disk {disk.index} ({disk.size} MiB) on {node.name}")
                await _call(self.master, node, "blockdev_create", {"disk": _wire(disk)},
                            f"creating disk {disk.index} of instance {name}", timeout=_START)
                created.append(disk)
            if not op.no_install:
                self.feedback(f"Installing OS {op.os_type} on {node.name}")
                await _call(self.master, node, "instance_os_add",
                            {"instance": _wire(spec), "reinstall": False,
                             "debug": op.debug_level},
                            f"installing OS {op.os_type} for instance {name}",
                            timeout=_INSTALL)
            with self.master.store.transaction() as txn:
                for disk_obj in self.disk_objects:
                    txn.add(disk_obj)
                txn.add(self.instance)
        except BaseException:
            await _remove_disks(self, node, created, best_effort=True)
            raise
        if op.start:
            self.feedback(f"Starting instance {name} on {node.name}")
            try:
                await _call(self.master, node, "instance_start",
                            {"instance": _wire(spec), "startup_paused": False},
                            f"starting instance {name}", timeout=_START)
            except CorralError as err:
                _commit_state(self.master, self.instance, op, admin_state="down")
                raise OpExecError(
                    f"instance {name} was created but could not be started; it is left "
                    f"stopped (admin state down): {err.message}") from err
        return [node.name]

    async def abort(self) -> None:
        """Remove the new name's lock unless an instance of that name exists."""
        name = self.op.instance_name
        if self.master.store.find("instance", name) is None:
            await self.master.locks.remove(LockLevel.INSTANCE, name, owner=self.owner)


async def _remove_disks(lu: LogicalUnit[Any], node: Node, disks: list[DiskSpec], *,
                        best_effort: bool) -> list[str]:
    """Remove ``disks`` on ``node``; failures are raised, or reported and returned."""
    failures: list[str] = []
    for disk in disks:
        try:
            await _call(lu.master, node, "blockdev_remove", {"disk": _wire(disk)},
                        f"removing disk {disk.index}")
        except CorralError as err:
            if not best_effort:
                raise
            lu.feedback(f"Warning: {err.message}")
            failures.append(err.message)
    return failures


# -- operations on one existing instance ----------------------------------------

class _InstanceLU(LogicalUnit[Any]):
    """An operation on one instance: locks it and its primary node (shared)."""

    #: What the operation is, for messages ("start", "remove").
    VERB = ""

    def expand_names(self) -> None:
        """The instance's canonical name (name or UUID accepted)."""
        op = self.op
        inst = expand_instance(self.master.store, op.instance_name)
        if op.instance_uuid and op.instance_uuid != inst.uuid:
            raise ParameterError(f"instance_name {op.instance_name!r} and instance_uuid "
                                 f"{op.instance_uuid!r} name different instances")
        op.instance_name, op.instance_uuid = inst.name, inst.uuid
        self._node_name = self.master.store.get("node", inst.primary_node).name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The instance exclusively, its primary node shared."""
        return {
            LockLevel.INSTANCE: LockRequest(self._instance_locks()),
            LockLevel.NODE: LockRequest([self._node_name], shared=True),
            LockLevel.NODE_RES: LockRequest([self._node_name], shared=True),
        }

    def _instance_locks(self) -> list[str]:
        return [self.op.instance_name]

    def check_prereq(self) -> None:
        """The instance still exists and still lives on the locked node."""
        store = self.master.store
        inst = store.find("instance", self.op.instance_uuid or "")
        if inst is None:
            raise NotFoundError(f"instance {self.op.instance_name!r} was removed meanwhile")
        node = store.get("node", inst.primary_node)
        if node.name != self._node_name:
            raise OpPrereqError(
                f"instance {inst.name} moved to node {node.name} while this job waited for "
                "its locks; submit the operation again")
        self.instance = inst
        self.node = node

    def spec(self) -> InstanceSpec:
        """The instance's filled spec for its primary node."""
        return instance_spec(self.master.store, self.instance, self.node)

    async def running(self) -> bool:
        """Whether the hypervisor on the primary node runs the instance."""
        inst = self.instance
        info = await _call(self.master, self.node, "instance_info",
                           {"instance": inst.name, "hypervisor": inst.hypervisor},
                           f"checking whether instance {inst.name} runs")
        return bool(info) and not is_shut_down(info)


class LUInstanceRemove(_InstanceLU):
    """``OP_INSTANCE_REMOVE``: stop, remove the disks, forget the instance and its lock."""

    OP_ID = "OP_INSTANCE_REMOVE"

    async def execute(self) -> None:
        """Shut down, remove disks, remove from the configuration."""
        op: OpInstanceRemove = self.op
        inst, node = self.instance, self.node
        if op.dry_run:
            return None
        spec = self.spec()
        hint = "; use ignore_failures (--ignore-failures) to remove it anyway"
        try:
            await _call(self.master, node, "instance_shutdown",
                        {"instance": _wire(spec), "timeout": float(op.shutdown_timeout)},
                        f"shutting down instance {inst.name}",
                        timeout=op.shutdown_timeout + _QUICK)
        except CorralError as err:
            if not op.ignore_failures:
                raise type(err)(err.message + hint) from err
            self.feedback(f"Warning: {err.message}; removing the instance anyway")
        try:
            await _remove_disks(self, node, spec.disks, best_effort=op.ignore_failures)
        except CorralError as err:
            raise type(err)(err.message + hint) from err
        with self.master.store.transaction() as txn:
            txn.remove("instance", inst.uuid)
            for disk_uuid in inst.disks:
                txn.remove("disk", disk_uuid)
        await self.master.locks.remove(LockLevel.INSTANCE, inst.name, owner=self.owner)
        return None


class LUInstanceStartup(_InstanceLU):
    """``OP_INSTANCE_STARTUP``: start on the primary node and remember it should run."""

    OP_ID = "OP_INSTANCE_STARTUP"

    def check_prereq(self) -> None:
        """Not offline; node online (unless ``ignore_offline_nodes``); params valid."""
        super().check_prereq()
        op: OpInstanceStartup = self.op
        inst = self.instance
        if inst.admin_state == "offline":
            raise OpPrereqError(f"instance {inst.name} is marked offline; bring it online "
                                "with 'gnt-instance modify --online' first")
        if self.node.offline and not op.ignore_offline_nodes:
            raise OpPrereqError(
                f"cannot start instance {inst.name}: its primary node {self.node.name} is "
                "offline (ignore_offline_nodes only records the wanted state)")
        self.hv_extra, self.be_extra = _check_hv_be(inst.hypervisor, op.hvparams, op.beparams)

    async def execute(self) -> None:
        """Start unless it runs; record admin state up (unless ``no_remember``)."""
        op: OpInstanceStartup = self.op
        inst, node = self.instance, self.node
        if op.dry_run:
            return None
        if not op.no_remember:
            self.instance = _commit_state(self.master, inst, op, admin_state="up")
        if node.offline:
            self.feedback(f"Primary node {node.name} is offline: instance {inst.name} is only "
                          "marked as started")
            return None
        if await self.running():
            self.feedback(f"Instance {inst.name} is already running")
            return None
        spec = self.spec()
        spec.hvparams = fill_params(spec.hvparams, self.hv_extra)
        spec.beparams = fill_params(spec.beparams, self.be_extra)
        spec.admin_state = "up"
        await _call(self.master, node, "instance_start",
                    {"instance": _wire(spec), "startup_paused": op.startup_paused},
                    f"starting instance {inst.name}", timeout=_START)
        return None


class LUInstanceShutdown(_InstanceLU):
    """``OP_INSTANCE_SHUTDOWN``: stop on the primary node, remember it should not run."""

    OP_ID = "OP_INSTANCE_SHUTDOWN"

    def check_prereq(self) -> None:
        """Not offline; node online (unless ``ignore_offline_nodes``)."""
        super().check_prereq()
        op: OpInstanceShutdown = self.op
        inst = self.instance
        if inst.admin_state == "offline":
            raise OpPrereqError(f"instance {inst.name} is marked offline (it is not running)")
        if self.node.offline and not op.ignore_offline_nodes:
            raise OpPrereqError(
                f"cannot shut down instance {inst.name}: its primary node {self.node.name} "
                "is offline (ignore_offline_nodes only records the wanted state)")

    async def execute(self) -> None:
        """Record admin state down (unless ``no_remember``), then stop."""
        op: OpInstanceShutdown = self.op
        inst, node = self.instance, self.node
        if op.dry_run:
            return None
        if not op.no_remember:
            self.instance = _commit_state(self.master, inst, op, admin_state="down")
        if node.offline:
            self.feedback(f"Primary node {node.name} is offline: instance {inst.name} is only "
                          "marked as stopped")
            return None
        await _call(self.master, node, "instance_shutdown",
                    {"instance": _wire(self.spec()), "timeout": float(op.timeout)},
                    f"shutting down instance {inst.name}", timeout=op.timeout + _QUICK)
        return None


class LUInstanceReboot(_InstanceLU):
    """``OP_INSTANCE_REBOOT``: soft/hard by the hypervisor, full = stop + start.

    As in Ganeti, rebooting an instance that does not run starts it, and the
    instance is then marked as wanted up.
    """

    OP_ID = "OP_INSTANCE_REBOOT"

    def check_prereq(self) -> None:
        """Not offline, node online."""
        super().check_prereq()
        inst = self.instance
        if inst.admin_state == "offline":
            raise OpPrereqError(f"instance {inst.name} is marked offline; bring it online "
                                "with 'gnt-instance modify --online' first")
        check_node_online(self.node, f"reboot instance {inst.name}")

    async def execute(self) -> None:
        """Reboot (or start) and record admin state up."""
        op: OpInstanceReboot = self.op
        inst, node = self.instance, self.node
        if op.dry_run:
            return None
        running = await self.running()
        spec = self.spec()
        spec.admin_state = "up"
        if running and op.reboot_type in ("soft", "hard"):
            await _call(self.master, node, "instance_reboot",
                        {"instance": _wire(spec), "reboot_type": op.reboot_type,
                         "timeout": float(op.shutdown_timeout)},
                        f"rebooting instance {inst.name}",
                        timeout=op.shutdown_timeout + _START)
        else:
            if running:
                await _call(self.master, node, "instance_shutdown",
                            {"instance": _wire(spec), "timeout": float(op.shutdown_timeout)},
                            f"shutting down instance {inst.name} for a full reboot",
                            timeout=op.shutdown_timeout + _QUICK)
            else:
                self.feedback(f"Instance {inst.name} was not running: starting it")
            await _call(self.master, node, "instance_start",
                        {"instance": _wire(spec), "startup_paused": False},
                        f"starting instance {inst.name}", timeout=_START)
        self.instance = _commit_state(self.master, inst, op, admin_state="up")
        return None


class LUInstanceReinstall(_InstanceLU):
    """``OP_INSTANCE_REINSTALL``: run the OS's create script again on a stopped instance.

    A blacklisted OS may be reinstalled. ``osparams`` apply to this installation only
    (merged over the instance's own); a new ``os_type`` is stored once the
    installation succeeded.
    """

    OP_ID = "OP_INSTANCE_REINSTALL"

    def check_arguments(self) -> None:
        """Private/secret OS parameters are not supported yet."""
        if self.op.osparams_private or self.op.osparams_secret:
            raise ParameterError("private and secret OS parameters are not supported yet; "
                                 "use osparams")

    def check_prereq(self) -> None:
        """Stopped (admin state down), node online."""
        super().check_prereq()
        inst = self.instance
        if inst.admin_state == "up":
            raise OpPrereqError(f"instance {inst.name} is marked to run; shut it down first "
                                "(gnt-instance shutdown)")
        if inst.admin_state == "offline":
            raise OpPrereqError(f"instance {inst.name} is marked offline; bring it online "
                                "with 'gnt-instance modify --online' first")
        check_node_online(self.node, f"reinstall instance {inst.name}")
        if not (self.op.os_type or inst.os):
            raise ParameterError(f"instance {inst.name} has no OS yet; name one with "
                                 "os_type (-o OS+VARIANT)")

    async def execute(self) -> None:
        """Check it does not run, check the OS, install, record the OS."""
        op: OpInstanceReinstall = self.op
        inst, node = self.instance, self.node
        if await self.running():
            raise OpPrereqError(f"instance {inst.name} is running on node {node.name}; shut "
                                "it down first")
        os_name = op.os_type or inst.os
        params = update_params(inst.osparams, op.osparams or {})
        filled = await _check_os(self, node, os_name, force_variant=op.force_variant,
                                 own_params=params)
        if op.dry_run:
            return None
        spec = self.spec()
        spec.os = os_name
        spec.osparams = filled
        self.feedback(f"Reinstalling OS {os_name} on {node.name}")
        await _call(self.master, node, "instance_os_add",
                    {"instance": _wire(spec), "reinstall": True, "debug": op.debug_level},
                    f"reinstalling OS {os_name} for instance {inst.name}", timeout=_INSTALL)
        self.instance = _commit_state(self.master, inst, op, os=os_name)
        return None


class LUInstanceRename(_InstanceLU):
    """``OP_INSTANCE_RENAME``: new name in the configuration and the locks, then the
    OS's rename script (its failure is a warning: the rename stands, as in Ganeti)."""

    OP_ID = "OP_INSTANCE_RENAME"

    def check_arguments(self) -> None:
        """The new name is a valid name."""
        check_instance_name(self.op.new_name)

    def _instance_locks(self) -> list[str]:
        return [self.op.instance_name, self.op.new_name]

    async def prepare(self) -> None:
        """Add the new name's lock so that a create of that name waits for us."""
        locks = self.master.locks
        name = self.op.new_name
        if name == self.op.instance_name:
            raise ParameterError(f"instance {name!r} already has that name")
        if name not in locks.lockset(LockLevel.INSTANCE):
            try:
                await locks.add(LockLevel.INSTANCE, name, owner=self.owner)
            except CorralError:
                if name not in locks.lockset(LockLevel.INSTANCE):
                    raise

    def check_prereq(self) -> None:
        """Stopped, the new name free, node online."""
        super().check_prereq()
        inst = self.instance
        if inst.admin_state == "up":
            raise OpPrereqError(f"instance {inst.name} is marked to run; shut it down before "
                                "renaming it")
        if self.master.store.find("instance", self.op.new_name) is not None:
            raise AlreadyExistsError(f"instance {self.op.new_name!r} already exists")
        check_node_online(self.node, f"rename instance {inst.name}")

    async def execute(self) -> str:
        """Rename in the configuration and the locks, then run the rename script."""
        op: OpInstanceRename = self.op
        inst, node = self.instance, self.node
        old_name = inst.name
        if await self.running():
            raise OpPrereqError(f"instance {old_name} is running on node {node.name}; shut "
                                "it down first")
        if op.dry_run:
            await self.abort()
            return op.new_name
        self.instance = _commit_state(self.master, inst, op, name=op.new_name)
        await self.master.locks.remove(LockLevel.INSTANCE, old_name, owner=self.owner)
        try:
            await _call(self.master, node, "instance_run_rename",
                        {"instance": _wire(self.spec()), "old_name": old_name,
                         "debug": op.debug_level},
                        f"running the OS rename script of instance {op.new_name}",
                        timeout=_INSTALL)
        except CorralError as err:
            self.feedback(f"Warning: {err.message} (the instance is renamed in the "
                          "configuration nevertheless)")
        return op.new_name

    async def abort(self) -> None:
        """Remove the new name's lock unless an instance has that name."""
        name = self.op.new_name
        if self.master.store.find("instance", name) is None:
            await self.master.locks.remove(LockLevel.INSTANCE, name, owner=self.owner)


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (
    LUInstanceCreate,
    LUInstanceRemove,
    LUInstanceStartup,
    LUInstanceShutdown,
    LUInstanceReboot,
    LUInstanceReinstall,
    LUInstanceRename,
    LUInstanceQueryData,
)


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """The ``instance`` query resource (``gnt-instance list``, ``/2/query/instance``)."""
    return {"instance": instance_resource(ctx)}
