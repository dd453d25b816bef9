"""Parameter families (hypervisor, backend, NIC, disk, node), their types and defaults.

Names, types and defaults are Ganeti 3.0's, so that ``-H kvm:kernel_path=...`` or a
RAPI body written for Ganeti means the same here. Values arrive as strings from the
command line and as JSON from RAPI; :func:`coerce` turns either into the typed value
and says what is accepted when it cannot.

Filling is one function, :func:`fill_params`: later layers override earlier ones
(cluster defaults ← node group ← instance). A value of ``None`` in a layer removes
the key from that layer's overrides, so the earlier layer's value shows through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from corral.errors import ParameterError, UnknownParameterError, did_you_mean

__all__ = [
    "BE_MEMORY_ALIAS",
    "BE_PARAMS",
    "DISK_ACCESS_MODES",
    "DISK_PARAMS",
    "DISK_TEMPLATES",
    "HV_GLOBALS",
    "HV_PARAMS",
    "HYPERVISORS",
    "ND_PARAMS",
    "NIC_MODES",
    "NIC_PARAMS",
    "VALUE_DEFAULT",
    "ParamSpec",
    "ParamType",
    "coerce",
    "defaults",
    "fill_hv_params",
    "fill_params",
    "parse_size",
    "update_params",
    "upgrade_beparams",
    "validate_params",
]

#: A value meaning "drop my override and use the default" (Ganeti's ``default``).
VALUE_DEFAULT = "default"

ParamType = Literal["string", "maybe-string", "bool", "int", "float", "size"]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: its type, default, accepted values and scope."""

    type: ParamType
    default: Any
    choices: frozenset[str] | None = None
    #: Global parameters are cluster-wide only and cannot be set per instance (design 2.1).
    global_only: bool = False
    #: The smallest accepted value of a number or size (``vcpus=0`` cannot run).
    minimum: int | None = None


def _s(default: str, *choices: str) -> ParamSpec:
    return ParamSpec("string", default, frozenset(choices) if choices else None)


def _b(default: bool) -> ParamSpec:
    return ParamSpec("bool", default)


def _i(default: int) -> ParamSpec:
    return ParamSpec("int", default)


_MIGRATION = {
    "migration_mode": ParamSpec("string", "live", frozenset({"live", "non-live"}), True),
    "migration_port": ParamSpec("int", 8102, None, True),
    "migration_bandwidth": ParamSpec("int", 32, None, True),
}

_KVM: dict[str, ParamSpec] = {
    "acpi": _b(True),
    "boot_order": _s("disk", "cdrom", "disk", "floppy", "network"),
    "cdrom2_image_path": _s(""),
    "cdrom_disk_type": _s(""),
    "cdrom_image_path": _s(""),
    "cpu_cores": _i(0),
    "cpu_mask": _s("all"),
    "cpu_sockets": _i(0),
    "cpu_threads": _i(0),
    "cpu_type": _s(""),
    "disk_aio": _s("threads", "native", "threads"),
    "disk_cache": _s("default", "default", "none", "writeback", "writethrough"),
    "disk_discard": _s("default", "default", "ignore", "unmap"),
    "disk_type": _s(
        "paravirtual",
        "ide", "mtd", "paravirtual", "pflash", "scsi", "scsi-block", "scsi-cd",
        "scsi-generic", "scsi-hd", "sd",
    ),
    "floppy_image_path": _s(""),
    "initrd_path": _s(""),
    "kernel_args": _s("ro"),
    "kernel_path": _s("/boot/vmlinuz-3-kvmU"),
    "keymap": _s(""),
    "kvm_extra": _s(""),
    # Ganeti's accelerator switch: "enabled" (-enable-kvm), "disabled" (TCG), "" (qemu decides).
    "kvm_flag": _s("", "", "enabled", "disabled"),
    "kvm_path": _s("/usr/bin/kvm"),
    "kvm_pci_reservations": _i(12),
    "machine_version": _s(""),
    "mem_path": _s(""),
    "migration_caps": _s(""),
    "migration_downtime": _i(30),
    "nic_type": _s(
        "paravirtual",
        "e1000", "i82551", "i82557b", "i82559er", "ne2k_isa", "ne2k_pci", "paravirtual",
        "pcnet", "rtl8139",
    ),
    "reboot_behavior": _s("reboot", "reboot", "exit"),
    "root_path": ParamSpec("maybe-string", "/dev/vda1"),
    "scsi_controller_type": _s("lsi", "lsi", "megasas", "virtio-scsi-pci"),
    "security_domain": _s(""),
    "security_model": _s("none", "none", "user", "pool"),
    "serial_console": _b(True),
    "serial_speed": _i(38400),
    "soundhw": _s(""),
    "spice_bind": _s(""),
    "spice_image_compression": _s(""),
    "spice_ip_version": _i(0),
    "spice_jpeg_wan_compression": _s(""),
    "spice_password_file": _s(""),
    "spice_playback_compression": _b(True),
    "spice_streaming_video": _s(""),
    "spice_tls_ciphers": _s("HIGH:-DES:-3DES:-EXPORT:-DH"),
    "spice_use_tls": _b(False),
    "spice_use_vdagent": _b(True),
    "spice_zlib_glz_wan_compression": _s(""),
    "usb_devices": _s(""),
    "usb_mouse": _s(""),
    "use_chroot": _b(False),
    "use_guest_agent": _b(False),
    "use_localtime": _b(False),
    "user_shutdown": _b(False),
    "vga": _s(""),
    "vhost_net": _b(False),
    "virtio_net_queues": _i(1),
    "vnc_bind_address": _s(""),
    "vnc_password_file": _s(""),
    "vnc_tls": _b(False),
    "vnc_x509_path": _s(""),
    "vnc_x509_verify": _b(False),
    "vnet_hdr": _b(True),
    **_MIGRATION,
}

#: Hypervisor parameters per hypervisor corral implements.
HV_PARAMS: dict[str, dict[str, ParamSpec]] = {
    "fake": {"migration_mode": _MIGRATION["migration_mode"]},
    "kvm": _KVM,
}

#: Hypervisor parameters only the cluster sets, whatever the hypervisor (Ganeti's
#: ``HVC_GLOBALS``): refused per instance, dropped from instances by the configuration
#: upgrade, and never filled from any layer but the cluster's.
HV_GLOBALS: frozenset[str] = frozenset(
    name for specs in HV_PARAMS.values() for name, spec in specs.items() if spec.global_only
)

#: The hypervisors corral implements, in order of preference.
HYPERVISORS: tuple[str, ...] = ("kvm", "fake")

#: Backend (per-instance resource) parameters.
BE_PARAMS: dict[str, ParamSpec] = {
    "always_failover": _b(False),
    "auto_balance": _b(True),
    "maxmem": ParamSpec("size", 128, minimum=1),
    "minmem": ParamSpec("size", 128, minimum=1),
    "spindle_use": ParamSpec("int", 1, minimum=0),
    "vcpus": ParamSpec("int", 1, minimum=1),
}

#: Ganeti's pre-2.6 backend parameter ``memory``: it sets both ``maxmem`` and ``minmem``.
BE_MEMORY_ALIAS = "memory"

#: NIC modes corral implements (design 2.1: bridged, and routed without a bridge).
NIC_MODES: tuple[str, ...] = ("bridged", "routed", "openvswitch")

NIC_PARAMS: dict[str, ParamSpec] = {
    "mode": _s("bridged", *NIC_MODES),
    "link": _s("xen-br0"),
    "vlan": _s(""),
}

#: Disk templates corral knows; DRBD is not among them (see DESIGN.md, Storage).
DISK_TEMPLATES: tuple[str, ...] = ("plain", "file", "sharedfile", "diskless", "blockdev", "rbd",
                                  "ext")

#: How a node gives a guest a disk of the templates that have the choice (Ganeti's
#: ``access`` disk parameter): a block device of the node's kernel, or the hypervisor's
#: own client (qemu's librbd for ``rbd``; the ``kvm:`` URI an ExtStorage provider names).
DISK_ACCESS_MODES: tuple[str, ...] = ("kernelspace", "userspace")

DISK_PARAMS: dict[str, dict[str, ParamSpec]] = {
    "plain": {"stripes": _i(1)},
    "file": {},
    "sharedfile": {},
    "diskless": {},
    "blockdev": {},
    "rbd": {"access": _s("kernelspace", *DISK_ACCESS_MODES), "pool": _s("rbd")},
    "ext": {"access": _s("kernelspace", *DISK_ACCESS_MODES)},
}

ND_PARAMS: dict[str, ParamSpec] = {
    "cpu_speed": ParamSpec("float", 1.0),
    "exclusive_storage": _b(False),
    "oob_program": _s(""),
    "ovs": _b(False),
    "ovs_link": ParamSpec("maybe-string", ""),
    "ovs_name": ParamSpec("maybe-string", "switch1"),
    "spindle_count": _i(1),
    "ssh_port": _i(22),
}

_TRUE = {"true", "yes", "on", "1", "y", "t"}
_FALSE = {"false", "no", "off", "0", "n", "f"}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mMgGtT]?)[iI]?[bB]?\s*$")
_SIZE_MULT = {"": 1, "m": 1, "g": 1024, "t": 1024 * 1024}


def parse_size(value: str | int | float) -> int:
    """Parse a size (``512``, ``512M``, ``2G``, ``1.5T``) into MiB, rounding up."""
    if isinstance(value, bool):
        raise ParameterError(f"invalid size {value!r}: expected a number with unit M, G or T")
    if isinstance(value, int | float):
        if value < 0:
            raise ParameterError(f"invalid size {value!r}: sizes cannot be negative")
        return int(-(-value // 1))
    match = _SIZE_RE.match(value)
    if not match:
        raise ParameterError(
            f"invalid size {value!r}: expected a number with an optional unit M, G or T"
        )
    number = float(match.group(1)) * _SIZE_MULT[match.group(2).lower()]
    return int(-(-number // 1))


def coerce(family: str, name: str, spec: ParamSpec, value: Any) -> Any:
    """Turn ``value`` (string from the CLI or JSON from RAPI) into the parameter's type."""
    where = f"{family} parameter '{name}'"
    if isinstance(value, bool) and spec.type != "bool":
        raise ParameterError(f"{where} needs a value, as in {name}=<{spec.type}>")
    try:
        if spec.type == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ParameterError(f"{where}: {value!r} is not a boolean (use true or false)")
        if spec.type == "int":
            if isinstance(value, bool):
                raise ValueError
            return _at_least(where, spec, int(value))
        if spec.type == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if spec.type == "size":
            return _at_least(where, spec, parse_size(value))
        if spec.type == "maybe-string" and value is None:
            return None
        if not isinstance(value, str):
            raise ParameterError(f"{where}: {value!r} is not a string")
    except (TypeError, ValueError):
        raise ParameterError(f"{where}: {value!r} is not {'an' if spec.type == 'int' else 'a'} "
                             f"{spec.type}") from None
    except ParameterError as err:
        if err.message.startswith(where):
            raise
        raise ParameterError(f"{where}: {err.message}") from None
    if spec.choices is not None and value not in spec.choices:
        accepted = ", ".join(repr(c) for c in sorted(spec.choices))
        raise ParameterError(f"{where}: {value!r} is not one of {accepted}")
    return value


def _at_least(where: str, spec: ParamSpec, value: int) -> int:
    if spec.minimum is not None and value < spec.minimum:
        unit = " MiB" if spec.type == "size" else ""
        raise ParameterError(f"{where}: {value}{unit} is out of range; accepted: "
                             f"{spec.minimum}{unit} or more")
    return value


def upgrade_beparams(values: Mapping[str, Any]) -> dict[str, Any]:
    """Backend parameters with Ganeti's legacy ``memory`` turned into ``maxmem`` and
    ``minmem``; like Ganeti's, ``memory`` wins over either given alongside it."""
    result = dict(values)
    if BE_MEMORY_ALIAS in result:
        memory = result.pop(BE_MEMORY_ALIAS)
        result["maxmem"] = memory
        result["minmem"] = memory
    return result


def _unknown(family: str, name: str, specs: Mapping[str, ParamSpec]) -> UnknownParameterError:
    hint = did_you_mean(name, sorted(specs), listing="gnt-cluster info")
    return UnknownParameterError(f"unknown {family} parameter '{name}'; {hint}")


def validate_params(
    family: str,
    specs: Mapping[str, ParamSpec],
    values: Mapping[str, Any],
    *,
    instance_level: bool = False,
) -> dict[str, Any]:
    """Check names and types of ``values``; return them coerced to their types.

    ``instance_level`` refuses global-only parameters, which only the cluster may set.
    ``None`` and :data:`VALUE_DEFAULT` pass through: they mean "remove the override".
    Backend parameters accept Ganeti's legacy ``memory`` (see :func:`upgrade_beparams`),
    so the cluster, a group, an instance and RAPI all read it the same way.
    """
    if specs is BE_PARAMS:
        values = upgrade_beparams(values)
    result: dict[str, Any] = {}
    for name, value in values.items():
        spec = specs.get(name)
        if spec is None:
            raise _unknown(family, name, specs)
        if instance_level and spec.global_only:
            raise ParameterError(
                f"{family} parameter '{name}' is global: set it for the whole cluster "
                "with 'gnt-cluster modify', not per instance"
            )
        if value is None or value == VALUE_DEFAULT:
            result[name] = None
        else:
            result[name] = coerce(family, name, spec, value)
    return result


def defaults(specs: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """The built-in default value of every parameter in ``specs``."""
    return {name: spec.default for name, spec in specs.items()}


def update_params(current: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """Apply validated ``changes`` to one layer's overrides; ``None`` removes a key."""
    result = dict(current)
    for name, value in changes.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


def fill_params(base: Mapping[str, Any], *layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Fill parameters: each layer overrides the ones before it.

    This is the single place where cluster defaults, node-group overrides and
    instance overrides meet: ``fill_params(cluster.beparams["default"],
    group.beparams, instance.beparams)``. ``None`` layers are skipped and ``None``
    values inside a layer do not override.
    """
    result = dict(base)
    for layer in layers:
        if not layer:
            continue
        for name, value in layer.items():
            if value is not None:
                result[name] = value
    return result


def fill_hv_params(cluster: Mapping[str, Any], *layers: Mapping[str, Any] | None
                   ) -> dict[str, Any]:
    """Fill hypervisor parameters like :func:`fill_params`, except that a global one
    (:data:`HV_GLOBALS`) keeps the ``cluster`` layer's value: whatever a later layer
    (OS, group, instance) holds for it is ignored, so an instance carrying one from an
    older store cannot make it differ per instance (design 2.1)."""
    return fill_params(cluster, *(
        {k: v for k, v in layer.items() if k not in HV_GLOBALS} if layer else None
        for layer in layers
    ))
