"""Instance changes that are not its life cycle: modify and console; the area also
registers the disk units (:mod:`corral.cmdlib.instance_disks`) and migration and
move (:mod:`corral.cmdlib.instance_migration`).

``modify`` (``OP_INSTANCE_SET_PARAMS``) works on copies: every change is checked
first, new disks are created on the primary node, and only then is the configuration
committed in one transaction; if creating a disk or the commit fails, the disks
created so far are removed again and nothing has changed. Removed disks' files are
deleted after the commit (a failure there leaves a stray file, reported in the job
log, never a configuration pointing at a missing file).

The result of ``modify`` is Ganeti's list of ``[what, new value]`` pairs, e.g.
``["be/maxmem", 512]``, ``["disk/1", "add:size=1024,mode=rw"]``, ``["NIC/0",
"remove"]``, ``["nic.ip/0", "192.0.2.7"]``, ``["admin_state", "offline"]``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from corral.cmdlib import nic_networks as nicnet
from corral.cmdlib.aggregates import changed_constraints, describe_constraints
from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.common import (
    check_hv_on_nodes,
    check_hv_syntax,
    check_node_online,
    expand_node,
    fill_diskparams,
    fill_hvparams,
    fill_osparams,
    lower_os_params,
    nic_spec,
    os_state_listed,
    split_os_name,
)
from corral.cmdlib.disk_layout import (
    ACCESS_TEMPLATES,
    CREATABLE_TEMPLATES,
    check_access,
    external_params,
    new_logical_id,
)
from corral.cmdlib.instance_base import (
    FILE_TEMPLATES,
    InstanceLU,
    check_file_space,
    check_mac,
    check_memory_fits_group,
    check_variant,
    generate_mac,
    instance_info_text,
    is_running,
    storage_dir,
)
from corral.cmdlib.instance_disks import (
    LUInstanceActivateDisks,
    LUInstanceDeactivateDisks,
    LUInstanceGrowDisk,
)
from corral.cmdlib.instance_hotplug import (
    HotplugRun,
    HotplugStep,
    check_hotplug,
    insert_results,
    resolve,
)
from corral.cmdlib.instance_migration import LUInstanceFailover, LUInstanceMigrate, LUInstanceMove
from corral.cmdlib.ipolicy import check_instance_fits
from corral.errors import (
    AlreadyExistsError,
    CorralError,
    OpPrereqError,
    OsError,
    ParameterError,
    UnknownParameterError,
)
from corral.hypervisor.base import HotplugAction, HotplugTarget
from corral.locking import LockLevel
from corral.objects import NIC, Disk, Node, fill_params, params
from corral.objects.specs import InstanceSpec
from corral.opcodes.instance_change_ops import (
    MAX_DISKS,
    MAX_NICS,
    OpInstanceConsole,
    OpInstanceSetParams,
)
from corral.paths import Paths

__all__ = [
    "UNITS",
    "LUInstanceActivateDisks",
    "LUInstanceConsole",
    "LUInstanceDeactivateDisks",
    "LUInstanceGrowDisk",
    "LUInstanceSetParams",
    "parse_device_mods",
    "query_resources",
]

Action = Literal["add", "remove", "modify"]
#: One parsed disk/NIC change: action, index or name/UUID, parameters.
DeviceMod = tuple[Action, int | str, dict[str, Any]]

_DISK_KEYS = frozenset({"size", "mode", "name", "dev_type"})
#: Keys a new disk also takes (Ganeti's): its ExtStorage provider, its access mode.
_ADD_KEYS = frozenset({"provider", "access"})
_NIC_KEYS = frozenset({"bridge", "ip", "link", "mac", "mode", "name", "network", "vlan"})
_NONE = "none"


# -- parsing the modification lists ---------------------------------------------------


def parse_device_mods(kind: str, mods: list[list[Any]]) -> list[DeviceMod]:
    """Ganeti's disk/NIC modification lists in either form, as ``(action, index or
    identifier, params)``.

    New form: ``[action, index, params]`` (index ``-1`` is the end; ``modify`` and
    ``remove`` also take a name or UUID). Old form: ``["add" | "remove", params]``
    (at the end, one per request) or ``[index, params]`` (modify).
    """
    result: list[DeviceMod] = []
    old_add_remove = 0
    for entry in mods:
        if not isinstance(entry, list | tuple) or len(entry) not in (2, 3):
            raise ParameterError(
                f"invalid {kind} change {entry!r}: expected [action, index, parameters] "
                "or [action or index, parameters]"
            )
        if len(entry) == 2:
            first, values = entry
            if first in ("add", "remove"):
                old_add_remove += 1
                if old_add_remove > 1:
                    raise ParameterError(f"only one {kind} add or remove is possible per "
                                         "request in the two-element form")
                action, ident = first, -1
            elif isinstance(first, int) and not isinstance(first, bool) and first >= 0:
                action, ident = "modify", first
            else:
                raise ParameterError(f"invalid {kind} change {entry!r}: the first element "
                                     "must be 'add', 'remove' or a disk index")
        else:
            action, ident, values = entry
        if action in ("attach", "detach"):
            raise ParameterError(f"{kind} {action} is not supported; accepted actions: "
                                 "add, remove, modify")
        if action not in ("add", "remove", "modify"):
            raise ParameterError(f"unknown {kind} action {action!r}; accepted: add, remove, "
                                 "modify")
        if isinstance(ident, bool) or not isinstance(ident, int | str):
            raise ParameterError(f"invalid {kind} index {ident!r}: expected a number, a name "
                                 "or a UUID")
        if not isinstance(values, dict):
            raise ParameterError(f"the parameters of a {kind} change must be an object, got "
                                 f"{values!r}")
        if action == "remove" and values:
            raise ParameterError(f"no parameters may be given when removing a {kind}")
        result.append((action, ident, dict(values)))
    return result


def _add_index(kind: str, ident: int | str, count: int) -> int:
    try:
        index = int(ident)
    except ValueError:
        raise ParameterError(f"a new {kind} goes at an index (0 to {count}, or -1 for the "
                             f"end), not at {ident!r}") from None
    if index == -1:
        return count
    if not 0 <= index <= count:
        raise ParameterError(f"cannot add a {kind} at index {index}: the instance has "
                             f"{count}; use 0 to {count}, or -1 for the end")
    return index


def _find_index(kind: str, ident: int | str, items: list[Any]) -> int:
    if isinstance(ident, int) or ident.lstrip("-").isdigit():
        index = int(ident)
        if index == -1 and items:
            return len(items) - 1
        if 0 <= index < len(items):
            return index
        raise OpPrereqError(f"the instance has no {kind} {index} (it has {len(items)})")
    for index, item in enumerate(items):
        if ident in (item.uuid, item.name):
            return index
    raise OpPrereqError(f"the instance has no {kind} named or with UUID {ident!r}")


def _none_word(value: Any) -> Any:
    """Ganeti's ``"none"`` (any case) as None."""
    return None if isinstance(value, str) and value.lower() == _NONE else value


# -- modify ---------------------------------------------------------------------------


class LUInstanceSetParams(InstanceLU[OpInstanceSetParams]):
    """Change an instance's parameters, disks, NICs, OS, primary node or offline flag."""

    OP_ID = "OP_INSTANCE_SET_PARAMS"

    new_pnode: Node | None = None
    #: The filled maxmem when the request changes it (checked against the nodes).
    new_maxmem: int | None = None

    def check_arguments(self) -> None:
        """Something to change; nothing corral does not implement; well-formed lists."""
        op = self.op
        if not (op.nics or op.disks or op.disk_template or op.hvparams or op.beparams
                or op.os_name or op.osparams or op.offline is not None or op.runtime_mem
                or op.pnode or op.pnode_uuid or op.osparams_private
                or (op.member_of, op.required_traits, op.forbidden_traits) != (None,) * 3):
            raise ParameterError(
                "no changes submitted: give at least one of hvparams, beparams, osparams, "
                "os_name, disks, nics, offline, pnode, member_of, required_traits or "
                "forbidden_traits"
            )
        unsupported = {
            "runtime_mem": op.runtime_mem, "ext_params": op.ext_params,
            "file_driver": op.file_driver, "file_storage_dir": op.file_storage_dir,
            "remote_node": op.remote_node or op.remote_node_uuid,
            "iallocator": op.iallocator,
            "instance_communication": op.instance_communication,
            "osparams_private": op.osparams_private,
        }
        given = [name for name, value in unsupported.items() if value]
        if given:
            raise ParameterError(
                f"not supported by corral: {', '.join(given)} (changes take effect at the "
                "next start; private OS parameters go into osparams)"
            )
        self.disk_mods = parse_device_mods("disk", op.disks)
        self.nic_mods = parse_device_mods("NIC", op.nics)
        for action, _ident, values in self.disk_mods:
            # A new disk may carry ExtStorage provider parameters: checked once its
            # template is known (_check_disks).
            unknown = sorted(set(values) - _DISK_KEYS - (_ADD_KEYS if action == "add"
                                                          else frozenset()))
            if unknown and action != "add":
                raise UnknownParameterError(
                    f"unknown or unsupported disk parameter(s) {', '.join(unknown)}; valid "
                    f"ones: {', '.join(sorted(_DISK_KEYS))}"
                )
        for _action, _ident, values in self.nic_mods:
            unknown = sorted(set(values) - _NIC_KEYS)
            if unknown:
                raise UnknownParameterError(
                    f"unknown NIC parameter(s) {', '.join(unknown)}; valid ones: "
                    f"{', '.join(sorted(_NIC_KEYS))}"
                )
        if (op.pnode or op.pnode_uuid) and self.disk_mods:
            raise ParameterError("change the primary node and the disks in two separate "
                                 "requests")

    def expand_names(self) -> None:
        """The instance and the new primary node, if any."""
        super().expand_names()
        key = self.op.pnode_uuid or self.op.pnode
        self.new_pnode = expand_node(self.master.store, key) if key else None

    def extra_nodes(self) -> list[Node]:
        """The new primary node, if any."""
        return [self.new_pnode] if self.new_pnode else []

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The instance's locks, and the networks NIC changes name, exclusively."""
        locks = super().declare_locks()
        networks = nicnet.network_lock_names(self.master.store,
                                      [values for _a, _i, values in self.nic_mods])
        if networks:
            locks[LockLevel.NETWORK] = LockRequest(networks)
        return locks

    # -- checks -------------------------------------------------------------------
    def check_prereq(self) -> None:
        """Compute the new instance, disks and NICs on copies; record the changes."""
        super().check_prereq()
        op, inst = self.op, self.instance
        self.changes: list[list[Any]] = []
        #: What ``--hotplug`` would do to the running instance, in request order.
        self.hot_steps: list[HotplugStep] = []
        self.new_inst = msgspec.structs.replace(
            inst, hvparams=dict(inst.hvparams), beparams=dict(inst.beparams),
            osparams=dict(inst.osparams), nics=[msgspec.structs.replace(
                n, nicparams=dict(n.nicparams)) for n in inst.nics],
            disks=list(inst.disks),
        )
        if op.disk_template is not None:
            if op.disk_template == inst.disk_template:
                raise ParameterError(f"instance {inst.name} already has disk template "
                                     f"{inst.disk_template}")
            raise OpPrereqError(
                f"changing the disk template of instance {inst.name} ({inst.disk_template} "
                f"to {op.disk_template}) is not supported yet"
            )
        # In the order of Ganeti's result list.
        self._check_pnode()
        self._check_placement()
        self._check_disks()
        self._check_nics()
        self._check_hvparams()
        self._check_beparams()
        self._check_os()
        self._check_offline()
        if not op.ignore_ipolicy:
            # the instance as it would be, with its maximum and minimum memory (Ganeti
            # checks every modification so)
            store = self.master.store
            check_instance_fits(store, store.get("nodegroup", (self.new_pnode or
                                                              self.primary).group),
                                self.new_inst.beparams, self.new_disks,
                                len(self.new_inst.nics), memories=("maxmem", "minmem"))

    def _check_pnode(self) -> None:
        inst, node = self.instance, self.new_pnode
        if node is None:
            return
        node = self.master.store.get("node", node.uuid)
        self.new_pnode = node
        if node.uuid == inst.primary_node:
            raise ParameterError(f"node {node.name} already is the primary node of "
                                 f"instance {inst.name}")
        if inst.disk_template == "file":
            raise OpPrereqError(
                f"instance {inst.name} has file disks, whose data lives on node "
                f"{self.primary.name} only: use 'gnt-instance move' to move it"
            )
        check_node_online(node, f"make node {node.name} the primary node of {inst.name}")
        if not node.vm_capable:
            raise OpPrereqError(f"node {node.name} is not vm_capable")
        nicnet.check_networks_reach(self.master.store, inst, node)
        self.new_inst.primary_node = node.uuid
        self.changes.append(["pnode", node.name])

    def _check_placement(self) -> None:
        """New placement constraints, met by the (new) primary node; a new primary
        node meets the constraints kept."""
        op, store = self.op, self.master.store
        new = changed_constraints(store, self.instance, self.new_pnode or self.primary,
                                  op.member_of, op.required_traits, op.forbidden_traits)
        if new is not None:
            for name in ("member_of", "required_traits", "forbidden_traits"):
                setattr(self.new_inst, name, list(getattr(new, name)))
            self.changes.append(["placement", describe_constraints(store, new) or "none"])

    def _check_hvparams(self) -> None:
        if not self.op.hvparams:
            return
        hv = self.instance.hypervisor
        specs = params.HV_PARAMS.get(hv)
        if specs is None:
            raise OpPrereqError(f"instance {self.instance.name} uses unknown hypervisor {hv}")
        checked = params.validate_params(f"{hv} hypervisor", specs, self.op.hvparams,
                                         instance_level=True)
        self.new_inst.hvparams = params.update_params(self.instance.hvparams, checked)
        check_hv_syntax(hv, fill_hvparams(self.master.store, self.new_inst))
        self.changes.extend([f"hv/{k}", v] for k, v in self.op.hvparams.items())

    def _check_beparams(self) -> None:
        if not self.op.beparams:
            return
        checked = params.validate_params("backend", params.BE_PARAMS, self.op.beparams,
                                         instance_level=True)
        new_be = params.update_params(self.instance.beparams, checked)
        store = self.master.store
        group = store.get("nodegroup", self.primary.group)
        filled = fill_params(store.cluster.beparams.get("default", {}), group.beparams, new_be)
        if filled["minmem"] > filled["maxmem"]:
            raise ParameterError(f"backend parameter minmem ({filled['minmem']}) must not "
                                 f"exceed maxmem ({filled['maxmem']})")
        self.new_inst.beparams = new_be
        self.new_maxmem = filled["maxmem"] if "maxmem" in checked else None
        self.changes.extend([f"be/{k}", v] for k, v in self.op.beparams.items())

    def _check_os(self) -> None:
        op, inst, cluster = self.op, self.instance, self.master.store.cluster
        if op.os_name and op.os_name != inst.os:
            if os_state_listed(cluster.blacklisted_os, op.os_name):
                raise OsError(f"OS {op.os_name} is blacklisted: it cannot be given to "
                              "instances (see 'gnt-os modify --blacklisted')")
            self.new_inst.os = op.os_name
            self.changes.append(["os_name", op.os_name])
        if op.osparams:
            given = lower_os_params(op.osparams)
            new_os = {name.lower(): value for name, value in inst.osparams.items()}
            for key, value in given.items():
                if value is None or value == params.VALUE_DEFAULT:
                    new_os.pop(key, None)
                else:
                    new_os[key] = value if isinstance(value, str) else str(value)
            self.new_inst.osparams = new_os
            self.changes.extend([f"os/{k}", v] for k, v in given.items())

    def _check_offline(self) -> None:
        offline, inst = self.op.offline, self.instance
        if offline is None:
            return
        if inst.admin_state == "up":
            what = "offline" if offline else "online (down)"
            raise OpPrereqError(f"instance {inst.name} is marked up: shut it down before "
                                f"marking it {what}")
        self.new_inst.admin_state = "offline" if offline else "down"
        self.changes.append(["admin_state", self.new_inst.admin_state])

    def _check_disks(self) -> None:
        inst, store = self.instance, self.master.store
        cluster = store.cluster
        pnode_uuid = self.new_inst.primary_node
        disks: list[Disk] = [msgspec.structs.replace(d, params=dict(d.params))
                             for d in self.disks()]
        self.instance_disks = list(disks)
        template = inst.disk_template
        self.added_disks: list[Disk] = []
        self.modified_disks: list[Disk] = []
        self.removed_disks: list[tuple[int, Disk]] = []
        for action, ident, values in self.disk_mods:
            if action == "add":
                index = _add_index("disk", ident, len(disks))
                dev_type = values.get("dev_type") or template
                if template == "diskless":
                    if dev_type == "diskless":
                        raise ParameterError(
                            f"instance {inst.name} is diskless: give the new disk's dev_type "
                            f"({', '.join(sorted(FILE_TEMPLATES))})"
                        )
                    template = dev_type
                elif dev_type != template:
                    raise ParameterError(f"instance {inst.name} has {template} disks; a "
                                         f"{dev_type} disk cannot be added")
                addable = sorted(CREATABLE_TEMPLATES & (FILE_TEMPLATES | {"rbd", "ext"}))
                if dev_type not in addable:
                    raise ParameterError(f"disk type {dev_type!r} is not supported; valid: "
                                         f"{', '.join(addable)}")
                unknown = sorted(set(values) - _DISK_KEYS - _ADD_KEYS)
                if unknown and dev_type != "ext":
                    raise UnknownParameterError(
                        f"unknown or unsupported disk parameter(s) {', '.join(unknown)}; "
                        f"valid ones: {', '.join(sorted(_DISK_KEYS | _ADD_KEYS))} (other "
                        "keys are ExtStorage provider parameters, for ext disks)")
                extra = {k: v for k, v in values.items()
                         if k not in ("size", "mode", "name", "dev_type")}
                disk_params = external_params(dev_type, extra, f"disk {index}")
                if dev_type in ACCESS_TEMPLATES:
                    group = store.get("nodegroup", store.get("node", pnode_uuid).group)
                    check_access(inst.hypervisor, dev_type, disk_params.get(
                        "access", fill_diskparams(store, dev_type, {}, group)["access"]))
                if dev_type not in cluster.enabled_disk_templates:
                    raise OpPrereqError(f"disk template {dev_type} is not enabled in the "
                                        "cluster (gnt-cluster modify --enabled-disk-templates)")
                if "size" not in values:
                    raise ParameterError("a new disk needs a size (size=SIZE, e.g. 10G)")
                size = params.parse_size(values["size"])
                if size <= 0:
                    raise ParameterError("a new disk's size must be positive")
                mode = values.get("mode", "rw")
                if mode not in ("rw", "ro"):
                    raise ParameterError(f"invalid disk mode {mode!r}; valid: rw, ro")
                disk = Disk(name=_none_word(values.get("name")), dev_type=dev_type, size=size,
                            mode=mode, nodes=[pnode_uuid], params=disk_params)
                directory = storage_dir(store, inst, dev_type) \
                    if dev_type in FILE_TEMPLATES else ""
                disk.logical_id = new_logical_id(
                    dev_type, {"params": disk_params}, instance_uuid=inst.uuid,
                    disk_uuid=disk.uuid, index=index, storage_dir=directory)
                disks.insert(index, disk)
                self.added_disks.append(disk)
                self.changes.append([f"disk/{index}", f"add:size={size},mode={mode}"])
                self._hot("hotadd", "disk", disk.uuid, f"disk/{index}")
            elif action == "remove":
                index = _find_index("disk", ident, disks)
                disk = disks.pop(index)
                if disk in self.added_disks:
                    self.added_disks.remove(disk)
                    self._unhot(disk.uuid)
                else:
                    self.removed_disks.append((index, disk))
                self.changes.append([f"disk/{index}", "remove"])
                if disk in self.instance_disks:
                    self._hot("hotremove", "disk", disk.uuid, f"disk/{index}")
            else:
                index = _find_index("disk", ident, disks)
                disk = disks[index]
                if "size" in values:
                    raise ParameterError("a disk's size cannot be modified: use "
                                         "'gnt-instance grow-disk'")
                if "dev_type" in values:
                    raise ParameterError("a disk's type cannot be modified")
                if "mode" in values:
                    if values["mode"] not in ("rw", "ro"):
                        raise ParameterError(f"invalid disk mode {values['mode']!r}; valid: "
                                             "rw, ro")
                    disk.mode = values["mode"]
                    self.changes.append([f"disk.mode/{index}", disk.mode])
                if "name" in values:
                    disk.name = _none_word(values["name"])
                    self.changes.append([f"disk.name/{index}", disk.name])
                if disk not in self.added_disks and disk not in self.modified_disks:
                    self.modified_disks.append(disk)
        if len(disks) > MAX_DISKS:
            raise OpPrereqError(f"instance {inst.name} would have {len(disks)} disks; at "
                                f"most {MAX_DISKS} are possible")
        names = [d.name for d in disks if d.name]
        for name in names:
            if names.count(name) > 1:
                raise AlreadyExistsError(f"two disks of instance {inst.name} would be "
                                         f"named {name!r}")
            found = store.find("disk", name)
            if found is not None and found.uuid not in {d.uuid for d in disks}:
                raise AlreadyExistsError(f"disk name {name!r} is already used by another "
                                         "disk")
        for index, disk in enumerate(disks):
            if disk.iv_name != f"disk/{index}":
                disk.iv_name = f"disk/{index}"
                if disk not in self.added_disks and disk not in self.modified_disks:
                    self.modified_disks.append(disk)
        if self.disk_mods and not disks:
            if self.removed_disks and not self.op.allow_diskless:
                raise OpPrereqError(
                    f"removing disk(s) {', '.join(str(i) for i, _d in self.removed_disks)} "
                    f"would leave instance {inst.name} without disks; to make it diskless, "
                    "ask for it explicitly with --allow-diskless (RAPI/opcode: "
                    "allow_diskless=true)")
            template = "diskless"
        self.new_inst.disks = [d.uuid for d in disks]
        self.new_inst.disk_template = template
        self.new_disks = disks

    def _check_nics(self) -> None:
        inst, store = self.instance, self.master.store
        if not self.nic_mods:
            return
        cluster = store.cluster
        group = store.get("nodegroup", self.primary.group)
        defaults = fill_params(cluster.nicparams.get("default", {}), group.nicparams)
        nics = self.new_inst.nics
        other_macs: dict[str, str] = {}
        other_ips: dict[str, str] = {}
        for other in store.all("instance"):
            if other.uuid == inst.uuid:
                continue
            for nic in other.nics:
                other_macs[nic.mac.lower()] = other.name
                if nic.ip:
                    other_ips[nic.ip] = other.name
        running = {nic.uuid for nic in inst.nics}
        nets = nicnet.NicNetworks(store, group, self.primary.name, self.feedback,
                           instance_uuid=inst.uuid, conflicts_check=self.op.conflicts_check)
        for nic in nics:
            if nic.network and nic.ip:
                nets.taken.setdefault(nic.network, set()).add(nic.ip)
        for action, ident, values in self.nic_mods:
            if action == "remove":
                index = _find_index("NIC", ident, nics)
                removed = nics.pop(index)
                self.changes.append([f"NIC/{index}", "remove"])
                self._unhot(removed.uuid)
                if removed.uuid in running:
                    self._hot("hotremove", "nic", removed.uuid, f"NIC/{index}")
                continue
            overrides = self._nic_overrides(values)
            if action == "add":
                index = _add_index("NIC", ident, len(nics))
                nic = NIC(name=_none_word(values.get("name")),
                          nicparams=params.update_params({}, overrides))
                nicnet.change_nic(nets, nic, index, {**values, "ip": values.get("ip")})
                nic.mac = check_mac(values.get("mac"))
                nics.insert(index, nic)
                filled = fill_params(defaults, nic.nicparams)
                self._check_routed(nic, filled, index)
                net = store.find("network", nic.network) if nic.network else None
                if not nic.mac:
                    used = set(other_macs) | {n.mac for n in nics if n.mac}
                    prefix = (net.mac_prefix if net else None) or cluster.mac_prefix
                    nic.mac = generate_mac(prefix, used)
                self.changes.append([
                    f"nic.{index}", f"add:mac={nic.mac},ip={nic.ip},mode={filled['mode']},"
                    f"link={filled['link']},network={net.name if net else None}",
                ])
                self._hot("hotadd", "nic", nic.uuid, f"nic.{index}")
                continue
            index = _find_index("NIC", ident, nics)
            nic = nics[index]
            if "mac" in values:
                mac = values["mac"]
                if mac == "generate":
                    used = set(other_macs) | {n.mac for n in nics}
                    nic.mac = generate_mac(cluster.mac_prefix, used)
                else:
                    nic.mac = check_mac(mac, f"NIC {index}")
                    if not nic.mac:
                        raise ParameterError(f"NIC {index}: {mac!r} is not a MAC address to "
                                             "change to; give an address or 'generate'")
                self.changes.append([f"nic.mac/{index}", nic.mac])
            if "ip" in values or "network" in values:
                self.changes.extend(nicnet.change_nic(nets, nic, index, values))
            if "name" in values:
                nic.name = _none_word(values["name"])
                self.changes.append([f"nic.name/{index}", nic.name])
            if overrides:
                nic.nicparams = params.update_params(nic.nicparams, overrides)
            filled = fill_params(defaults, nic.nicparams)
            self._check_routed(nic, filled, index)
            if overrides:
                self.changes.extend([f"nic.{k}/{index}", v] for k, v in sorted(filled.items()))
            if nic.uuid in running and not any(s.uuid == nic.uuid for s in self.hot_steps):
                self._hot("hotmod", "nic", nic.uuid, f"nic/{index}")
        if len(nics) > MAX_NICS:
            raise OpPrereqError(f"instance {inst.name} would have {len(nics)} NICs; at most "
                                f"{MAX_NICS} are possible")
        seen_macs: set[str] = set()
        seen_ips: set[str] = set()
        names: set[str] = set()
        for nic in nics:
            mac = nic.mac.lower()
            if mac in other_macs or mac in seen_macs:
                owner = other_macs.get(mac, inst.name)
                raise AlreadyExistsError(f"MAC address {mac} is already used by instance "
                                         f"{owner}")
            seen_macs.add(mac)
            if nic.ip and self.op.conflicts_check:
                if nic.ip in other_ips or nic.ip in seen_ips:
                    owner = other_ips.get(nic.ip, inst.name)
                    raise AlreadyExistsError(f"IP address {nic.ip} is already used by "
                                             f"instance {owner}")
                seen_ips.add(nic.ip)
            if nic.name:
                if nic.name in names:
                    raise AlreadyExistsError(f"two NICs of instance {inst.name} would be "
                                             f"named {nic.name!r}")
                names.add(nic.name)

    def _hot(self, action: HotplugAction, target: HotplugTarget, uuid: str, key: str) -> None:
        """Record a hotplug step whose result entry follows the changes so far."""
        self.hot_steps.append(HotplugStep(action=action, target=target, uuid=uuid, key=key,
                                          position=len(self.changes)))

    def _unhot(self, uuid: str) -> None:
        """A device added (or changed) earlier in this request is removed again."""
        self.hot_steps = [s for s in self.hot_steps if s.uuid != uuid]

    def _new_spec(self) -> InstanceSpec:
        """The instance spec as it will be after the change (new disks included)."""
        store = self.master.store
        spec = self.instance_spec()
        group = store.get("nodegroup", self.primary.group)
        defaults = fill_params(store.cluster.nicparams.get("default", {}), group.nicparams)
        spec.disks = [self.disk_spec(d, i) for i, d in enumerate(self.new_disks)]
        spec.nics = [nic_spec(n, i, defaults) for i, n in enumerate(self.new_inst.nics)]
        return spec

    @staticmethod
    def _nic_overrides(values: dict[str, Any]) -> dict[str, Any]:
        raw: dict[str, Any] = {k: values[k] for k in ("mode", "link", "vlan") if k in values}
        if "bridge" in values:
            if "link" in values and values["link"] != values["bridge"]:
                raise ParameterError("give either link or bridge (its older name), not both")
            raw["link"] = values["bridge"]
        return params.validate_params("NIC", params.NIC_PARAMS, raw, instance_level=True)

    def _check_routed(self, nic: NIC, filled: dict[str, Any], index: int) -> None:
        if filled.get("mode") == "routed" and not nic.ip:
            raise ParameterError(f"NIC {index} is routed and therefore needs an IP address "
                                 "(ip=ADDRESS)")

    # -- execution ------------------------------------------------------------------
    def _search_path(self) -> list[str]:
        cluster = self.master.store.cluster
        return list(cluster.os_search_path or Paths.DEFAULT_OS_SEARCH_PATH)

    async def _live_checks(self) -> None:
        inst, op = self.instance, self.op
        primary = self.primary
        self.hotplug = False
        if op.hotplug or op.hotplug_if_possible:
            self.hotplug = await check_hotplug(self, primary, self.spec(),
                                               required=op.hotplug)
        must_be_down = (bool(self.removed_disks) and not self.hotplug) \
            or op.offline is not None
        if self.new_pnode is not None and not op.force:
            try:
                running = is_running(await self.instance_info(primary))
            except CorralError as err:
                self.feedback(f" - WARNING: cannot tell whether instance {inst.name} still runs: "
                              f"{err.message}")
                running = False
            if running:
                raise OpPrereqError(f"instance {inst.name} is still running on node "
                                    f"{primary.name}: stop it first (or force)")
        if must_be_down and not primary.offline \
                and is_running(await self.instance_info(primary)):
            what = ("remove disks of it (or hot-remove them with --hotplug)"
                    if self.removed_disks else "change the state of it")
            raise OpPrereqError(f"instance {inst.name} is running on node {primary.name}: "
                                f"stop it first to {what}")
        if self.new_maxmem is not None and not op.force:
            group = self.master.store.get("node", self.new_inst.primary_node).group
            await check_memory_fits_group(self, group, inst.hypervisor, self.new_maxmem)
        if self.op.hvparams:
            store = self.master.store
            await check_hv_on_nodes(
                self.master, [store.get("node", self.new_inst.primary_node)], inst.hypervisor,
                fill_hvparams(store, self.new_inst))
        if self.added_disks:
            indexes = {uuid: i for i, uuid in enumerate(self.new_inst.disks)}
            await check_file_space(
                self, self.master.store.get("node", self.new_inst.primary_node),
                inst.hypervisor, inst.name,
                [(indexes[d.uuid], d) for d in self.added_disks], forced=op.force,
                override="--force (RAPI/opcode: force=true)")
        os_changed = self.new_inst.os != inst.os
        if (os_changed or op.osparams) and not op.force:
            pnode = self.master.store.get("node", self.new_inst.primary_node)
            name = self.new_inst.os
            checked = split_os_name(name)[0] if op.force_variant else name
            if os_changed:
                info = await self.call_one(pnode, "os_get",
                                           {"name": checked, "search_path": self._search_path()},
                                           f"looking up OS {name}")
                variants = info.get("variants") if isinstance(info, dict) else None
                check_variant(name, list(variants or []), op.force_variant)
            await self.call_one(
                pnode, "os_validate",
                {"name": name,
                 "osparams": fill_osparams(self.master.store, name, self.new_inst.osparams),
                 "search_path": self._search_path(), "force_variant": op.force_variant},
                f"validating the OS parameters of instance {inst.name}",
            )

    async def execute(self) -> list[list[Any]] | None:
        """Check on the nodes, create new disks, hot-plug, commit, remove old disk
        files."""
        await self._live_checks()
        if self.op.dry_run:
            return self.changes
        pnode = self.master.store.get("node", self.new_inst.primary_node)
        inst_name = self.instance.name
        indexes = {uuid: i for i, uuid in enumerate(self.new_inst.disks)}
        created: list[dict[str, Any]] = []
        hot: HotplugRun | None = None
        if self.hotplug and self.hot_steps:
            resolve(self.hot_steps, self.instance_spec(), self._new_spec())
            hot = HotplugRun(self, self.primary, self.spec())
        try:
            for disk in self.added_disks:
                spec = msgspec.to_builtins(self.disk_spec(disk, indexes[disk.uuid], pnode))
                await self.call_one(pnode, "blockdev_create",
                                    {"disk": spec, "info": instance_info_text(inst_name)},
                                    f"creating disk {indexes[disk.uuid]} of instance "
                                    f"{self.instance.name}")
                created.append(spec)
            if hot is not None:
                await hot.apply(self.hot_steps)
            await self._commit()
        except BaseException:
            if hot is not None:
                await hot.undo()
            for spec in created:
                await self.try_call(pnode, "blockdev_remove", {"disk": spec},
                                    f"removing new disk {spec['index']} again")
            raise
        for index, disk in self.removed_disks:
            await self.try_call(self.primary, "blockdev_remove",
                                {"disk": msgspec.to_builtins(self.disk_spec(disk, index))},
                                f"removing the file of disk {index} (now removed from the "
                                f"configuration)")
        if hot is not None:
            return insert_results(self.changes, self.hot_steps)
        return self.changes

    async def _commit(self) -> None:
        new, store = self.new_inst, self.master.store
        async with store.transaction() as txn:
            inst = txn.get("instance", new.uuid)
            # --offline/--online change the status; other changes keep the reason of
            # the last status change (seed 001).
            status_change = inst.admin_state != new.admin_state
            for name in ("primary_node", "os", "hvparams", "beparams", "osparams",
                         "admin_state", "disk_template", "disks", "nics", "member_of",
                         "required_traits", "forbidden_traits"):
                setattr(inst, name, getattr(new, name))
            if status_change:
                inst.last_reason = [list(entry) for entry in self.op.reason]
            for disk in self.added_disks:
                txn.add(disk)
            for disk in self.modified_disks:
                txn.update(disk)
            if self.new_pnode is not None:
                old_uuid = self.instance.primary_node
                for uuid in inst.disks:
                    disk = txn.get("disk", uuid)
                    disk.nodes = [new.primary_node if n == old_uuid else n for n in disk.nodes]
                    txn.update(disk)
            txn.update(inst)
            for _index, disk in self.removed_disks:
                txn.remove("disk", disk.uuid)
        self.instance = store.get("instance", new.uuid)


# -- console ----------------------------------------------------------------------------

_NOT_RUNNING_STATE = {"up": "ERROR_down", "down": "ADMIN_down", "offline": "ADMIN_offline"}


class LUInstanceConsole(InstanceLU[OpInstanceConsole]):
    """How to reach the console of a running instance."""

    OP_ID = "OP_INSTANCE_CONSOLE"
    SHARED_INSTANCE = True
    LOCK_NODES = False

    def check_prereq(self) -> None:
        """The primary node is online."""
        super().check_prereq()
        check_node_online(self.primary, f"reach the console of {self.instance.name}")

    async def execute(self) -> dict[str, Any]:
        """Ganeti's console dict from the primary node."""
        inst, primary = self.instance, self.primary
        if not is_running(await self.instance_info(primary)):
            state = _NOT_RUNNING_STATE.get(inst.admin_state, inst.admin_state)
            raise OpPrereqError(f"instance {inst.name} is not running (state {state})")
        console: dict[str, Any] = await self.call_one(
            primary, "instance_console", {"instance": self.spec()},
            f"asking for the console of instance {inst.name}",
        )
        if console.get("kind") == "ssh":
            # As in Ganeti, an ssh console names the primary node and its ssh port
            # (node parameter ssh_port), which the master knows and the node does not.
            store = self.master.store
            group = store.get("nodegroup", primary.group)
            ndparams = fill_params(store.cluster.ndparams, group.ndparams, primary.ndparams)
            console["host"] = primary.name
            console["port"] = ndparams.get("ssh_port")
        return console


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (
    LUInstanceSetParams, LUInstanceActivateDisks, LUInstanceDeactivateDisks,
    LUInstanceGrowDisk, LUInstanceConsole, LUInstanceMigrate, LUInstanceFailover,
    LUInstanceMove,
)


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """This area answers no query resource of its own."""
    return {}
