"""Creating an instance: its disks on the primary node, the OS installed, started.

Locks. A create locks the new instance name exclusively and its primary node shared
at the node and node-resource levels, so that four creates on four nodes, or many on
one node, run side by side: what a create on a node needs to be safe is its own
instance name (the lock, added by :meth:`LUInstanceCreate.prepare` so that a second
create of the same name waits for the first and then finds the name taken), its own
disk files (named by UUID) and a unique MAC (random, checked, and checked again by
the configuration at commit). corral checks a node's free file storage at creation
but reserves none; when it does, the reservation will want ``NODE_RES`` exclusively.

File disks larger together than the free space of their storage directory on the
primary node are refused before anything is created; ``ignore_ipolicy`` (Ganeti's
override of its instance policy checks, ``--ignore-ipolicy``) creates them anyway,
as the files are sparse.

Placement. With ``pnode`` the instance goes there; without it (or with
``iallocator``) an allocator chooses the node: the one named, else the cluster's
default allocators in turn (:mod:`corral.cmdlib.allocation`). Its request needs no
node, so the checks that do (NICs on the group's networks, the instance policy of
the group, free memory and disk) run once it has answered; meanwhile every node is
locked shared. With ``dry_run`` the result is the nodes that would be used, and
nothing is created. The instance must fit its group's instance policy
(``ignore_ipolicy`` creates it anyway).

Adopted disks (``adopt``: volumes or devices that exist on the primary node) need
that node: Ganeti refuses them with an iallocator, and corral with any allocator.

Parameters accepted for compatibility and ignored: ``wait_for_sync`` (file disks
need no sync), ``ip_check``/``name_check`` (no DNS look-ups), ``conflicts_check``,
``opportunistic_locking`` and ``helper_*_timeout``; ``compress`` is the compression of
a ``remote-import`` (:mod:`corral.cmdlib.move_import`); ``group_name``
only restricts an allocator. Refused with an error saying what works: creation
modes other than ``create``, ``import`` (:mod:`corral.cmdlib.instance_import`) and
``remote-import`` (:mod:`corral.cmdlib.move_import`), secondary nodes,
``file_driver`` other than ``loop``, forthcoming instances, instance
communication, private/secret OS parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from corral.cmdlib.aggregates import constraints_of, describe_constraints, refuse_unmet
from corral.cmdlib.aggregates import node_filter as placement_filter
from corral.cmdlib.allocation import (
    DEFAULT_SHORTCUT,
    allocator_names,
    release_other_nodes,
    run_allocators,
)
from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext
from corral.cmdlib.common import (
    add_name_lock,
    check_hv_on_nodes,
    check_hv_syntax,
    drop_name_lock,
    expand_group,
    expand_node,
    fill_diskparams,
    fill_osparams,
    instance_spec,
    lower_os_params,
    os_state_listed,
)
from corral.cmdlib.disk_layout import (
    ACCESS_TEMPLATES,
    CREATABLE_TEMPLATES,
    check_access,
    check_adoption,
    check_space,
    filled_disk_spec,
    new_logical_id,
    parse_disks,
)
from corral.cmdlib.instance_base import (
    FILE_TEMPLATES,
    RPC_INSTALL,
    RPC_START,
    call_node,
    check_hv_be,
    check_instance_name,
    check_ip,
    check_mac,
    check_memory_fits_group,
    check_node_takes_instance,
    check_os,
    commit_instance,
    generate_mac,
    instance_info_text,
    remove_disks,
    wire,
)
from corral.cmdlib.instance_import import ImportSource, import_disks, read_export
from corral.cmdlib.instance_query import MAX_NICS, filled_beparams, filled_hvparams
from corral.cmdlib.ipolicy import check_instance_fits
from corral.cmdlib.move_checks import RemoteImportSource
from corral.cmdlib.move_import import remote_import_prereq, run_remote_import
from corral.cmdlib.nic_networks import NicNetworks, network_lock_names, none_word
from corral.cmdlib.tags import check_tag
from corral.errors import (
    AlreadyExistsError,
    CorralError,
    OpExecError,
    OpPrereqError,
    OsError,
    ParameterError,
)
from corral.iallocator import allocate_request
from corral.locking import ALL_SET, AllSet, LockLevel
from corral.objects import NIC, Disk, Instance, Node, NodeGroup, fill_params, new_uuid
from corral.objects.disk_templates import DISK_TEMPLATE_INFO
from corral.objects.params import (
    HV_PARAMS,
    NIC_MODES,
    NIC_PARAMS,
    update_params,
    validate_params,
)
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.opcodes.instance_ops import OpInstanceCreate

if TYPE_CHECKING:
    from corral.config import ConfigStore

__all__ = ["NIC_KEYS", "LUInstanceCreate", "creation_request", "request_for_create"]

#: Keys of a NIC definition (Ganeti's, plus the legacy ``bridge``).
NIC_KEYS = ("mac", "ip", "mode", "link", "vlan", "name", "network", "bridge")


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


# -- network port -------------------------------------------------------------------

#: Hypervisors whose instances get a network port when created (Ganeti's
#: ``HTS_REQ_PORT``): kvm serves an instance's VNC display on it.
PORT_HYPERVISORS = frozenset({"kvm"})
#: The range Ganeti takes network ports from when the cluster's port pool is empty.
FIRST_NETWORK_PORT, LAST_NETWORK_PORT = 11000, 14999
#: Ports handed to instances being created but not committed yet (one master).
_ports_in_creation: set[int] = set()


def allocate_network_port(master: MasterContext) -> int:
    """The lowest port of Ganeti's range that no instance holds; ports of removed
    instances are taken again, as Ganeti takes them back into its pool.

    :raises OpPrereqError: every port of the range is taken.
    """
    used = {inst.network_port for inst in master.store.all("instance")} | _ports_in_creation
    for port in range(FIRST_NETWORK_PORT, LAST_NETWORK_PORT + 1):
        if port not in used:
            return port
    raise OpPrereqError(
        f"no free network port for the instance's console: ports {FIRST_NETWORK_PORT}-"
        f"{LAST_NETWORK_PORT} are all taken")


# -- disks and NICs of a new instance ------------------------------------------

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
        network = none_word(nic.get("network"))
        # A NIC on a network (or asking for ip=pool) is resolved against the node
        # group's connections once the primary node is known.
        pooled = network is not None or str(nic.get("ip")).lower() == "pool"
        ip = nic.get("ip") if pooled else check_ip(nic.get("ip"), where)
        if not pooled and filled.get("mode") == "routed" and ip is None:
            raise ParameterError(f"{where}: routed mode needs an IP address (ip=...)")
        mac = check_mac(nic.get("mac"), where)
        name = nic.get("name")
        if name in ("", "none"):
            name = None
        if name is not None:
            if name in names:
                raise ParameterError(f"{where}: the name {name!r} is used twice")
            names.add(name)
        result.append({"mac": mac, "ip": ip, "name": name, "params": params,
                       "network": network, "pooled": pooled, "given": given})
    return result


# -- the allocator's question ---------------------------------------------------


def creation_request(store: ConfigStore, op: OpInstanceCreate, template: str,
                     hypervisor: str, beparams: Mapping[str, Any],
                     disks: list[dict[str, Any]], nic_uuids: list[str]) -> dict[str, Any]:
    """The ``allocate`` request for a new instance (what Ganeti sends: its disks and
    NICs as given, a MAC not chosen yet as ``auto``, the backend parameters filled from
    the cluster's)."""
    be = fill_params(store.cluster.beparams.get("default", {}), beparams)
    nics = []
    for uuid, nic in zip(nic_uuids, op.nics, strict=True):
        entry: dict[str, Any] = {"mac": nic.get("mac") or "auto"}
        if nic.get("ip"):
            entry["ip"] = nic["ip"]
        entry["nicparams"] = {k: nic[k] for k in ("mode", "link", "vlan")
                              if nic.get(k) not in (None, "")}
        entry["uuid"] = uuid
        nics.append(entry)
    return allocate_request(
        name=op.instance_name, disk_template=template,
        disks=[{"size": d["size"], "mode": d["mode"], "vg": d["vg"], "name": d["name"]}
               for d in disks],
        nics=nics, vcpus=int(be["vcpus"]), memory=int(be["maxmem"]),
        spindle_use=int(be["spindle_use"]), os=op.os_type or "", tags=op.tags,
        hypervisor=hypervisor, group_name=op.group_name)


def request_for_create(store: ConfigStore, op: OpInstanceCreate) -> dict[str, Any]:
    """:func:`creation_request` for a create opcode alone (multi-allocation): its disk
    template and hypervisor (or the cluster's), parameters and disks checked."""
    cluster = store.cluster
    template = op.disk_template or (cluster.enabled_disk_templates[:1] or [""])[0]
    if template not in CREATABLE_TEMPLATES or template not in cluster.enabled_disk_templates:
        raise OpPrereqError(f"instance {op.instance_name}: disk template {template!r} is not "
                            f"enabled (enabled: {', '.join(cluster.enabled_disk_templates)})")
    hypervisor = op.hypervisor or cluster.default_hypervisor
    if hypervisor not in cluster.enabled_hypervisors:
        raise OpPrereqError(f"instance {op.instance_name}: hypervisor {hypervisor!r} is not "
                            f"enabled (enabled: {', '.join(cluster.enabled_hypervisors)})")
    _hvparams, beparams = check_hv_be(hypervisor, op.hvparams, op.beparams)
    return creation_request(store, op, template, hypervisor, beparams,
                            parse_disks(template, op.disks,
                                        default_vg=cluster.volume_group_name),
                            [new_uuid() for _nic in op.nics])


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
        lower_os_params(op.osparams)  # refuse names that differ only in case, early
        if op.mode not in ("create", "import", "remote-import"):
            raise ParameterError(
                f"instance creation mode {op.mode!r} is not implemented; 'create', 'import' "
                "and 'remote-import' are")
        if op.iallocator and (op.pnode or op.pnode_uuid):
            raise ParameterError("Do not specify both, iallocator and node")
        if op.snode or op.snode_uuid:
            raise ParameterError("none of corral's disk templates uses a secondary node "
                                 "(drbd is not available); do not give snode")
        if op.forthcoming or op.commit:
            raise ParameterError("forthcoming instances (forthcoming/commit) are not supported")
        if op.instance_communication:
            raise ParameterError("instance communication is not supported")
        if op.osparams_private or op.osparams_secret:
            raise ParameterError("private and secret OS parameters are not supported yet; "
                                 "use osparams")
        if not op.os_type and not op.no_install and op.mode != "import":
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
        """The primary node's canonical name (from pnode or pnode_uuid); without one, the
        allocators to ask (the one named, else the cluster's defaults)."""
        op = self.op
        key = op.pnode or op.pnode_uuid
        self.allocators: list[str] = []
        if op.group_name:
            op.group_name = expand_group(self.master.store, op.group_name).name
        if not key:
            if (op.iallocator in (None, "", DEFAULT_SHORTCUT)
                    and not self.master.store.cluster.default_iallocators):
                raise ParameterError(
                    "No iallocator or node given and no cluster-wide default iallocator "
                    "found; please specify either an iallocator or a node, or set a "
                    "cluster-wide default iallocator")
            self.allocators = allocator_names(self.master, op.iallocator)
            return
        node = expand_node(self.master.store, key)
        if op.pnode_uuid and op.pnode_uuid != node.uuid:
            raise ParameterError(f"pnode {op.pnode!r} and pnode_uuid {op.pnode_uuid!r} name "
                                 "different nodes")
        op.pnode, op.pnode_uuid = node.name, node.uuid

    async def prepare(self) -> None:
        """Read the export of an import (it fills what the opcode leaves open), or check
        a remote import's source values (before anything is made); add the new instance's
        lock (a concurrent create of the name shares it)."""
        self.import_source: ImportSource | None = None
        self.remote_source: RemoteImportSource | None = None
        if self.op.mode == "import":
            self.import_source = await read_export(self)
        elif self.op.mode == "remote-import":
            self.remote_source = await remote_import_prereq(self)
        await add_name_lock(self, self.op.instance_name)

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The new name exclusively, the primary node shared (every node when an
        allocator chooses it; see the module doc), the networks its NICs name
        exclusively (their pools hand out addresses)."""
        node: list[str] | AllSet = ALL_SET if self.allocators else [self.op.pnode or ""]
        # Adopting takes the node exclusively: two creates must not adopt one volume.
        adopting = any(isinstance(d, dict) and d.get("adopt") for d in self.op.disks)
        locks = {
            LockLevel.INSTANCE: LockRequest([self.op.instance_name]),
            LockLevel.NODE: LockRequest(node, shared=not adopting),
            LockLevel.NODE_RES: LockRequest(node, shared=not adopting),
        }
        networks = network_lock_names(self.master.store, self.op.nics)
        if networks:
            locks[LockLevel.NETWORK] = LockRequest(networks)
        return locks

    def check_prereq(self) -> None:
        """Name free, template/hypervisor enabled, parameters valid; node usable (once
        known: an allocator answers in :meth:`execute`)."""
        op = self.op
        store = self.master.store
        cluster = store.cluster
        if store.find("instance", op.instance_name) is not None:
            raise AlreadyExistsError(f"instance {op.instance_name!r} already exists")
        template = op.disk_template or (cluster.enabled_disk_templates[:1] or [""])[0]
        if template not in CREATABLE_TEMPLATES:
            known = ", ".join(sorted(CREATABLE_TEMPLATES))
            if template in DISK_TEMPLATE_INFO:
                raise OpPrereqError(f"disk template {template!r} is not available in "
                                    f"corral yet; use one of {known}")
            raise ParameterError(f"unknown disk template {template!r}; corral has {known}")
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
        self.hvparams, self.beparams = check_hv_be(hypervisor, op.hvparams, op.beparams)
        if not op.no_install and os_state_listed(cluster.blacklisted_os, op.os_type or ""):
            raise OsError(f"OS {op.os_type} is blacklisted: new installations are refused "
                          "(reinstall and rename still work); see 'gnt-os modify'")
        self.disks = parse_disks(template, op.disks, default_vg=cluster.volume_group_name)
        if self.allocators and self.adopting:
            raise OpPrereqError("Disk adoption not allowed with an iallocator script\n"
                                "(adopted volumes are on one node: give it as the primary "
                                "node)", ecode="wrong_input")
        if len(op.nics) > MAX_NICS:
            raise ParameterError(f"at most {MAX_NICS} NICs are allowed, got {len(op.nics)}")
        self.nic_uuids = [new_uuid() for _nic in op.nics]
        self.constraints = constraints_of(store, op)
        if not self.allocators:
            node = store.get("node", op.pnode_uuid or "")
            if self.constraints:
                refuse_unmet(store, node, self.constraints, op.instance_name)
            self._check_node(node)

    def _check_node(self, node: Node) -> None:
        """What depends on the primary node: it takes instances, the NICs on its group's
        networks, unique addresses, the instance objects, the group's policy."""
        op = self.op
        store = self.master.store
        cluster = store.cluster
        check_node_takes_instance(node, f"create instance {op.instance_name}")
        self.node = node
        group = store.get("nodegroup", node.group)
        nic_defaults = fill_params(cluster.nicparams.get("default", {}), group.nicparams)
        if self.template in ACCESS_TEMPLATES:
            group_access = fill_diskparams(store, self.template, {}, group).get(
                "access", "kernelspace")
            for disk in self.disks:
                check_access(self.hypervisor, self.template,
                             disk["params"].get("access", group_access))
        self.nics = _parse_nics(op.nics, nic_defaults)
        self._place_on_networks(group, node)
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
                nic["mac"] = generate_mac(nic.get("mac_prefix") or cluster.mac_prefix, macs)
        self._build(node)
        if not self.adopting:  # adopted disks: once their sizes are known (execute)
            self._check_policy(group)

    def _check_policy(self, group: NodeGroup) -> None:
        """The instance fits the policy of its group (Ganeti's ``violates policy``)."""
        check_instance_fits(self.master.store, group, self.instance.beparams,
                            self.disk_objects, len(self.nics),
                            ignore=self.op.ignore_ipolicy, feedback=self.feedback)

    def _place_on_networks(self, group: NodeGroup, node: Node) -> None:
        """NICs that name a network get its connection's mode and link and an address
        of its pool; an address of a connected network's subnet needs that network."""
        nets = NicNetworks(self.master.store, group, node.name, self.feedback,
                           conflicts_check=self.op.conflicts_check)
        for index, nic in enumerate(self.nics):
            if not nic["pooled"]:
                if nic["ip"] is not None and self.op.conflicts_check:
                    nets.address(None, nic["ip"], index)
                continue
            net = nets.network(nic["network"], f"NIC {index}")
            if net is not None:
                nic["params"] = nets.netparams(net, index, nic["given"])
                nic["network"] = net.uuid
                nic["mac_prefix"] = net.mac_prefix
            nic["ip"] = nets.address(net, nic["ip"], index)
            if nic["params"].get("mode") == "routed" and nic["ip"] is None:
                raise ParameterError(f"NIC {index}: routed mode needs an IP address (ip=...)")

    def _build(self, node: Node) -> None:
        """The instance and disk objects to commit (not yet in the configuration)."""
        op = self.op
        inst_uuid = new_uuid()
        disks: list[Disk] = []
        for index, d in enumerate(self.disks):
            disk_uuid = new_uuid()
            disks.append(Disk(
                uuid=disk_uuid, name=d["name"], dev_type=self.template, size=d["size"] or 0,
                mode=d["mode"], iv_name=f"disk/{index}", nodes=[node.uuid],
                spindles=d["spindles"], params=dict(d["params"]),
                logical_id=new_logical_id(self.template, d, instance_uuid=inst_uuid,
                                          disk_uuid=disk_uuid, index=index,
                                          storage_dir=self.storage_dir),
            ))
        nics = [NIC(uuid=uuid, name=n["name"], mac=n["mac"], ip=n["ip"], nicparams=n["params"],
                    network=n["network"]) for uuid, n in zip(self.nic_uuids, self.nics,
                                                              strict=True)]
        inst = Instance(
            uuid=inst_uuid, name=op.instance_name, primary_node=node.uuid,
            os=op.os_type or "", hypervisor=self.hypervisor, hvparams=self.hvparams,
            beparams=self.beparams, osparams=lower_os_params(op.osparams),
            admin_state="up" if op.start else "down", disk_template=self.template,
            disks=[d.uuid for d in disks], nics=nics, tags=list(op.tags),
            last_reason=[list(entry) for entry in op.reason],
            member_of=list(self.constraints.member_of),
            required_traits=list(self.constraints.required_traits),
            forbidden_traits=list(self.constraints.forbidden_traits),
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
        check_hv_syntax(self.hypervisor, filled_hvparams(self.master.store, inst, node))
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
        spec.disks = [filled_disk_spec(store, d, i, self.node)
                      for i, d in enumerate(self.disk_objects)]
        return spec

    async def _allocate(self) -> Node:
        """Ask the allocators for the primary node (Ganeti's ``allocate`` request)."""
        op, store = self.op, self.master.store
        request = creation_request(store, op, self.template, self.hypervisor, self.beparams,
                                   self.disks, self.nic_uuids)
        node_filter = None
        if self.constraints:
            wanted = describe_constraints(store, self.constraints)
            node_filter = placement_filter(
                store, self.constraints, vcpus=int(request["vcpus"]),
                memory=int(request["memory"]), disk_mb=int(request["disk_space_total"]),
                disk_template=self.template,
                describe=lambda nodes: (
                    f"no node meets the placement constraints of instance {op.instance_name} "
                    f"({wanted}) with room for "
                    f"{request['vcpus']} VCPUs, {request['memory']} MiB of memory and "
                    f"{request['disk_space_total']} MiB of disk (online nodes asked: "
                    f"{nodes or 'none'}); see 'gnt-node list -o name,aggregates,traits'"))
        name, answer = await run_allocators(
            self, self.allocators, request, hypervisor=self.hypervisor,
            disk_template=self.template, node_filter=node_filter,
            failure=lambda name, info: f"Can't compute nodes using iallocator '{name}': {info}")
        chosen = answer.result
        node = store.find("node", chosen[0])
        if node is None:
            raise OpPrereqError(f"Node '{chosen[0]}' not known (iallocator '{name}' chose it)",
                                ecode="unknown_entity")
        self.feedback(f" - INFO: Selected nodes for instance {op.instance_name} via iallocator "
                      f"{name}: {', '.join(chosen)}")
        op.pnode, op.pnode_uuid = node.name, node.uuid
        release_other_nodes(self, [node.name])
        return node
    @property
    def adopting(self) -> bool:
        """Whether the disks are existing volumes or devices (``adopt=``)."""
        return any(d["adopt"] for d in self.disks)

    async def _adopt(self, node: Node) -> None:
        """Check what is adopted and give the disks its sizes."""
        await check_adoption(self, node, self.template, self.disks)
        for disk_obj, d in zip(self.disk_objects, self.disks, strict=True):
            disk_obj.size = int(d["size"])

    async def _make_disks(self, spec: InstanceSpec, node: Node, name: str,
                          created: list[DiskSpec], renamed: list[tuple[DiskSpec, list[str]]]
                          ) -> None:
        """Create the disks, or take over the adopted ones (adopted LVs get corral's
        names, as Ganeti renames them); ``created`` and ``renamed`` record what to
        undo."""
        for disk, d in zip(spec.disks, self.disks, strict=True):
            if d["adopt"] and self.template == "plain":
                old = msgspec.structs.replace(disk, logical_id=[d["vg"], d["adopt"]])
                self.feedback(f"Adopting logical volume {d['vg']}/{d['adopt']} as disk "
                              f"{disk.index} ({disk.size} MiB) on {node.name}")
                await call_node(self.master, node, "blockdev_rename",
                                {"renames": [{"disk": wire(old),
                                              "new_logical_id": list(disk.logical_id)}]},
                                f"renaming the adopted logical volume of disk {disk.index}")
                renamed.append((disk, list(old.logical_id)))
            elif d["adopt"]:
                self.feedback(f"Adopting block device {d['adopt']} as disk {disk.index} "
                              f"({disk.size} MiB) on {node.name}")
                await call_node(self.master, node, "blockdev_assemble",
                                {"disks": [wire(disk)]},
                                f"checking the adopted device of disk {disk.index}")
            else:
                self.feedback(f"Creating disk {disk.index} ({disk.size} MiB) on {node.name}")
                await call_node(self.master, node, "blockdev_create",
                                {"disk": wire(disk), "info": instance_info_text(name)},
                                f"creating disk {disk.index} of instance {name}",
                                timeout=RPC_START)
                created.append(disk)

    async def _undo_disks(self, node: Node, created: list[DiskSpec],
                          renamed: list[tuple[DiskSpec, list[str]]]) -> None:
        """Remove the disks made, give adopted volumes their names back."""
        await remove_disks(self, node, created, best_effort=True)
        for disk, old_id in renamed:
            try:
                await call_node(self.master, node, "blockdev_rename",
                                {"renames": [{"disk": wire(disk), "new_logical_id": old_id}]},
                                f"giving disk {disk.index} its name back")
            except CorralError as err:
                self.feedback(f"Warning: {err.message}")

    async def execute(self) -> list[str]:
        """Ask the allocator (if one chooses the node), check the OS on the node, create
        disks, install, commit, start."""
        op = self.op
        if self.allocators:
            self._check_node(await self._allocate())
        node = self.node
        name = op.instance_name
        if "maxmem" in self.beparams:
            maxmem = filled_beparams(self.master.store, self.instance, node)["maxmem"]
            await check_memory_fits_group(self, node.group, self.hypervisor, maxmem)
        if self.adopting:
            await self._adopt(node)
            self._check_policy(self.master.store.get("nodegroup", node.group))
        else:
            await check_space(
                self, node, self.hypervisor, name, list(enumerate(self.disk_objects)),
                forced=op.ignore_ipolicy,
                override="--ignore-ipolicy (RAPI/opcode: ignore_ipolicy=true)")
        install = not op.no_install and not self.adopting
        if not op.no_install and self.adopting:
            # Ganeti installs no OS on adopted disks: they hold their data already.
            self.feedback("Disks are adopted: the OS is not installed on them")
        if install:
            assert op.os_type is not None
            await check_os(self, node, op.os_type, force_variant=op.force_variant,
                            own_params=self.instance.osparams)
        await check_hv_on_nodes(self.master, [node], self.hypervisor,
                                filled_hvparams(self.master.store, self.instance, node))
        if op.dry_run:
            await self.abort()  # nothing was created: the new name's lock goes again
            return [node.name]
        port = None
        if self.hypervisor in PORT_HYPERVISORS:
            port = self.instance.network_port = allocate_network_port(self.master)
            _ports_in_creation.add(port)
        spec = self._spec()
        created: list[DiskSpec] = []
        renamed: list[tuple[DiskSpec, list[str]]] = []
        try:
            await self._make_disks(spec, node, name, created, renamed)
            if self.import_source is not None:
                await import_disks(self, self.import_source, spec, node)
            elif self.remote_source is not None:
                await run_remote_import(self, node, spec, self.remote_source, op.compress)
            elif install:
                self.feedback(f"Installing OS {op.os_type} on {node.name}")
                await call_node(self.master, node, "instance_os_add",
                            {"instance": wire(spec), "reinstall": False,
                             "debug": op.debug_level, "force_variant": op.force_variant},
                            f"installing OS {op.os_type} for instance {name}",
                            timeout=RPC_INSTALL)
            async with self.master.store.transaction() as txn:
                for disk_obj in self.disk_objects:
                    txn.add(disk_obj)
                txn.add(self.instance)
        except BaseException:
            await self._undo_disks(node, created, renamed)
            raise
        finally:
            if port is not None:
                _ports_in_creation.discard(port)
        # Design 2.1 reports the new uuid on creation; in the job log (shown by the CLI,
        # gnt-job info and RAPI's oplog), as the result stays Ganeti's list of nodes.
        self.feedback(f"Added instance {name} with UUID {self.instance.uuid}")
        if op.start:
            self.feedback(f"Starting instance {name} on {node.name}")
            try:
                await call_node(self.master, node, "instance_start",
                            {"instance": wire(spec), "startup_paused": False,
                             "reason": op.reason},
                            f"starting instance {name}", timeout=RPC_START)
            except CorralError as err:
                await commit_instance(self.master, self.instance.uuid, op.reason,
                                lambda inst: setattr(inst, "admin_state", "down"))
                raise OpExecError(
                    f"instance {name} was created but could not be started; it is left "
                    f"stopped (admin state down): {err.message}") from err
        return [node.name]

    async def abort(self) -> None:
        """Remove the new name's lock unless an instance of that name exists."""
        await drop_name_lock(self, self.op.instance_name)
