"""An export's ``config.ini``, in the format Ganeti 3.0 writes and reads.

Recorded from a real Ganeti 3.0 export (tests/data/ganeti-export): sections
``[export]`` (``version = 0``, ``timestamp``, ``source`` = the source node's UUID,
``os``, ``compression``), ``[instance]`` (name, memory and vcpus, ``disk_template``,
``hypervisor``, ``tags``, per NIC ``nic<N>_mac|ip|network|name|link|mode|vlan``,
``nic_count``, per disk ``disk<N>_ivname|dump|size|name``, ``disk_count``),
``[hypervisor]`` (the instance's own hypervisor parameters), ``[backend]`` (filled
backend parameters), ``[os]`` and ``[os_private]``. A missing value is written
``None``, as Python's ``str(None)``. Disk images are named by the disk's UUID
(``disk<N>_dump``) and stored uncompressed whatever the transport compression was.
"""

from __future__ import annotations

import configparser
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.errors import ParameterError
from corral.objects import Disk, Instance

__all__ = ["ExportedDisk", "ExportedInstance", "parse_export", "write_export"]

_VERSION = "0"


def _text(value: Any) -> str:
    return "None" if value is None else str(value)


def _value(text: str | None) -> str | None:
    return None if text in (None, "None") else text


def write_export(instance: Instance, disks: Sequence[Disk], source_node_uuid: str,
                 timestamp: int, beparams: Mapping[str, Any],
                 compression: str = "none") -> str:
    """The config.ini text of an export of ``instance`` with ``disks`` (in order)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser["export"] = {"version": _VERSION, "timestamp": str(timestamp),
                        "source": source_node_uuid, "os": instance.os,
                        "compression": compression}
    section: dict[str, str] = {
        "name": instance.name,
        "maxmem": _text(beparams.get("maxmem")), "minmem": _text(beparams.get("minmem")),
        "memory": _text(beparams.get("maxmem")), "vcpus": _text(beparams.get("vcpus")),
        "disk_template": instance.disk_template, "hypervisor": instance.hypervisor,
        "tags": " ".join(sorted(instance.tags)),
    }
    for index, nic in enumerate(instance.nics):
        prefix = f"nic{index}_"
        section[prefix + "mac"] = nic.mac
        section[prefix + "ip"] = _text(nic.ip)
        section[prefix + "network"] = _text(nic.network)
        section[prefix + "name"] = _text(nic.name)
        for key in ("link", "mode", "vlan"):
            section[prefix + key] = str(nic.nicparams.get(key, ""))
    section["nic_count"] = str(len(instance.nics))
    for index, disk in enumerate(disks):
        prefix = f"disk{index}_"
        section[prefix + "ivname"] = disk.iv_name or f"disk/{index}"
        section[prefix + "dump"] = disk.uuid
        section[prefix + "size"] = str(disk.size)
        section[prefix + "name"] = _text(disk.name)
    section["disk_count"] = str(len(disks))
    parser["instance"] = section
    parser["hypervisor"] = {k: str(v) for k, v in sorted(instance.hvparams.items())}
    parser["backend"] = {k: str(v) for k, v in sorted(beparams.items())}
    parser["os"] = {k: str(v) for k, v in sorted(instance.osparams.items())}
    parser["os_private"] = {}
    out = io.StringIO()
    parser.write(out)
    return out.getvalue()


@dataclass
class ExportedDisk:
    """One disk of an export: its image file, size (MiB) and name."""

    dump: str
    size: int
    name: str | None = None


@dataclass
class ExportedInstance:
    """What an export says about its instance."""

    name: str
    os: str
    disk_template: str
    hypervisor: str
    source: str
    compression: str
    disks: list[ExportedDisk]
    nics: list[dict[str, Any]]
    tags: list[str]
    hvparams: dict[str, str] = field(default_factory=dict)
    beparams: dict[str, str] = field(default_factory=dict)
    osparams: dict[str, str] = field(default_factory=dict)


def parse_export(text: str, where: str) -> ExportedInstance:
    """Read a config.ini (Ganeti's or corral's); ``where`` names it in errors."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text)
        exp, inst = parser["export"], parser["instance"]
        if exp.get("version") != _VERSION:
            raise ParameterError(f"{where}: export version {exp.get('version')!r} is not "
                                 f"supported (only {_VERSION})")
        disks = [ExportedDisk(dump=inst[f"disk{i}_dump"], size=int(inst[f"disk{i}_size"]),
                              name=_value(inst.get(f"disk{i}_name")))
                 for i in range(int(inst.get("disk_count", "0")))]
        nics = []
        for i in range(int(inst.get("nic_count", "0"))):
            nic: dict[str, Any] = {"mac": inst[f"nic{i}_mac"]}
            for key in ("ip", "network", "name", "link", "mode", "vlan"):
                value = _value(inst.get(f"nic{i}_{key}"))
                if value not in (None, ""):
                    nic[key] = value
            nics.append(nic)
        return ExportedInstance(
            name=inst["name"], os=exp["os"], disk_template=inst["disk_template"],
            hypervisor=inst.get("hypervisor", ""), source=exp.get("source", ""),
            compression=exp.get("compression", "none"), disks=disks, nics=nics,
            tags=[t for t in inst.get("tags", "").split() if t],
            hvparams=dict(parser["hypervisor"]) if parser.has_section("hypervisor") else {},
            beparams=dict(parser["backend"]) if parser.has_section("backend") else {},
            osparams=dict(parser["os"]) if parser.has_section("os") else {})
    except (configparser.Error, KeyError, ValueError) as err:
        raise ParameterError(f"{where} is not a valid export config.ini: {err}") from None
