"""The disks of an instance by template: their definitions, names and logical ids.

What differs between disk templates when disks are made lives here, one branch per
template, so that creating an instance, adding a disk and copying disks to another
node share it:

* :func:`parse_disks`: a request's disk definitions (Ganeti's ``size``, ``mode``,
  ``name``, ``spindles``, ``vg``, ``adopt``...), checked against what the template
  takes, with Ganeti's rules for adoption (all disks or none; ``blockdev`` must adopt,
  only ``plain`` and ``blockdev`` may);
* :func:`new_logical_id`: where a new disk's data goes (a file below the storage
  directory, an LV ``<disk uuid>.disk<index>`` in its volume group, the adopted
  device); an adopted LV is renamed to that name once the instance is created, as
  Ganeti does;
* :func:`logical_id_on_node`: the logical id of a copy of a disk on another node
  (move, live migration of local disks);
* :func:`check_space`: new disks fit on their node: file disks in their storage
  directory's file system, LVM disks in their volume group's allocatable free
  space (refused before anything is made, naming the node, the group and the
  space);
* :func:`check_adoption`: the volumes or devices to adopt exist on the node, are
  not in use and not another instance's, and give the disks their sizes;
* :func:`filled_disk_spec`: what the node needs of a disk, with the disk
  parameters (``stripes``, ``pool``, ``access``) filled from the cluster and the
  node's group;
* :func:`external_params` and :func:`check_access`: an ``ext`` disk's provider and
  its parameters, ``access`` of ``rbd`` and ``ext`` disks and which hypervisor may
  use ``userspace``.

Logical ids are Ganeti's: ``[driver, path]`` for files, ``[vg, lv]`` for ``plain``,
``["manual", path]`` for ``blockdev``, ``["rbd", image]`` for ``rbd`` and ``[provider,
volume]`` for ``ext`` (images and volumes named ``<disk uuid>.rbd.disk<index>`` and
``<disk uuid>.ext.disk<index>``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from corral.cmdlib.common import disk_node_spec
from corral.cmdlib.instance_base import RPC_QUICK, check_file_space, storage_dir
from corral.cmdlib.instance_query import MAX_DISKS
from corral.errors import OpPrereqError, ParameterError
from corral.objects.disk_templates import ADOPTABLE_BLOCKDEV_ROOT, BLOCKDEV_DRIVER, template
from corral.objects.params import DISK_ACCESS_MODES, DISK_PARAMS, defaults, fill_params, parse_size
from corral.objects.specs import DiskSpec
from corral.storage import file_logical_id
from corral.storage.rbd import RBD_DRIVER

if TYPE_CHECKING:
    from corral.cmdlib.base import LogicalUnit
    from corral.config import ConfigStore
    from corral.objects import Disk, Instance, Node, NodeGroup

__all__ = [
    "ACCESS_TEMPLATES",
    "CREATABLE_TEMPLATES",
    "DISK_KEYS",
    "METADATA_TEMPLATES",
    "RELEASED_TEMPLATES",
    "check_access",
    "check_access_in_use",
    "check_adoption",
    "check_space",
    "external_params",
    "filled_disk_spec",
    "logical_id_on_node",
    "lv_name",
    "new_logical_id",
    "parse_disks",
    "volume_name",
]

#: The disk templates new disks can be made of.
CREATABLE_TEMPLATES: frozenset[str] = frozenset({"diskless", "file", "sharedfile", "plain",
                                                 "blockdev", "rbd", "ext"})
#: Keys of a disk definition in a request (Ganeti's ``IDISK_PARAMS``).
DISK_KEYS = ("size", "mode", "name", "spindles", "adopt", "vg", "metavg", "provider",
             "access")
#: Keys corral does not take: refused when given (``metavg``: DRBD).
_NOT_TAKEN = ("metavg",)
#: Templates whose disks take ``access`` (Ganeti's ``DTS_HAVE_ACCESS`` less gluster).
ACCESS_TEMPLATES: frozenset[str] = frozenset({"rbd", "ext"})
#: Templates whose volumes keep metadata naming their instance (``blockdev_setinfo``
#: at creation and rename): ExtStorage volumes (``setinfo``), LVM volumes (tags).
METADATA_TEMPLATES: frozenset[str] = frozenset({"ext", "plain"})
#: Shared templates a node attaches to use them (rbd images it maps, ExtStorage volumes
#: it attaches): a node lets go of them when it no longer runs the instance.
RELEASED_TEMPLATES: frozenset[str] = frozenset({"rbd", "ext"})
#: What an ExtStorage provider parameter's name may be made of.
_EXT_PARAM_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def lv_name(disk_uuid: str, index: int) -> str:
    """The name of a new ``plain`` disk's logical volume: Ganeti's ``<unique
    id>.disk<index>``, the unique id being the disk's UUID."""
    return f"{disk_uuid}.disk{index}"


def _adoption(name: str, disks: list[dict[str, Any]]) -> bool:
    """Whether the disks are adopted, by Ganeti's rules; refuses a mix and what the
    template does not allow."""
    row = template(name)
    adopted = [bool(disk.get("adopt") not in (None, "")) for disk in disks
               if isinstance(disk, dict)]
    if any(adopted) and not all(adopted):
        raise ParameterError("Either all disks are adopted or none is")
    if adopted and adopted[0]:
        if row is None or row.adoption == "never":
            raise ParameterError(
                f"Disk adoption is not supported for the '{name}' disk template\n"
                "only the plain (existing logical volumes) and blockdev (existing block "
                "devices) templates adopt disks")
        return True
    if row is not None and row.adoption == "must" and disks:
        raise ParameterError(
            f"Disk template {name} requires disk adoption, but no 'adopt' parameter given\n"
            f"give each disk the device to adopt: adopt=/dev/disk/...")
    return False


def parse_disks(name: str, disks: list[dict[str, Any]], *, default_vg: str
                ) -> list[dict[str, Any]]:
    """Validated disk definitions of a new instance with template ``name``.

    Each is ``{"size": MiB or None (adopted: the volume's), "mode", "name",
    "spindles", "vg": volume group or None, "adopt": volume or device or None}``.
    ``default_vg`` is the cluster's volume group, the ``vg`` of LVM disks that name
    none.
    """
    if name == "diskless":
        if disks:
            raise ParameterError(f"disk template 'diskless' takes no disks; got {len(disks)}")
        return []
    if not disks:
        raise ParameterError(f"disk template {name!r} needs at least one disk, e.g. "
                             "disks=[{\"size\": \"1G\"}]")
    if len(disks) > MAX_DISKS:
        raise ParameterError(f"at most {MAX_DISKS} disks are allowed, got {len(disks)}")
    row = template(name)
    lvm = row is not None and row.lvm
    adopting = _adoption(name, disks)
    result: list[dict[str, Any]] = []
    names: set[str] = set()
    for index, disk in enumerate(disks):
        where = f"disk {index}"
        if not isinstance(disk, dict):
            raise ParameterError(f"{where}: expected an object with size, mode, name")
        unknown = sorted(set(disk) - set(DISK_KEYS))
        if unknown and name != "ext":
            raise ParameterError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: "
                                 f"{', '.join(DISK_KEYS)} (other keys are ExtStorage "
                                 "provider parameters, for the ext template)")
        for key in _NOT_TAKEN:
            if disk.get(key) not in (None, ""):
                raise ParameterError(f"{where}: {key!r} is not supported with the "
                                     f"{name!r} template")
        disk_params = external_params(name, disk, where)
        vg = disk.get("vg")
        if vg not in (None, "") and not lvm:
            raise ParameterError(f"{where}: 'vg' is only for disks in LVM (the plain "
                                 f"template), not {name!r}")
        if lvm:
            vg = vg or default_vg
            if not vg:
                raise OpPrereqError(
                    "the cluster has no LVM volume group: set one with 'gnt-cluster modify "
                    "--vg-name VG', or give each disk vg=VG")
            _check_lvm_name(str(vg), f"{where}: volume group")
        else:
            vg = None
        adopt = disk.get("adopt") if adopting else None
        size: int | None = None
        if adopting:
            if not isinstance(adopt, str):
                raise ParameterError(f"{where}: adopt must name the volume to adopt")
            if disk.get("size") not in (None, 0, "0"):
                raise ParameterError(f"Only one of 'size' and 'adopt' allowed (disk {index})")
            if disk.get("spindles") is not None:
                raise ParameterError("spindles is not a valid option when adopting a disk")
            if lvm:
                _check_lvm_name(adopt, f"{where}: logical volume to adopt")
        else:
            if disk.get("size") is None:
                raise ParameterError(f"{where}: the size is missing (e.g. size=10G)")
            size = parse_size(disk["size"])
            if size < 1:
                raise ParameterError(f"{where}: the size must be at least 1 MiB")
        mode = disk.get("mode") or "rw"
        if mode not in ("rw", "ro"):
            raise ParameterError(f"{where}: invalid mode {mode!r}; valid: rw, ro")
        disk_name = disk.get("name")
        if disk_name in ("", "none"):
            disk_name = None
        if disk_name is not None:
            if not isinstance(disk_name, str) or disk_name.isdigit():
                raise ParameterError(f"{where}: invalid name {disk_name!r} (a non-numeric "
                                     "string)")
            if disk_name in names:
                raise ParameterError(f"{where}: the name {disk_name!r} is used twice")
            names.add(disk_name)
        spindles = disk.get("spindles")
        if spindles is not None:
            try:
                spindles = int(spindles)
            except (TypeError, ValueError):
                raise ParameterError(f"{where}: spindles must be an integer, got "
                                     f"{spindles!r}") from None
        result.append({"size": size, "mode": mode, "name": disk_name,
                       "spindles": spindles, "vg": vg, "adopt": adopt,
                       "params": disk_params})
    if adopting:
        _check_unique_adoption(name, result)
    return result


def external_params(name: str, disk: dict[str, Any], where: str) -> dict[str, Any]:
    """The parameters a new disk of template ``name`` keeps (``Disk.params``): for
    ``ext`` its ``provider`` (required), ``access`` if given and every key that is
    not one of Ganeti's disk keys (a provider parameter, exported to its scripts as
    ``EXTP_<NAME>``); for ``rbd`` its ``access`` if given; nothing for the rest.

    ``provider`` is refused for other templates and missing for ``ext`` with Ganeti's
    words; ``access`` must be ``kernelspace`` or ``userspace`` and is only for the
    templates that have it.
    """
    provider = disk.get("provider")
    if provider not in (None, "") and name != "ext":
        raise ParameterError(f"The 'provider' option is only valid for the ext disk "
                             f"template, not {name}")
    access = disk.get("access")
    params: dict[str, Any] = {}
    if access not in (None, ""):
        if name not in ACCESS_TEMPLATES:
            raise ParameterError(f"{where}: 'access' is only for the "
                                 f"{' and '.join(sorted(ACCESS_TEMPLATES))} templates, "
                                 f"not {name}")
        if access not in DISK_ACCESS_MODES:
            raise ParameterError(f"{where}: invalid access {access!r}; valid: "
                                 f"{', '.join(DISK_ACCESS_MODES)}")
        params["access"] = access
    if name != "ext":
        return params
    if provider in (None, ""):
        raise ParameterError("Missing provider for template 'ext'")
    if not isinstance(provider, str) or "/" in provider or provider in (".", ".."):
        raise ParameterError(f"{where}: invalid provider {provider!r}: the name of an "
                             "ExtStorage provider's directory")
    params["provider"] = provider
    for key in sorted(set(disk) - set(DISK_KEYS)):
        value = disk[key]
        if not _EXT_PARAM_RE.match(key):
            raise ParameterError(f"{where}: invalid ExtStorage parameter name {key!r}: use "
                                 "letters, digits and '_.-'")
        if isinstance(value, dict | list) or value is None:
            raise ParameterError(f"{where}: ExtStorage parameter {key!r} needs a plain "
                                 f"value, got {value!r}")
        params[key] = value if isinstance(value, str) else str(value)
    return params


def check_access(hypervisor: str, template: str, access: str) -> None:
    """Refuse a disk ``access`` the instance's hypervisor cannot use (Ganeti's rule:
    ``userspace`` only with kvm, for the templates that have it)."""
    if access == "kernelspace" or (hypervisor == "kvm" and template in ACCESS_TEMPLATES
                                   and access == "userspace"):
        return
    raise OpPrereqError(f"Selected hypervisor ({hypervisor}) cannot be used with {access} "
                        "disk access param")


def check_access_in_use(store: ConfigStore, cluster_diskparams: dict[str, dict[str, Any]],
                        group: NodeGroup | None = None) -> None:
    """Refuse disk parameters (the cluster's ``cluster_diskparams``, or ``group`` with
    its new ones) that would give an instance's disks an ``access`` its hypervisor
    cannot use (``userspace`` for an rbd disk of a fake instance), in Ganeti's words,
    naming the instance. Disks that set ``access`` themselves keep it."""
    for inst in store.all("instance"):
        node_group = store.get("node", inst.primary_node).group
        if group is not None and node_group != group.uuid:
            continue
        own = group if group is not None else store.get("nodegroup", node_group)
        for uuid in inst.disks:
            disk = store.get("disk", uuid)
            if disk.dev_type not in ACCESS_TEMPLATES or "access" in disk.params:
                continue
            access = fill_params(defaults(DISK_PARAMS[disk.dev_type]),
                                 cluster_diskparams.get(disk.dev_type),
                                 own.diskparams.get(disk.dev_type))["access"]
            try:
                check_access(inst.hypervisor, disk.dev_type, access)
            except OpPrereqError:
                raise OpPrereqError(
                    f"Instance {inst.name}: cannot use '{access}' access setting with "
                    f"{inst.hypervisor} hypervisor and {disk.dev_type} disk type.") from None


def volume_name(template: str, disk_uuid: str, index: int) -> str:
    """The name of a new ``rbd`` image or ``ext`` volume: Ganeti's ``<unique
    id>.rbd.disk<index>`` / ``<unique id>.ext.disk<index>``, the unique id being the
    disk's UUID."""
    return f"{disk_uuid}.{template}.disk{index}"


def _check_unique_adoption(name: str, disks: list[dict[str, Any]]) -> None:
    if name == "blockdev":
        paths = [os.path.abspath(d["adopt"]) for d in disks]
        if len(set(paths)) != len(paths):
            raise ParameterError("Duplicate disk names given for adoption")
        for disk, path in zip(disks, paths, strict=True):
            disk["adopt"] = path
    else:
        volumes = [f"{d['vg']}/{d['adopt']}" for d in disks]
        if len(set(volumes)) != len(volumes):
            raise ParameterError("Duplicate volume names given for adoption")


#: Characters LVM allows in volume group and logical volume names (lvm(8)).
_LVM_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+_.-")


def _check_lvm_name(value: str, what: str) -> None:
    """Refuse a name LVM would refuse (lvm(8)'s rules for VG and LV names)."""
    bad = (not value or value in (".", "..") or value.startswith("-")
           or not set(value) <= _LVM_CHARS or len(value) > 127
           or any(part in value for part in ("_mlog", "_mimage", "_rimage", "_tdata",
                                              "_tmeta", "_pmspare", "_vorigin")))
    if bad:
        raise ParameterError(
            f"{what} {value!r} is not a valid LVM name: use letters, digits and "
            "'+_.-', not starting with '-' (at most 127 characters)")


def new_logical_id(name: str, disk: dict[str, Any], *, instance_uuid: str,
                   disk_uuid: str, index: int, storage_dir: str) -> list[str]:
    """The logical id of a new disk of template ``name`` defined by ``disk`` (one of
    :func:`parse_disks`'s results); ``storage_dir`` is the directory of file disks."""
    if name in ("file", "sharedfile"):
        return file_logical_id(storage_dir, instance_uuid, disk_uuid, index)
    if name == "plain":
        return [str(disk["vg"]), lv_name(disk_uuid, index)]
    if name == "blockdev":
        return [BLOCKDEV_DRIVER, str(disk["adopt"])]
    if name == "rbd":
        return [RBD_DRIVER, volume_name(name, disk_uuid, index)]
    if name == "ext":
        return [str(disk["params"]["provider"]), volume_name(name, disk_uuid, index)]
    raise OpPrereqError(f"disks of template {name!r} cannot be created by corral")


def logical_id_on_node(store: ConfigStore, instance: Instance, disk: Disk,
                       index: int) -> list[str]:
    """The logical id a copy of ``disk`` gets on another node (the target of a move
    or of a live migration that takes local disks along)."""
    if disk.dev_type in ("file", "sharedfile"):
        directory = storage_dir(store, instance, disk.dev_type)
        return file_logical_id(directory, instance.uuid, disk.uuid, index)
    return list(disk.logical_id)


# -- what a node needs -------------------------------------------------------------


def filled_disk_spec(store: ConfigStore, disk: Disk, index: int, node: Node) -> DiskSpec:
    """``disk`` as ``node`` needs it, with its template's disk parameters filled
    (built-in defaults, cluster, the node's group, the disk's own) and, for ``ext``,
    the cluster's ExtStorage search path: :func:`corral.cmdlib.common.disk_node_spec`."""
    return disk_node_spec(store, disk, index, node)


# -- space -------------------------------------------------------------------------


async def check_space(lu: LogicalUnit[Any], node: Node, hypervisor: str, instance_name: str,
                      new_disks: Sequence[tuple[int, Disk]], *, forced: bool,
                      override: str) -> None:
    """Refuse new disks that do not fit on ``node``: file disks against their
    directory's free space (``forced`` makes that a warning, as the files are
    sparse: see :func:`~corral.cmdlib.instance_base.check_file_space`), LVM disks
    against their volume group's allocatable free space (never forced: an LV takes
    all its space at once)."""
    await check_file_space(lu, node, hypervisor, instance_name, new_disks, forced=forced,
                           override=override)
    wanted: dict[str, int] = {}
    for _index, disk in new_disks:
        row = template(disk.dev_type)
        if row is not None and row.lvm and len(disk.logical_id) == 2:
            wanted[disk.logical_id[0]] = wanted.get(disk.logical_id[0], 0) + disk.size
    if wanted:
        await check_vg_space(lu, node, wanted)


async def check_vg_space(lu: LogicalUnit[Any], node: Node, wanted: dict[str, int]) -> None:
    """Refuse when a volume group of ``wanted`` (name: MiB) does not exist on ``node``
    (listing those that do) or has less allocatable free space (Ganeti's words)."""
    results = await lu.master.rpc.call(
        [node], "node_info", {"volume_groups": sorted(wanted)}, timeout=RPC_QUICK)
    info = results[node.name].get("asking for the free space of its volume groups")
    lvm = info.get("lvm") if isinstance(info, dict) else None
    if not isinstance(lvm, dict) or "vgs" not in lvm:
        why = lvm.get("error") if isinstance(lvm, dict) else None
        raise OpPrereqError(f"Can't retrieve storage information for LVM\nnode {node.name} "
                            f"could not list its volume groups: {why or 'no answer'}",
                            ecode="environment_error")
    groups: dict[str, Any] = lvm["vgs"]
    for vg, needed in sorted(wanted.items()):
        group = groups.get(vg)
        if not isinstance(group, dict):
            known = ", ".join(sorted(groups)) or "none"
            raise OpPrereqError(
                f"Can't compute free disk space on node {node.name} for vg {vg}, result was "
                f"'None'\nvolume group {vg} does not exist on node {node.name}; its volume "
                f"groups: {known}", ecode="environment_error")
        free = int(group.get("allocatable_free", 0))
        if needed > free:
            raise OpPrereqError(
                f"Not enough disk space on target node {node.name} vg {vg}: required "
                f"{needed} MiB, available {free} MiB", ecode="insufficient_resources")


# -- adoption ----------------------------------------------------------------------


async def check_adoption(lu: LogicalUnit[Any], node: Node, name: str,
                         disks: list[dict[str, Any]]) -> None:
    """Check the volumes (``plain``) or devices (``blockdev``) that ``disks`` adopt on
    ``node`` (Ganeti's checks and words) and give each disk its volume's size."""
    store = lu.master.store
    if name == "plain":
        volumes = [f"{d['vg']}/{d['adopt']}" for d in disks]
        used = {f"{disk.logical_id[0]}/{disk.logical_id[1]}"
                for disk in store.all("disk")
                if disk.dev_type == "plain" and len(disk.logical_id) == 2}
        for volume in volumes:
            if volume in used:
                raise OpPrereqError(f"LV named {volume} used by another instance",
                                    ecode="already_exists")
        results = await lu.master.rpc.call(
            [node], "lv_list", {"volume_groups": sorted({d["vg"] for d in disks})},
            timeout=RPC_QUICK)
        found = results[node.name].get(f"Cannot get LV information from node {node.name}")
        missing = [v for v in volumes if v not in found]
        if missing:
            raise OpPrereqError(f"Missing logical volume(s): {', '.join(missing)}",
                                ecode="wrong_input")
        online = [v for v in volumes if found[v][2]]
        if online:
            raise OpPrereqError(f"Online logical volumes found, cannot adopt: "
                                f"{', '.join(online)}", ecode="wrong_state")
        for disk, volume in zip(disks, volumes, strict=True):
            disk["size"] = int(found[volume][0])
        return
    if name == "blockdev":
        paths = [d["adopt"] for d in disks]
        outside = [p for p in paths if not p.startswith(ADOPTABLE_BLOCKDEV_ROOT)]
        if outside:
            raise ParameterError(f"Device node(s) {', '.join(outside)} lie outside "
                                 f"{ADOPTABLE_BLOCKDEV_ROOT} and cannot be adopted")
        used = {disk.logical_id[1] for disk in store.all("disk")
                if disk.dev_type == "blockdev" and len(disk.logical_id) == 2}
        taken = [p for p in paths if p in used]
        if taken:
            raise OpPrereqError(f"block device(s) {', '.join(taken)} already adopted by "
                                "another instance", ecode="already_exists")
        results = await lu.master.rpc.call([node], "bdev_sizes", {"devices": paths},
                                           timeout=RPC_QUICK)
        sizes = results[node.name].get(
            f"Cannot get block device information from node {node.name}")
        missing = [p for p in paths if p not in sizes]
        if missing:
            raise ParameterError(f"Missing block device(s): {', '.join(missing)}")
        for disk, path in zip(disks, paths, strict=True):
            disk["size"] = int(sizes[path])
        return
    raise ParameterError(f"Disk adoption is not supported for the '{name}' disk template")
