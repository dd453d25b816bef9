"""The environment OS scripts run with (OS API 10, 15 and 20).

Scripts get everything through environment variables and nothing else: the node daemon's
own environment is not passed on. :func:`core_env` is what every script gets, including
``verify``; :func:`build_env` adds the instance, its disks and its NICs for ``create``,
``rename``, ``import`` and ``export``. Variable names and value formats are those of
Ganeti's OS interface, so existing OS definitions read what they expect:

* ``OS_VARIANT`` is always set, empty for API 10 or an OS without variants, and the
  first declared variant when a forced OS name gives none;
* ``INSTANCE_HYPERVISOR`` (design 2.1) and ``HYPERVISOR`` (its later name) both hold
  the instance's hypervisor;
* ``OSP_<NAME>`` (parameter name upper-cased, ``-`` as ``_``) only for API 20;
* ``INSTANCE_HV_<name>`` and ``INSTANCE_BE_<name>`` keep the parameter's own (lower-case)
  spelling, with values rendered by ``str()`` (so booleans are ``True``/``False``).

Callers add the per-script extras themselves: ``INSTANCE_REINSTALL=1`` for a reinstall,
``OLD_INSTANCE_NAME`` for ``rename``, and :func:`transfer_env` for ``import``/``export``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from corral.errors import InternalError
from corral.objects.specs import InstanceSpec
from corral.osapi.definition import OsDefinition

__all__ = [
    "DEFAULT_PATH",
    "build_env",
    "core_env",
    "osparams_env",
    "transfer_env",
]

DEFAULT_PATH = "/sbin:/bin:/usr/sbin:/usr/bin"
"""``PATH`` given to scripts, so they find the usual tools without setting it."""

_FILE_BASED = frozenset({"file", "sharedfile", "gluster"})
_BLOCK_BASED = frozenset({"plain", "drbd", "blockdev", "rbd", "ext"})


def osparams_env(osparams: Mapping[str, Any]) -> dict[str, str]:
    """``OSP_<NAME>`` variables for already-filled OS parameters.

    Names are upper-cased with ``-`` turned into ``_``; a ``None`` value is left out
    (an empty or missing parameter means the OS's own default).
    """
    return {
        "OSP_" + name.upper().replace("-", "_"): str(value)
        for name, value in osparams.items()
        if value is not None
    }


def core_env(os_def: OsDefinition, variant: str, osparams: Mapping[str, Any], *,
             debug: int = 0) -> dict[str, str]:
    """What every script of ``os_def`` gets, ``verify`` included.

    ``variant`` is the one :func:`corral.osapi.find_os` chose; for an OS with variants
    an empty one means the first declared variant.
    """
    api = os_def.api_version
    env = {
        "OS_API_VERSION": str(api),
        "OS_NAME": os_def.name,
        "OS_VARIANT": (variant or os_def.variants[0]) if api >= 15 and os_def.variants
        else "",
        "DEBUG_LEVEL": str(debug),
        "PATH": DEFAULT_PATH,
    }
    if api >= 20:
        env.update(osparams_env(osparams))
    return env


def build_env(os_def: OsDefinition, variant: str, spec: InstanceSpec,
              disk_paths: Sequence[str], *, debug: int = 0) -> dict[str, str]:
    """The full environment for ``create``, ``rename``, ``import`` and ``export``.

    ``spec`` carries filled parameters (OS parameters already in the order instance >
    OS+variant > OS); ``disk_paths`` are where ``spec.disks`` are, in order: a
    node-local path becomes ``DISK_<n>_PATH``, the URI of a disk with
    ``access=userspace`` (``rbd:pool/image``) ``DISK_<n>_URI``, as in Ganeti.
    """
    if len(disk_paths) != len(spec.disks):
        raise InternalError(f"instance {spec.name} has {len(spec.disks)} disk(s) but "
                            f"{len(disk_paths)} disk path(s) were given")
    env = core_env(os_def, variant, spec.osparams, debug=debug)
    env.update({
        "INSTANCE_NAME": spec.name,
        "INSTANCE_OS": spec.os or os_def.full_name(variant),
        "INSTANCE_UUID": spec.uuid,
        "INSTANCE_PRIMARY_NODE": spec.primary_node,
        "INSTANCE_SECONDARY_NODES": "",
        "INSTANCE_HYPERVISOR": spec.hypervisor,
        "HYPERVISOR": spec.hypervisor,
        "DISK_COUNT": str(len(spec.disks)),
        "NIC_COUNT": str(len(spec.nics)),
    })
    disk_type = spec.hvparams.get("disk_type")
    for idx, (disk, path) in enumerate(zip(spec.disks, disk_paths, strict=True)):
        prefix = f"DISK_{idx}_"
        # A disk the hypervisor reaches itself (access=userspace) has a URI instead.
        env[prefix + ("PATH" if path.startswith("/") else "URI")] = path
        env[prefix + "ACCESS"] = disk.mode
        env[prefix + "UUID"] = disk.uuid
        env[prefix + "SIZE"] = str(disk.size)
        if disk.name:
            env[prefix + "NAME"] = disk.name
        if disk_type is not None:
            env[prefix + "FRONTEND_TYPE"] = str(disk_type)
        if disk.dev_type in _FILE_BASED and disk.logical_id:
            env[prefix + "BACKEND_TYPE"] = f"file:{disk.logical_id[0]}"
        elif disk.dev_type in _BLOCK_BASED:
            env[prefix + "BACKEND_TYPE"] = "block"
    nic_type = spec.hvparams.get("nic_type")
    for idx, nic in enumerate(spec.nics):
        prefix = f"NIC_{idx}_"
        env[prefix + "MAC"] = nic.mac
        env[prefix + "UUID"] = nic.uuid
        if nic.name:
            env[prefix + "NAME"] = nic.name
        if nic.ip:
            env[prefix + "IP"] = nic.ip
        env[prefix + "MODE"] = nic.mode
        if nic.mode == "bridged":
            env[prefix + "BRIDGE"] = nic.link
        if nic.link:
            env[prefix + "LINK"] = nic.link
        if nic_type is not None:
            env[prefix + "FRONTEND_TYPE"] = str(nic_type)
    for kind, params in (("BE", spec.beparams), ("HV", spec.hvparams)):
        for key, value in params.items():
            env[f"INSTANCE_{kind}_{key}"] = str(value)
    return env


def transfer_env(env: Mapping[str, str], direction: Literal["import", "export"],
                 index: int) -> dict[str, str]:
    """``env`` plus the variables naming the disk an ``import``/``export`` run handles:
    ``<DIR>_INDEX``, ``<DIR>_DISK_PATH`` and its older alias ``<DIR>_DEVICE``."""
    path = env.get(f"DISK_{index}_PATH")
    if path is None:
        raise InternalError(f"no DISK_{index}_PATH in the environment for {direction} "
                            f"of disk {index}")
    prefix = direction.upper()
    return {
        **env,
        f"{prefix}_INDEX": str(index),
        f"{prefix}_DISK_PATH": path,
        f"{prefix}_DEVICE": path,
    }
