"""Hot-plugging disks and NICs of a running kvm guest over QMP.

The devices have the ids every qemu command line of corral gives them
(:func:`~corral.hypervisor.kvm.cmdline.disk_device_id`,
:func:`~corral.hypervisor.kvm.netdev.nic_device_id`: ``disk-<uuid8>`` on block node
``disk-<uuid8>-drive``, ``nic-<uuid8>`` on netdev ``nic-<uuid8>-net``), so a device
present at start is removed the same way as a hot-added one.

* Disk add: the node-local file opened here and handed to qemu (``add-fd``),
  ``blockdev-add`` (raw over ``/dev/fdset/N``, with the instance's cache, aio and discard
  settings) then ``device_add`` ``virtio-blk-pci``.
* NIC add: a tap made and configured by :mod:`.netdev` (bridge or route, or the
  administrator's hook), opened here and handed to qemu over the monitor socket
  (``getfd``), ``netdev_add`` on that descriptor, ``device_add`` with the NIC's MAC and
  model. qemu may run as another user or chrooted (:mod:`.security`), where it could
  open neither the disk's file nor ``/dev/net/tun`` itself; passing descriptors works
  either way.
* Remove: ``device_del``, then waiting for qemu's ``DEVICE_DELETED`` event, which
  comes once the guest has released the device (ACPI PCI hot-unplug); a guest that
  does not within :data:`RELEASE_TIMEOUT` fails the call. Then ``blockdev-del`` or
  ``netdev_del`` and the tap's removal.
* Change (a NIC's): remove, then add with the new parameters (Ganeti does the same).

A plugged device takes the lowest PCI slot that neither the runtime record nor qemu
gives to another device (``addr``), recorded with it; a hot-added NIC is recorded as
plugged without an option ROM. A migration's target lays its qemu out the same way
(see :mod:`.cmdline`): qemu takes a guest only from a machine with the same devices
in the same slots.

Each step is idempotent against a lost answer: adding a device qemu already has, or
removing one it no longer has, only brings the runtime record up to date. A failed
add takes back what it did. The runtime record (spec, disk paths, taps) follows every
change, so a soft reboot, a noded restart or a migration sees the devices that run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
import struct
from typing import Any, Final

import msgspec
from qemu.qmp import EventListener, QMPClient, QMPError

from corral.errors import HypervisorError
from corral.hypervisor.base import HotplugAction, HotplugTarget
from corral.hypervisor.kvm import netdev
from corral.hypervisor.kvm.cmdline import disk_device_id, free_pci_slot, pci_addr
from corral.hypervisor.kvm.monitor import ExecuteError, monitor
from corral.hypervisor.kvm.runtime import InstanceRuntime, RuntimeRecord
from corral.hypervisor.kvm.uris import is_uri, protocol_node
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec

__all__ = ["HOTPLUG_DISK_TYPES", "RELEASE_TIMEOUT", "hotplug_device", "hotplug_supported",
           "pci_slots", "present_devices"]

#: How long the guest may take to release a device after ``device_del``, in seconds.
RELEASE_TIMEOUT: Final = 30.0

#: The ``disk_type`` values whose disks can be hot-plugged, and their qemu device.
HOTPLUG_DISK_TYPES: Final[dict[str, str]] = {"paravirtual": "virtio-blk-pci"}

#: NIC models that sit on the PCI bus (``ne2k_isa`` does not: it cannot be hot-plugged).
_PCI_NIC_MODELS: Final = frozenset(m for m in netdev.NIC_MODELS.values() if m != "ne2k_isa")

# linux/if_tun.h
_TUNSETIFF: Final = 0x400454CA
_IFF_TAP: Final = 0x0002
_IFF_NO_PI: Final = 0x1000
_IFF_VNET_HDR: Final = 0x4000


def _refused(err: ExecuteError) -> str:
    return str(err.error.error.desc)


async def present_devices(qmp: QMPClient) -> set[str]:
    """The ids of the devices plugged into ``qmp``'s qemu (``-device`` ids)."""
    children = await qmp.execute("qom-list", {"path": "/machine/peripheral"})
    if not isinstance(children, list):
        return set()
    return {str(child["name"]) for child in children
            if isinstance(child, dict) and str(child.get("type", "")).startswith("child<")}


async def pci_slots(qmp: QMPClient) -> dict[str, int]:
    """The slots of the devices on qemu's first PCI bus, by device id (``query-pci``);
    devices without an id are listed under ``slot-N``."""
    buses = await qmp.execute("query-pci")
    slots: dict[str, int] = {}
    for bus in buses if isinstance(buses, list) else []:
        if not isinstance(bus, dict) or bus.get("bus") != 0:
            continue
        for device in bus.get("devices") or []:
            if isinstance(device, dict) and isinstance(device.get("slot"), int):
                ident = str(device.get("qdev_id") or f"slot-{device['slot']}")
                slots[ident] = device["slot"]
    return slots


async def _place(qmp: QMPClient, record: RuntimeRecord, ident: str) -> int:
    """The PCI slot for device ``ident`` about to be plugged: the lowest that neither the
    runtime record nor qemu has given to another device."""
    taken = {slot for other, slot in record.pci_slots.items() if other != ident}
    taken |= {slot for other, slot in (await pci_slots(qmp)).items() if other != ident}
    return free_pci_slot(taken, record.name)


async def _note_slot(qmp: QMPClient, record: RuntimeRecord, ident: str) -> None:
    """Record where qemu has ``ident`` (plugged by an earlier call whose answer was
    lost)."""
    slot = (await pci_slots(qmp)).get(ident)
    if slot is not None:
        record.pci_slots[ident] = slot


async def hotplug_supported(runtime: InstanceRuntime) -> None:
    """Refuse unless the instance's qemu runs here and its monitor answers."""
    record = await asyncio.to_thread(runtime.read)
    if record is None or not runtime.live_pid(record):
        raise HypervisorError(f"instance {runtime.name} is not running on this node")
    try:
        async with monitor(runtime.qmp_socket) as qmp:
            await present_devices(qmp)
    except HypervisorError as err:
        raise HypervisorError(f"instance {runtime.name}'s qemu does not answer: "
                              f"{err.message}") from None
    except (QMPError, OSError, EOFError) as err:
        raise HypervisorError(f"instance {runtime.name}'s qemu does not answer: "
                              f"{err or type(err).__name__}") from None


async def hotplug_device(runtime: InstanceRuntime, spec: InstanceSpec,
                         action: HotplugAction, target: HotplugTarget,
                         device: DiskSpec | NicSpec, disk_path: str | None) -> None:
    """Run one hotplug step on the instance's qemu (see the module's docstring)."""
    async with runtime.alock():
        record = await asyncio.to_thread(runtime.read)
        if record is None or not runtime.live_pid(record):
            raise HypervisorError(f"cannot hot-plug into instance {spec.name}: it is not "
                                  "running on this node")
        try:
            async with monitor(runtime.qmp_socket) as qmp:
                if target == "disk" and isinstance(device, DiskSpec):
                    await _disk(qmp, runtime, record, action, device, disk_path)
                elif target == "nic" and isinstance(device, NicSpec):
                    await _nic(qmp, runtime, record, action, device)
                else:
                    raise HypervisorError(f"hotplug target {target} does not match the "
                                          f"device given ({type(device).__name__})")
        except ExecuteError as err:
            raise HypervisorError(f"instance {spec.name}: qemu refused: {_refused(err)}"
                                  ) from None
        except (QMPError, OSError, EOFError) as err:
            raise HypervisorError(f"instance {spec.name}: lost the connection to qemu's "
                                  f"monitor: {err or type(err).__name__}") from None


# -- disks --------------------------------------------------------------------------------
async def _disk(qmp: QMPClient, runtime: InstanceRuntime, record: RuntimeRecord,
                action: HotplugAction, disk: DiskSpec, path: str | None) -> None:
    if action == "hotmod":
        raise HypervisorError(f"instance {record.name}: a disk cannot be changed by "
                              "hotplug, only added or removed")
    ident = disk_device_id(disk)
    present = ident in await present_devices(qmp)
    if action == "hotremove":
        if present:
            await _unplug(qmp, record.name, ident, f"disk/{disk.index}")
        with contextlib.suppress(ExecuteError):  # a node already gone
            await qmp.execute("blockdev-del", {"node-name": f"{ident}-drive"})
        _forget_disk(record, disk)
    else:
        if path is None:
            raise HypervisorError(f"instance {record.name}: no node-local path given for "
                                  f"the new disk/{disk.index}")
        if not present:
            await _plug_disk(qmp, record, ident, disk, path)
        else:
            await _note_slot(qmp, record, ident)
        _record_disk(record, disk, path)
    await asyncio.to_thread(runtime.write, record)


async def _plug_disk(qmp: QMPClient, record: RuntimeRecord, ident: str, disk: DiskSpec,
                     path: str) -> None:
    hvparams = record.spec.hvparams
    disk_type = str(hvparams.get("disk_type") or "paravirtual")
    model = HOTPLUG_DISK_TYPES.get(disk_type)
    if model is None:
        raise HypervisorError(
            f"instance {record.name}: disks of disk_type {disk_type} cannot be hot-plugged;"
            f" hot-pluggable: {', '.join(HOTPLUG_DISK_TYPES)}")
    fdset: int | None = None
    if is_uri(path):
        # qemu's own client opens it (access=userspace): no file to hand over.
        protocol = protocol_node(path, f"instance {record.name} disk/{disk.index}")
    else:
        is_block = await asyncio.to_thread(_is_block_device, path)
        fdset = await _pass_file(qmp, record.name, path, disk)
        protocol = {"driver": "host_device" if is_block else "file",
                    "filename": f"/dev/fdset/{fdset}"}
    node: dict[str, Any] = {
        "driver": "raw", "node-name": f"{ident}-drive", "read-only": disk.mode == "ro",
        "file": protocol,
    }
    cache = str(hvparams.get("disk_cache") or "default")
    if cache == "none":
        node["cache"] = {"direct": True}
    elif cache in ("writeback", "writethrough"):
        node["cache"] = {"direct": False}
    if str(hvparams.get("disk_aio") or "") == "native" and fdset is not None:
        node["file"]["aio"] = "native"
    discard = str(hvparams.get("disk_discard") or "")
    if discard in ("ignore", "unmap"):
        node["discard"] = discard
    slot = await _place(qmp, record, ident)
    dev: dict[str, Any] = {"driver": model, "id": ident, "drive": f"{ident}-drive",
                           "addr": pci_addr(slot)}
    if cache == "writethrough":
        dev["write-cache"] = "off"
    try:
        await qmp.execute("blockdev-add", node)
    except ExecuteError as err:
        raise HypervisorError(f"instance {record.name}: qemu cannot open the new "
                              f"disk/{disk.index} ({path}): {_refused(err)}") from None
    finally:
        # The block node holds its own copy of the descriptor.
        if fdset is not None:
            with contextlib.suppress(ExecuteError):
                await qmp.execute("remove-fd", {"fdset-id": fdset})
    try:
        await qmp.execute("device_add", dev)
    except ExecuteError as err:
        with contextlib.suppress(ExecuteError):
            await qmp.execute("blockdev-del", {"node-name": f"{ident}-drive"})
        raise HypervisorError(f"instance {record.name}: qemu refused to add disk/"
                              f"{disk.index}: {_refused(err)}") from None
    record.pci_slots[ident] = slot


async def _pass_file(qmp: QMPClient, name: str, path: str, disk: DiskSpec) -> int:
    """Open the disk's file here and hand it to qemu (``add-fd``); its fd set's id.

    qemu may run as another user or chrooted, where it cannot open the file itself.
    """
    flags = (os.O_RDONLY if disk.mode == "ro" else os.O_RDWR) | os.O_CLOEXEC
    try:
        fd = await asyncio.to_thread(os.open, path, flags)
    except OSError as err:
        raise HypervisorError(f"instance {name}: cannot open the new disk/{disk.index} "
                              f"({path}): {err.strerror}") from None
    try:
        qmp.send_fd_scm(fd)
        added = await qmp.execute("add-fd", {"opaque": f"{disk_device_id(disk)} {path}"})
    except ExecuteError as err:
        raise HypervisorError(f"instance {name}: qemu did not take the file of disk/"
                              f"{disk.index}: {_refused(err)}") from None
    finally:
        os.close(fd)
    if not isinstance(added, dict) or not isinstance(added.get("fdset-id"), int):
        raise HypervisorError(f"instance {name}: qemu answered add-fd with {added!r}")
    return int(added["fdset-id"])


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def _record_disk(record: RuntimeRecord, disk: DiskSpec, path: str) -> None:
    slot = record.pci_slots.get(disk_device_id(disk))
    _forget_disk(record, disk)
    if slot is not None:
        record.pci_slots[disk_device_id(disk)] = slot
    position = min(disk.index, len(record.spec.disks))
    record.spec.disks.insert(position, msgspec.structs.replace(disk))
    record.disk_paths.insert(position, path)
    for index, known in enumerate(record.spec.disks):
        known.index = index


def _forget_disk(record: RuntimeRecord, disk: DiskSpec) -> None:
    record.pci_slots.pop(disk_device_id(disk), None)
    for position, known in enumerate(record.spec.disks):
        if known.uuid == disk.uuid:
            del record.spec.disks[position]
            if position < len(record.disk_paths):
                del record.disk_paths[position]
            break
    for index, known in enumerate(record.spec.disks):
        known.index = index


# -- NICs ---------------------------------------------------------------------------------
async def _nic(qmp: QMPClient, runtime: InstanceRuntime, record: RuntimeRecord,
               action: HotplugAction, nic: NicSpec) -> None:
    ident = netdev.nic_device_id(nic)
    if action in ("hotremove", "hotmod"):
        if ident in await present_devices(qmp):
            await _unplug(qmp, record.name, ident, f"nic/{nic.index}")
        with contextlib.suppress(ExecuteError):
            await qmp.execute("netdev_del", {"id": f"{ident}-net"})
        await netdev.teardown_taps(_taps_of(record, nic))
        _forget_nic(record, nic)
        await asyncio.to_thread(runtime.write, record)
    if action in ("hotadd", "hotmod"):
        if ident not in await present_devices(qmp):
            tap = await _plug_nic(qmp, runtime, record, ident, nic)
            _record_nic(record, nic, tap)
        else:
            await _note_slot(qmp, record, ident)
        if ident not in record.romless:
            record.romless.append(ident)
        await asyncio.to_thread(runtime.write, record)


async def _plug_nic(qmp: QMPClient, runtime: InstanceRuntime, record: RuntimeRecord,
                    ident: str, nic: NicSpec) -> netdev.Tap:
    model = netdev.nic_model(str(record.spec.hvparams.get("nic_type") or "paravirtual"))
    if model not in _PCI_NIC_MODELS:
        raise HypervisorError(f"instance {record.name}: NICs of model {model} cannot be "
                              "hot-plugged (they are not on the PCI bus)")
    alone = msgspec.structs.replace(record.spec, nics=[nic])
    [tap] = await netdev.setup_taps(runtime.paths, alone, user=record.uid)
    try:
        fd = await asyncio.to_thread(_open_tap, tap.name)
        try:
            qmp.send_fd_scm(fd)
            await qmp.execute("getfd", {"fdname": f"{ident}-fd"})
        finally:
            os.close(fd)
        try:
            await qmp.execute("netdev_add", {"type": "tap", "id": f"{ident}-net",
                                             "fd": f"{ident}-fd"})
        except ExecuteError as err:
            with contextlib.suppress(ExecuteError):
                await qmp.execute("closefd", {"fdname": f"{ident}-fd"})
            raise HypervisorError(f"instance {record.name}: qemu refused the tap of "
                                  f"nic/{nic.index}: {_refused(err)}") from None
        try:
            # No option ROM: a hot-added NIC boots nothing, and a chrooted qemu could
            # not read the ROM file.
            slot = await _place(qmp, record, ident)
            await qmp.execute("device_add", {"driver": model, "id": ident,
                                             "netdev": f"{ident}-net", "mac": nic.mac,
                                             "romfile": "", "addr": pci_addr(slot)})
            record.pci_slots[ident] = slot
        except ExecuteError as err:
            with contextlib.suppress(ExecuteError):
                await qmp.execute("netdev_del", {"id": f"{ident}-net"})
            raise HypervisorError(f"instance {record.name}: qemu refused to add nic/"
                                  f"{nic.index}: {_refused(err)}") from None
    except BaseException:
        await netdev.teardown_taps([tap])
        raise
    return tap


def _open_tap(name: str) -> int:
    """A descriptor attached to the persistent tap ``name`` (for qemu's ``fd=``)."""
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    except OSError as err:
        raise HypervisorError(f"cannot open /dev/net/tun for tap {name}: {err}") from err
    try:
        request = struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI | _IFF_VNET_HDR)
        fcntl.ioctl(fd, _TUNSETIFF, request)
    except OSError as err:
        os.close(fd)
        raise HypervisorError(f"cannot attach to tap {name}: {err}") from err
    return fd


def _taps(record: RuntimeRecord) -> list[netdev.Tap]:
    return netdev.recorded_taps(record)


def _taps_of(record: RuntimeRecord, nic: NicSpec) -> list[netdev.Tap]:
    return [t for t in _taps(record) if nic.uuid and t.nic_uuid == nic.uuid]


def _record_nic(record: RuntimeRecord, nic: NicSpec, tap: netdev.Tap) -> None:
    slot = record.pci_slots.get(netdev.nic_device_id(nic))
    _forget_nic(record, nic)
    if slot is not None:
        record.pci_slots[netdev.nic_device_id(nic)] = slot
    position = min(nic.index, len(record.spec.nics))
    record.spec.nics.insert(position, msgspec.structs.replace(nic))
    _store_taps(record, [*_taps(record), tap])


def _forget_nic(record: RuntimeRecord, nic: NicSpec) -> None:
    ident = netdev.nic_device_id(nic)
    record.pci_slots.pop(ident, None)
    record.romless = [other for other in record.romless if other != ident]
    record.spec.nics = [n for n in record.spec.nics if n.uuid != nic.uuid]
    _store_taps(record, [t for t in _taps(record) if t.nic_uuid != nic.uuid or not nic.uuid])


def _store_taps(record: RuntimeRecord, taps: list[netdev.Tap]) -> None:
    """Renumber the NICs to their positions and keep each tap's index in step."""
    positions = {}
    for index, known in enumerate(record.spec.nics):
        known.index = index
        positions[known.uuid] = index
    kept = [msgspec.structs.replace(t, nic_index=positions.get(t.nic_uuid, t.nic_index))
            for t in taps if t.mode]
    record.taps = [t.name for t in taps]
    record.extra.setdefault("netdev", {})["taps"] = msgspec.to_builtins(kept)


# -- removal ------------------------------------------------------------------------------
async def _unplug(qmp: QMPClient, name: str, ident: str, what: str) -> None:
    """``device_del`` ``ident`` and wait until the guest has released it."""
    listener = EventListener(("DEVICE_DELETED",))
    with qmp.listen(listener):
        try:
            await qmp.execute("device_del", {"id": ident})
        except ExecuteError as err:
            message = _refused(err)
            if "not found" in message:
                return
            if "already in the process of unplug" not in message:
                raise HypervisorError(f"instance {name}: qemu refused to remove {what}: "
                                      f"{message}") from None
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT):
                async for event in listener:
                    data = event.get("data")
                    if isinstance(data, dict) and data.get("device") == ident:
                        return
        except TimeoutError:
            raise HypervisorError(
                f"instance {name}: the guest did not release {what} within "
                f"{RELEASE_TIMEOUT:.0f} s (it must accept ACPI PCI hot-unplug, and a request"
                " made while it boots is lost); the device stays until the guest releases"
                " it or the instance restarts") from None
