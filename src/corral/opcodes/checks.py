"""What the opcode types leave open: the shapes inside their dict and list parameters,
and which parameters name objects of the configuration.

An opcode's own fields are typed, so decoding checks them. Some parameters are
Ganeti's free-form containers: disk and NIC definitions (``disks``, ``nics``), the
modification lists of ``OP_INSTANCE_SET_PARAMS`` and the parameter families
(``beparams``, ``hvparams``, ``nicparams``, ``ndparams``, ``diskparams``).
:func:`check_shapes` checks their keys and value types when the opcode is built, so
that a job whose parameters cannot work is refused at submission, with the path of
the wrong value (``disks[0].size``). What the values mean (ranges, what the cluster
can honour) stays with the logical units.

:data:`REFERENCES` says which parameters name nodes, node groups or OSes; the master
daemon checks them against its configuration when a job is submitted.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args, get_type_hints

import msgspec

from corral.errors import ParameterError, UnknownParameterError, did_you_mean
from corral.objects.params import (
    BE_PARAMS,
    DISK_PARAMS,
    HV_PARAMS,
    ND_PARAMS,
    NIC_PARAMS,
    ParamSpec,
    validate_params,
)
from corral.opcodes.messages import plain_detail

__all__ = ["REFERENCES", "Problem", "Reference", "check_shapes"]


class Problem(Exception):
    """A value inside an opcode parameter is wrong: where (``disks[0].size``) and what
    is accepted there. :func:`corral.opcodes.op_from_dict` turns it into a
    :class:`~corral.errors.ParameterError` naming the parameter as its caller calls it."""

    def __init__(self, path: str, detail: str, *, unknown: bool = False) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail
        #: The value's name is unknown (an :class:`~corral.errors.UnknownParameterError`).
        self.unknown = unknown


# -- disk and NIC definitions -------------------------------------------------------

_SIZE_WORDS: Final = "an integer (MiB) or a size such as \"512M\", \"10G\" or \"1T\""
#: What :func:`corral.objects.params.parse_size` reads.
_SIZE_RE: Final = re.compile(r"^\s*\d+(\.\d+)?\s*[mMgGtT]?[iI]?[bB]?\s*$")


class _Disk(msgspec.Struct, forbid_unknown_fields=True):
    """A disk definition of ``OP_INSTANCE_CREATE``."""

    size: Any = None
    """Checked apart (:func:`_check_size`): an integer or a size string."""
    mode: Literal["rw", "ro"] | None = None
    name: str | None = None
    spindles: int | None = None
    adopt: str | None = None
    vg: str | None = None
    metavg: str | None = None
    provider: str | None = None
    access: str | None = None


class _DiskChange(msgspec.Struct, forbid_unknown_fields=True):
    """A disk added or changed by ``OP_INSTANCE_SET_PARAMS``; ``dev_type`` gives the
    template of a diskless instance's first disk."""

    size: Any = None
    """Checked apart (:func:`_check_size`): an integer or a size string."""
    mode: Literal["rw", "ro"] | None = None
    name: str | None = None
    dev_type: str | None = None
    provider: str | None = None
    access: str | None = None


class _ExtDisk(_Disk, forbid_unknown_fields=False):
    """A disk definition naming an ExtStorage ``provider``: its other keys are the
    provider's parameters (``EXTP_*``), taken as they are."""


class _ExtDiskChange(_DiskChange, forbid_unknown_fields=False):
    """A new disk naming an ExtStorage ``provider``, as :class:`_ExtDisk`."""


#: The shape of a disk definition naming a provider, by the shape of the others.
_WITH_PROVIDER: Final[dict[type[msgspec.Struct], type[msgspec.Struct]]] = {
    _Disk: _ExtDisk, _DiskChange: _ExtDiskChange}


class _Nic(msgspec.Struct, forbid_unknown_fields=True):
    """A NIC definition; ``bridge`` is the older name of ``link``."""

    mac: str | None = None
    ip: str | None = None
    mode: str | None = None
    link: str | None = None
    vlan: str | None = None
    name: str | None = None
    network: str | None = None
    bridge: str | None = None


def _check_size(path: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | str) or (
            isinstance(value, str) and not _SIZE_RE.match(value)):
        raise Problem(path, f"invalid size {value!r}: expected {_SIZE_WORDS}")


def _check_item(path: str, value: Any, shape: type[msgspec.Struct]) -> None:
    """One disk or NIC definition: an object with known keys of the right types."""
    if not isinstance(value, dict):
        keys = ", ".join(shape.__struct_fields__)
        raise Problem(path, f"expected an object with keys {keys}, got {value!r}")
    if value.get("provider") not in (None, "") and shape in _WITH_PROVIDER:
        shape = _WITH_PROVIDER[shape]
    try:
        msgspec.convert(value, shape)
    except msgspec.ValidationError as err:
        raise _problem(path, err, shape) from None
    if issubclass(shape, _Disk | _DiskChange):
        _check_size(f"{path}.size", value.get("size"))


def _problem(path: str, err: msgspec.ValidationError, shape: type[msgspec.Struct]) -> Problem:
    text, _, at = str(err).partition(" - at `$")
    at = at.rstrip("`")
    detail = plain_detail(text)
    if detail.startswith("Object contains unknown field"):
        key = detail.rsplit(" ", 1)[1]
        return Problem(f"{path}{at}.{key}",
                       f"unknown key {key!r}; accepted keys: "
                       f"{', '.join(shape.__struct_fields__)}", unknown=True)
    if detail.startswith("Invalid enum value"):
        choices = get_args(get_args(get_type_hints(shape)[at.lstrip(".")])[0])
        return Problem(f"{path}{at}", f"invalid value {detail.rsplit(' ', 1)[1]}; valid: "
                                      f"{', '.join(str(c) for c in choices)}")
    return Problem(f"{path}{at}", detail[0].lower() + detail[1:])


def _check_items(param: str, items: Any, shape: type[msgspec.Struct]) -> None:
    for index, item in enumerate(items):
        _check_item(f"{param}[{index}]", item, shape)


def _check_changes(param: str, changes: Any, shape: type[msgspec.Struct]) -> None:
    """``OP_INSTANCE_SET_PARAMS`` modification lists: ``[action, index, params]`` or the
    older ``[action or index, params]``."""
    for index, change in enumerate(changes):
        path = f"{param}[{index}]"
        if not isinstance(change, list) or len(change) not in (2, 3):
            raise Problem(path, "expected [action, index, parameters] or [action or index, "
                                f"parameters] with action add, remove or modify; got {change!r}")
        action = change[0]
        if len(change) == 3 and action not in ("add", "remove", "modify"):
            raise Problem(f"{path}[0]", f"unknown action {action!r}; accepted: add, remove, "
                                        "modify")
        if len(change) == 2 and action not in ("add", "remove") and (
                isinstance(action, bool) or not isinstance(action, int)):
            raise Problem(f"{path}[0]", f"expected add, remove or an index, got {action!r}")
        if len(change) == 3 and (isinstance(change[1], bool)
                                 or not isinstance(change[1], int | str)):
            raise Problem(f"{path}[1]", "expected an index (-1: the end), a name or a UUID, "
                                        f"got {change[1]!r}")
        _check_item(f"{path}[{len(change) - 1}]", change[-1], shape)


# -- parameter families --------------------------------------------------------------

def _check_family(path: str, family: str, specs: Mapping[str, ParamSpec], values: Any, *,
                  instance_level: bool = False) -> None:
    """Names and value types of one parameter family (``None`` and ``"default"`` reset),
    checked by :func:`~corral.objects.params.validate_params` itself, so a submission
    is refused with the words the logical unit would use (``family`` is its label:
    "backend", "kvm hypervisor" ...), Ganeti's legacy ``memory`` included."""
    if values is None:
        return
    if not isinstance(values, dict):
        raise Problem(path, f"expected an object of {family} parameters, got {values!r}")
    for name, value in values.items():
        try:
            validate_params(family, specs, {name: value}, instance_level=instance_level)
        except UnknownParameterError as err:
            raise Problem(f"{path}.{name}", err.message, unknown=True) from None
        except ParameterError as err:
            raise Problem(f"{path}.{name}", err.message) from None


def _hv_specs(hypervisor: str | None) -> Mapping[str, ParamSpec]:
    """The hypervisor's parameters, or every hypervisor's when it is not known here
    (the cluster's default applies)."""
    if hypervisor in HV_PARAMS:
        return HV_PARAMS[hypervisor]
    merged: dict[str, ParamSpec] = {}
    for specs in HV_PARAMS.values():
        for name, spec in specs.items():
            merged.setdefault(name, spec)
    return merged


def _check_nested(path: str, family: str, specs: Mapping[str, Mapping[str, ParamSpec]],
                  what: str, values: Any) -> None:
    """``{hypervisor or disk template: {parameter: value}}``."""
    if values is None:
        return
    if not isinstance(values, dict):
        raise Problem(path, f"expected an object keyed by {what}, got {values!r}")
    for key, inner in values.items():
        if key not in specs:
            raise Problem(f"{path}.{key}", f"unknown {what} {key!r}; {did_you_mean(key, specs)}",
                          unknown=True)
        _check_family(f"{path}.{key}", f"{key} {family}", specs[key], inner)


def _check_instance_params(op: Any) -> None:
    _check_family("beparams", "backend", BE_PARAMS, op.beparams, instance_level=True)
    hypervisor = getattr(op, "hypervisor", None)
    label = f"{hypervisor} hypervisor" if hypervisor in HV_PARAMS else "hypervisor"
    _check_family("hvparams", label, _hv_specs(hypervisor), op.hvparams, instance_level=True)


def _check_create(op: Any) -> None:
    _check_items("disks", op.disks, _Disk)
    _check_items("nics", op.nics, _Nic)
    _check_instance_params(op)


def _check_modify(op: Any) -> None:
    _check_changes("disks", op.disks, _DiskChange)
    _check_changes("nics", op.nics, _Nic)
    _check_instance_params(op)


def _check_ndparams(op: Any) -> None:
    _check_family("ndparams", "node", ND_PARAMS, op.ndparams)


def _check_group(op: Any) -> None:
    _check_ndparams(op)
    _check_nested("diskparams", "disk", DISK_PARAMS, "disk template", op.diskparams)


def _check_cluster(op: Any) -> None:
    _check_nested("hvparams", "hypervisor", HV_PARAMS, "hypervisor", op.hvparams)
    _check_family("beparams", "backend", BE_PARAMS, op.beparams)
    _check_family("nicparams", "NIC", NIC_PARAMS, op.nicparams)
    _check_ndparams(op)
    _check_nested("diskparams", "disk", DISK_PARAMS, "disk template", op.diskparams)


def _check_ip(path: str, value: Any, version: int, network: bool) -> None:
    if value is None:
        return
    kind = "network" if network else "address"
    try:
        parsed = (ipaddress.ip_network(value, strict=True) if network
                  else ipaddress.ip_address(value))
    except ValueError as exc:
        raise Problem(path, f"invalid IPv{version} {kind} {value!r} ({exc}); expected "
                      f"{_IP_EXAMPLES[version, network]}") from None
    if parsed.version != version:
        raise Problem(path, f"invalid IPv{version} {kind} {value!r}: it is an "
                      f"IPv{parsed.version} one; expected {_IP_EXAMPLES[version, network]}")


#: Examples of each kind of address in the messages of :func:`_check_ip`.
_IP_EXAMPLES: Final = {
    (4, True): "CIDR notation with no host bits set, such as 192.0.2.0/24",
    (4, False): "an address such as 192.0.2.1",
    (6, True): "CIDR notation with no host bits set, such as 2001:db8::/64",
    (6, False): "an address such as 2001:db8::1",
}


def _check_network(op: Any) -> None:
    """The addresses of a network add or modify, checked when the job is submitted (as
    Ganeti's opcode types do); the pool's size limits stay with the logical unit."""
    adding = op.OP_ID == "OP_NETWORK_ADD"
    if adding:
        _check_ip("network", op.network, 4, network=True)
    for key, version, network in (("gateway", 4, False), ("network6", 6, True),
                                  ("gateway6", 6, False)):
        value = getattr(op, key)
        # A modify unsets a value given as "none" or "" (the logical unit's reading).
        if adding or not (isinstance(value, str) and value.lower() in ("", "none")):
            _check_ip(key, value, version, network)
    for key in ("add_reserved_ips", "remove_reserved_ips"):
        for index, address in enumerate(getattr(op, key, None) or ()):
            _check_ip(f"{key}[{index}]", address, 4, network=False)


_CHECKS: Final = {
    "OP_NETWORK_ADD": _check_network,
    "OP_NETWORK_SET_PARAMS": _check_network,
    "OP_INSTANCE_CREATE": _check_create,
    "OP_INSTANCE_SET_PARAMS": _check_modify,
    "OP_INSTANCE_STARTUP": _check_instance_params,
    "OP_NODE_ADD": _check_ndparams,
    "OP_NODE_SET_PARAMS": _check_ndparams,
    "OP_GROUP_ADD": _check_group,
    "OP_GROUP_SET_PARAMS": _check_group,
    "OP_CLUSTER_SET_PARAMS": _check_cluster,
}


def check_shapes(op: Any) -> None:
    """Check the free-form parameters of a decoded opcode.

    :raises Problem: naming the wrong value's path and what is accepted there.
    """
    check = _CHECKS.get(op.OP_ID)
    if check is not None:
        check(op)


# -- references ------------------------------------------------------------------------

#: What a parameter names: a node, a node group, several nodes, or an OS.
Reference = Literal["node", "nodes", "nodegroup", "os"]

#: Per opcode, the parameters that name existing objects, and what they name. The
#: instance an opcode is about (``instance_name``, from RAPI's URL) is not listed: the
#: logical unit reports a missing one.
REFERENCES: Final[Mapping[str, Mapping[str, Reference]]] = {
    "OP_INSTANCE_CREATE": {"pnode": "node", "pnode_uuid": "node", "snode": "node",
                           "snode_uuid": "node", "group_name": "nodegroup", "os_type": "os"},
    "OP_INSTANCE_SET_PARAMS": {"pnode": "node", "pnode_uuid": "node", "remote_node": "node",
                               "remote_node_uuid": "node", "os_name": "os"},
    "OP_INSTANCE_REINSTALL": {"os_type": "os"},
    "OP_INSTANCE_MIGRATE": {"target_node": "node", "target_node_uuid": "node"},
    "OP_INSTANCE_FAILOVER": {"target_node": "node", "target_node_uuid": "node"},
    "OP_INSTANCE_MOVE": {"target_node": "node", "target_node_uuid": "node"},
    "OP_NODE_ADD": {"group": "nodegroup"},
    "OP_GROUP_ASSIGN_NODES": {"nodes": "nodes", "node_uuids": "nodes"},
    "OP_TEST_DELAY": {"on_nodes": "nodes", "on_node_uuids": "nodes"},
}
