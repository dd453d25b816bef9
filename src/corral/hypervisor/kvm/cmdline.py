"""The qemu command line of an instance, from its filled hypervisor parameters.

Pure apart from telling block devices from files: given the spec, the node-local disk
paths, the runtime files and what the networking and security parts add, it returns
the argument list. The parameters mean what they mean in Ganeti's kvm hypervisor:

* ``kvm_flag``: ``enabled`` gives ``-enable-kvm``, ``disabled`` ``-accel tcg``
  (software emulation); empty leaves the choice to qemu, as Ganeti does.
* ``machine_version`` (default ``pc``: hot-plug works on its PCI bus with ACPI),
  ``acpi`` (off: ``acpi=off`` on the machine).
* ``-m`` is ``maxmem``; ``minmem`` is reached through the balloon after start.
* ``-smp`` is ``vcpus`` with ``cores``/``threads``/``sockets`` when set.
* ``kernel_path`` boots that kernel (and ``initrd_path``) with ``-append`` built as
  ``root=<root_path> <kernel_args>`` plus ``console=ttyS0,<serial_speed>`` when the
  serial console is on; without a kernel ``boot_order`` picks the boot device.
* ``reboot_behavior=exit`` adds ``-no-reboot``; ``user_shutdown`` adds
  ``-no-shutdown`` (a guest that powers off leaves qemu in state ``shutdown``).
* ``kvm_extra`` is split like a shell would and goes last.

Device ids follow the contract the hotplug and migration parts rely on:
``disk-<first 8 of the disk's uuid>`` with block node ``<id>-drive``.

Every device corral puts on the PCI bus has an explicit slot (``addr=``): slots 0-2
are qemu's own (host bridge, ISA bridge, VGA), the balloon has slot 3, a SCSI
controller slot 4, and disks and NICs take the slots from 5 up
(:func:`assign_pci_slots`). A hot-plugged device takes the lowest free one; the
runtime record keeps them, so a migration's target, started from that record, has
every device where the source has it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shlex
import stat
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from corral.errors import HypervisorError
from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.hypervisor.kvm.uris import is_uri, protocol_node
from corral.objects.params import BE_PARAMS, HV_PARAMS, parse_size
from corral.objects.specs import DiskSpec, InstanceSpec

__all__ = [
    "BALLOON_SLOT",
    "DISK_DEVICES",
    "FIRST_DEVICE_SLOT",
    "LAST_PCI_SLOT",
    "SCSI_SLOT",
    "VNC_BASE_PORT",
    "append_line",
    "assign_pci_slots",
    "build_command",
    "disk_device_id",
    "free_pci_slot",
    "hv",
    "maxmem",
    "minmem",
    "pci_addr",
]

#: ``disk_type`` values corral drives, and the qemu device each becomes.
DISK_DEVICES: dict[str, str] = {
    "paravirtual": "virtio-blk-pci",
    "ide": "ide-hd",
    "scsi": "scsi-hd",
    "scsi-hd": "scsi-hd",
}

#: The balloon's PCI slot; slots 0-2 of the ``pc`` machine are qemu's own.
BALLOON_SLOT: Final = 3
#: The SCSI controller's PCI slot (when disks are ``scsi``).
SCSI_SLOT: Final = 4
#: The first and last PCI slots that disks and NICs take.
FIRST_DEVICE_SLOT: Final = 5
LAST_PCI_SLOT: Final = 31

#: VNC display 0 is this TCP port (an instance's ``network_port`` is 5900 + display).
VNC_BASE_PORT = 5900

log = logging.getLogger(__name__)

_BOOT_DEVICES = {"disk": "c", "cdrom": "d", "floppy": "a", "network": "n"}


def hv(spec: InstanceSpec, key: str) -> object:
    """Hypervisor parameter ``key`` of ``spec`` (filled by the master), with kvm's default."""
    if key in spec.hvparams:
        return spec.hvparams[key]
    return HV_PARAMS["kvm"][key].default


def _str(spec: InstanceSpec, key: str) -> str:
    value = hv(spec, key)
    return "" if value is None else str(value)


def _int(spec: InstanceSpec, key: str) -> int:
    value = hv(spec, key)
    try:
        return int(str(value)) if value not in (None, "") else 0
    except ValueError:
        raise HypervisorError(
            f"instance {spec.name}: hypervisor parameter {key} is {value!r}, expected an"
            " integer") from None


def _bool(spec: InstanceSpec, key: str) -> bool:
    value = hv(spec, key)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1", "y", "t")
    return bool(value)


def _size(spec: InstanceSpec, key: str) -> int:
    value = spec.beparams.get(key, BE_PARAMS[key].default)
    try:
        return parse_size(value)
    except Exception as err:
        raise HypervisorError(f"instance {spec.name} has an invalid {key}: {err}") from err


def maxmem(spec: InstanceSpec) -> int:
    """The instance's ``maxmem`` in MiB (qemu's ``-m``)."""
    return _size(spec, "maxmem")


def minmem(spec: InstanceSpec) -> int:
    """The instance's ``minmem`` in MiB (at most ``maxmem``)."""
    return min(_size(spec, "minmem"), maxmem(spec))


def vcpus(spec: InstanceSpec) -> int:
    """The instance's ``vcpus``."""
    value = spec.beparams.get("vcpus", BE_PARAMS["vcpus"].default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise HypervisorError(
            f"instance {spec.name} has an invalid vcpus value {value!r}: expected an"
            " integer") from None


def disk_device_id(disk: DiskSpec) -> str:
    """qemu's device id of ``disk``: ``disk-`` and the first 8 characters of its uuid
    (``disk-<index>`` without one); its block node is ``<id>-drive``."""
    return f"disk-{disk.uuid[:8]}" if disk.uuid else f"disk-{disk.index}"


def pci_addr(slot: int) -> str:
    """qemu's ``addr=`` value of PCI ``slot`` (function 0)."""
    return f"0x{slot:x}"


def free_pci_slot(taken: Iterable[int], name: str) -> int:
    """The lowest slot for a disk or NIC that ``taken`` leaves free."""
    used = set(taken)
    for slot in range(FIRST_DEVICE_SLOT, LAST_PCI_SLOT + 1):
        if slot not in used:
            return slot
    raise HypervisorError(
        f"instance {name} has no free PCI slot left: slots {FIRST_DEVICE_SLOT}-"
        f"{LAST_PCI_SLOT} all hold disks and NICs")


def assign_pci_slots(spec: InstanceSpec, nic_ids: Sequence[str],
                     known: Mapping[str, int] | None = None) -> dict[str, int]:
    """The PCI slot of each of ``spec``'s devices on the PCI bus: its ``virtio-blk-pci``
    disks, then the NICs ``nic_ids`` names (those of a PCI model). A device ``known``
    gives a slot keeps it (a migration's target, a soft reboot); the others take the
    lowest free slots in order."""
    ids = list(nic_ids)
    if DISK_DEVICES.get(_str(spec, "disk_type")) == "virtio-blk-pci":
        ids = [disk_device_id(disk) for disk in spec.disks] + ids
    known = known or {}
    slots = {ident: known[ident] for ident in ids
             if FIRST_DEVICE_SLOT <= known.get(ident, 0) <= LAST_PCI_SLOT}
    if len(set(slots.values())) != len(slots):
        raise HypervisorError(f"instance {spec.name}: two devices were given one PCI slot:"
                              f" {slots}")
    for ident in ids:
        if ident not in slots:
            slots[ident] = free_pci_slot(slots.values(), spec.name)
    return slots


def append_line(spec: InstanceSpec) -> str:
    """The kernel command line (``-append``): root, ``kernel_args``, serial console."""
    parts = []
    root = _str(spec, "root_path")
    if root:
        parts.append(f"root={root}")
    args = _str(spec, "kernel_args")
    if args:
        parts.append(args)
    if _bool(spec, "serial_console"):
        parts.append(f"console=ttyS0,{_int(spec, 'serial_speed')}")
    return " ".join(parts)


def _opts(value: str) -> str:
    """``value`` escaped for a qemu ``key=value,...`` option (commas doubled)."""
    return value.replace(",", ",,")


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def _disk_args(spec: InstanceSpec, disk_paths: Sequence[str], boot_disk: bool,
               pci_slots: Mapping[str, int]) -> list[str]:
    disk_type = _str(spec, "disk_type")
    device = DISK_DEVICES.get(disk_type)
    if device is None:
        raise HypervisorError(
            f"instance {spec.name}: disk_type {disk_type!r} is not supported by corral's kvm;"
            f" accepted: {', '.join(DISK_DEVICES)}")
    if len(disk_paths) != len(spec.disks):
        raise HypervisorError(
            f"instance {spec.name} has {len(spec.disks)} disks but {len(disk_paths)} disk"
            " paths were given")
    args: list[str] = []
    if device.startswith("scsi") and spec.disks:
        args += ["-device", f"{_str(spec, 'scsi_controller_type')},id=scsi,"
                            f"addr={pci_addr(SCSI_SLOT)}"]
    cache = _str(spec, "disk_cache")
    aio = _str(spec, "disk_aio")
    discard = _str(spec, "disk_discard")
    for disk, path in zip(spec.disks, disk_paths, strict=True):
        ident = disk_device_id(disk)
        node = [f"driver=raw,node-name={ident}-drive"]
        if is_uri(path):
            protocol = protocol_node(path, f"instance {spec.name} disk/{disk.index}")
            node += [f"file.{key}={_opts(str(value))}" for key, value in protocol.items()]
        else:
            driver = "host_device" if _is_block_device(path) else "file"
            node += [f"file.driver={driver}", f"file.filename={_opts(path)}"]
            if aio == "native":
                node.append("file.aio=native")
        if cache == "none":
            node.append("cache.direct=on")
        elif cache in ("writeback", "writethrough"):
            node.append("cache.direct=off")
        if discard in ("ignore", "unmap"):
            node.append(f"discard={discard}")
        if disk.mode == "ro":
            node.append("read-only=on")
        dev = [device, f"drive={ident}-drive", f"id={ident}"]
        if device.startswith("scsi"):
            dev.append("bus=scsi.0")
        elif ident in pci_slots:
            dev.append(f"addr={pci_addr(pci_slots[ident])}")
        if cache == "writethrough":
            dev.append("write-cache=off")
        if boot_disk and disk.index == 0:
            dev.append("bootindex=1")
        args += ["-blockdev", ",".join(node), "-device", ",".join(dev)]
    return args


def _cdrom_args(spec: InstanceSpec, boot: bool) -> list[str]:
    args: list[str] = []
    for key, ident in (("cdrom_image_path", "cdrom1"), ("cdrom2_image_path", "cdrom2")):
        image = _str(spec, key)
        if not image:
            continue
        dev = ["ide-cd", f"drive={ident}-drive", f"id={ident}"]
        if boot and ident == "cdrom1":
            dev.append("bootindex=0")
        args += ["-blockdev", f"driver=raw,node-name={ident}-drive,read-only=on,"
                 f"file.driver=file,file.filename={_opts(image)}",
                 "-device", ",".join(dev)]
    return args


def _vnc_args(spec: InstanceSpec) -> list[str]:
    bind = _str(spec, "vnc_bind_address")
    if not bind:
        return ["-display", "none"]
    args = ["-vga", _str(spec, "vga") or "std"]
    keymap = _str(spec, "keymap")
    if keymap:
        args += ["-k", keymap]
    if bind.startswith("/"):
        return [*args, "-vnc", f"unix:{bind}/{spec.name}.vnc"]
    port = spec.network_port
    if port is None or port < VNC_BASE_PORT:
        # As Ganeti: no VNC server rather than no instance.
        log.warning("instance %s has no network port of at least %d (it has %s): starting"
                    " it without VNC", spec.name, VNC_BASE_PORT, port)
        return [*args, "-vnc", "none"]
    display = port - VNC_BASE_PORT
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        host = bind
    else:
        host = "" if str(address) == "0.0.0.0" else (
            f"[{address}]" if address.version == 6 else str(address))
    vnc = f"{host}:{display}"
    if _bool(spec, "vnc_tls"):
        # As Ganeti: anonymous TLS, or x509 from vnc_x509_path (verifying the viewer's
        # certificate with vnc_x509_verify).
        x509 = _str(spec, "vnc_x509_path")
        creds = "tls-creds-anon,id=vnctls0,endpoint=server"
        if x509:
            verify = "yes" if _bool(spec, "vnc_x509_verify") else "no"
            creds = (f"tls-creds-x509,id=vnctls0,endpoint=server,dir={_opts(x509)},"
                     f"verify-peer={verify}")
        args += ["-object", creds]
        vnc += ",tls-creds=vnctls0"
    if _str(spec, "vnc_password_file"):
        vnc += ",password=on"
    return [*args, "-vnc", vnc]


def build_command(
    spec: InstanceSpec,
    disk_paths: Sequence[str],
    runtime: InstanceRuntime,
    *,
    binary: str,
    nic_args: Sequence[str] = (),
    security_args: Sequence[str] = (),
    incoming: str | None = None,
    paused: bool = False,
    pci_slots: Mapping[str, int] | None = None,
) -> list[str]:
    """qemu's argument list for ``spec`` (see the module's docstring).

    ``pci_slots`` (from :func:`assign_pci_slots`) places the disks; ``nic_args`` carry
    the NICs' own.

    ``paused`` starts it with its CPUs stopped (``-S``). Otherwise the guest runs at
    once (the balloon and a VNC password are set right after, over QMP; a VNC server
    with ``password=on`` lets nobody in until a password is set): a noded that dies
    mid-start leaves a running guest, not one stopped forever. ``incoming`` (a URI such
    as ``tcp:0:PORT`` or ``defer``) starts it to receive a migration instead.
    """
    command = [binary, "-name", spec.name, "-nodefaults", "-no-user-config"]
    flag = _str(spec, "kvm_flag")
    if flag == "enabled":
        command.append("-enable-kvm")
    elif flag == "disabled":
        command += ["-accel", "tcg"]
    machine = [_str(spec, "machine_version") or "pc"]
    if not _bool(spec, "acpi"):
        machine.append("acpi=off")
    command += ["-machine", ",".join(machine)]
    cpu_type = _str(spec, "cpu_type")
    if cpu_type:
        command += ["-cpu", cpu_type]
    command += ["-m", str(maxmem(spec))]
    mem_path = _str(spec, "mem_path")
    if mem_path:
        command += ["-mem-path", mem_path, "-mem-prealloc"]
    smp = [str(vcpus(spec))]
    for key, name in (("cpu_cores", "cores"), ("cpu_threads", "threads"),
                      ("cpu_sockets", "sockets")):
        if _int(spec, key):
            smp.append(f"{name}={_int(spec, key)}")
    command += ["-smp", ",".join(smp)]
    if spec.uuid:
        command += ["-uuid", spec.uuid]
    if _bool(spec, "use_localtime"):
        command += ["-rtc", "base=localtime"]

    kernel = _str(spec, "kernel_path")
    boot_order = _str(spec, "boot_order") or "disk"
    if kernel:
        command += ["-kernel", kernel]
        initrd = _str(spec, "initrd_path")
        if initrd:
            command += ["-initrd", initrd]
        command += ["-append", append_line(spec)]
    elif boot_order in ("network", "floppy"):
        command += ["-boot", _BOOT_DEVICES[boot_order]]
    booting_from = "" if kernel else boot_order
    command += _disk_args(spec, disk_paths, booting_from == "disk", pci_slots or {})
    command += _cdrom_args(spec, booting_from == "cdrom")
    if _str(spec, "floppy_image_path"):
        raise HypervisorError(
            f"instance {spec.name}: floppy_image_path is not supported by corral's kvm")
    command += list(nic_args)

    command += ["-device", f"virtio-balloon-pci,id=balloon0,addr={pci_addr(BALLOON_SLOT)}"]
    if _bool(spec, "serial_console"):
        command += [
            "-chardev", f"socket,id=serial0,path={runtime.serial_socket},server=on,"
                        f"wait=off,logfile={_opts(str(runtime.serial_log))},logappend=on",
            "-serial", "chardev:serial0",
        ]
    else:
        command += ["-serial", "none"]
    command += ["-qmp", f"unix:{runtime.qmp_socket},server=on,wait=off",
                "-chardev", f"socket,id=status,path={runtime.status_socket},server=on,wait=off",
                "-mon", "chardev=status,mode=control"]
    command += _vnc_args(spec)
    if _str(spec, "reboot_behavior") == "exit":
        command.append("-no-reboot")
    if _bool(spec, "user_shutdown"):
        command.append("-no-shutdown")
    command += ["-pidfile", str(runtime.pid_file), "-daemonize",
                "-D", str(runtime.qemu_log)]
    command += list(security_args)
    if incoming is not None:
        command += ["-incoming", incoming]
    elif paused:
        command.append("-S")
    extra = _str(spec, "kvm_extra")
    if extra:
        try:
            command += shlex.split(extra)
        except ValueError as err:
            raise HypervisorError(
                f"instance {spec.name}: kvm_extra {extra!r} cannot be split into"
                f" arguments: {err}") from err
    return command
