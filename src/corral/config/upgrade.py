"""Bringing stores written by older versions up to the current object format.

Rows are first decoded as plain dicts, then, in this order:

1. objects without a ``uuid`` (or with an empty one) get a fresh one;
2. disks stored inline in an instance (Ganeti 2.0 style) become disk objects;
3. nodes without a group join the first node group, created as ``default`` if
   there is none;
4. references by *name* (design 2.1: Ganeti 2.0 tracked nodes, groups and disks by
   name) are rewritten to UUIDs: node → group, instance → primary node and disks,
   disk → nodes, cluster → master node;
5. global hypervisor parameters (:data:`~corral.objects.params.HV_GLOBALS`, e.g.
   ``migration_port``) are dropped from instances' ``hvparams`` (design 2.1: only the
   cluster sets them; an older store, or one from before a parameter became global,
   may hold them per instance);
6. a cluster without an instance policy gets Ganeti's default one, allowing the
   disk templates it has enabled (as ``gnt-cluster init`` gives a new cluster);
7. each dict is converted to its class, which fills missing fields with defaults.

An object whose stored form differs from the result is reported as changed so the
caller writes it back (in one transaction). Anything that cannot be read raises
:class:`ConfigStoreError` naming the file, the row and the problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from corral.config.storage import RawRow
from corral.errors import ConfigStoreError
from corral.objects import KINDS, ConfigObject, new_uuid
from corral.objects.ipolicy import default_policy
from corral.objects.model import DEFAULT_DISK_TEMPLATES
from corral.objects.params import HV_GLOBALS
from corral.serializer import DecodeError, dumps, loads

__all__ = ["Upgraded", "upgrade"]

#: For each kind, the fields that refer to other objects: field -> (target kind, is list).
_REFERENCE_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "node": {"group": ("nodegroup", False)},
    "instance": {"primary_node": ("node", False), "disks": ("disk", True)},
    "disk": {"nodes": ("node", True)},
    "cluster": {"master_node": ("node", False)},
}


@dataclass
class _Entry:
    kind: str
    row_uuid: str | None
    data: dict[str, Any]
    changed: bool = False
    #: The stored JSON, to tell whether the object needs rewriting.
    stored: bytes = b""

    @property
    def uuid(self) -> str:
        return str(self.data["uuid"])


@dataclass
class Upgraded:
    """The result: every object, which ones to write back and which row keys to drop."""

    objects: dict[str, tuple[str, ConfigObject]] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    stale_rows: list[str] = field(default_factory=list)


def upgrade(path: Path, rows: list[RawRow]) -> Upgraded:
    """Decode and upgrade ``rows`` read from the store at ``path``."""
    entries = [_decode_row(path, row) for row in rows]
    entries.extend(_extract_inline_disks(entries))
    result = Upgraded()
    seen: set[str] = set()
    for entry in entries:
        _assign_uuid(entry, result)
        if entry.uuid in seen:
            raise ConfigStoreError(
                f"configuration store {path}: uuid {entry.uuid} is used by two rows"
            )
        seen.add(entry.uuid)
    entries.extend(_assign_groups(entries))
    _rewrite_names(entries)
    for entry in entries:
        _drop_global_hvparams(entry)
        _fill_ipolicy(entry)
        obj = _convert(path, entry)
        # Rows this version wrote encode back to the same bytes; anything else
        # (missing fields, unknown ones, other formatting) is written back.
        if entry.changed or dumps(obj) != entry.stored:
            result.changed.add(entry.uuid)
        result.objects[entry.uuid] = (entry.kind, obj)
    return result


def _decode_row(path: Path, row: RawRow) -> _Entry:
    where = f"configuration store {path}: {row.kind} row {row.uuid or '(no uuid)'}"
    if row.kind not in KINDS:
        raise ConfigStoreError(
            f"{where}: unknown kind {row.kind!r} (known: {', '.join(KINDS)})"
        )
    try:
        data = loads(row.json)
    except DecodeError as err:
        raise ConfigStoreError(f"{where}: the JSON does not decode: {err}") from None
    if not isinstance(data, dict):
        raise ConfigStoreError(f"{where}: expected a JSON object, got {type(data).__name__}")
    stored = row.json.encode() if isinstance(row.json, str) else row.json
    return _Entry(row.kind, row.uuid, data, stored=stored)


def _assign_uuid(entry: _Entry, result: Upgraded) -> None:
    uuid = entry.data.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        entry.data["uuid"] = uuid = entry.row_uuid or new_uuid()
        entry.changed = True
    if entry.row_uuid != uuid:
        entry.changed = True
        if entry.row_uuid is not None:
            result.stale_rows.append(entry.row_uuid)


def _extract_inline_disks(entries: list[_Entry]) -> list[_Entry]:
    """Turn disk dicts kept inside instances into disk objects referenced by UUID."""
    disks: list[_Entry] = []
    for entry in entries:
        if entry.kind != "instance" or not isinstance(entry.data.get("disks"), list):
            continue
        refs: list[Any] = []
        for item in entry.data["disks"]:
            if isinstance(item, dict):
                disk = dict(item)
                if not isinstance(disk.get("uuid"), str) or not disk["uuid"]:
                    disk["uuid"] = new_uuid()
                if "nodes" not in disk and "primary_node" in entry.data:
                    disk["nodes"] = [entry.data["primary_node"]]
                disks.append(_Entry("disk", None, disk, changed=True))
                refs.append(disk["uuid"])
                entry.changed = True
            else:
                refs.append(item)
        entry.data["disks"] = refs
    return disks


def _assign_groups(entries: list[_Entry]) -> list[_Entry]:
    """Put nodes without a group into the first group; create one if there is none."""
    orphans = [e for e in entries if e.kind == "node" and not e.data.get("group")]
    if not orphans:
        return []
    created: list[_Entry] = []
    groups = sorted(
        (e for e in entries if e.kind == "nodegroup"), key=lambda e: str(e.data.get("name"))
    )
    if groups:
        group_uuid = groups[0].uuid
    else:
        group_uuid = new_uuid()
        created.append(_Entry("nodegroup", None, {"uuid": group_uuid, "name": "default"}, True))
    for node in orphans:
        node.data["group"] = group_uuid
        node.changed = True
    return created


def _rewrite_names(entries: list[_Entry]) -> None:
    """Replace references by name with references by UUID."""
    uuids: dict[str, set[str]] = {kind: set() for kind in KINDS}
    names: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
    for entry in entries:
        uuids[entry.kind].add(entry.uuid)
        name = entry.data.get("name")
        if isinstance(name, str) and name:
            names[entry.kind].setdefault(name, entry.uuid)

    def resolve(kind: str, value: Any) -> Any:
        if not isinstance(value, str) or value in uuids[kind]:
            return value
        return names[kind].get(value, value)

    for entry in entries:
        for name, (kind, is_list) in _REFERENCE_FIELDS.get(entry.kind, {}).items():
            value = entry.data.get(name)
            if is_list and isinstance(value, list):
                new: Any = [resolve(kind, v) for v in value]
            elif not is_list:
                new = resolve(kind, value)
            else:
                continue
            if new != value:
                entry.data[name] = new
                entry.changed = True


def _drop_global_hvparams(entry: _Entry) -> None:
    """Remove the global hypervisor parameters an instance holds."""
    hvparams = entry.data.get("hvparams")
    if entry.kind != "instance" or not isinstance(hvparams, dict):
        return
    kept = {k: v for k, v in hvparams.items() if k not in HV_GLOBALS}
    if len(kept) != len(hvparams):
        entry.data["hvparams"] = kept
        entry.changed = True


def _fill_ipolicy(entry: _Entry) -> None:
    """Give a cluster stored before instance policies existed the default one."""
    if entry.kind != "cluster" or "ipolicy" in entry.data:
        return
    templates = entry.data.get("enabled_disk_templates")
    if not isinstance(templates, list):
        templates = list(DEFAULT_DISK_TEMPLATES)
    entry.data["ipolicy"] = default_policy(templates)
    entry.changed = True


def _convert(path: Path, entry: _Entry) -> ConfigObject:
    data = entry.data
    if entry.kind == "instance" and "admin_state" not in data and "admin_up" in data:
        data["admin_state"] = "up" if data["admin_up"] else "down"
    try:
        return msgspec.convert(data, KINDS[entry.kind])
    except msgspec.ValidationError as err:
        name = data.get("name")
        label = f"'{name}' ({entry.uuid})" if isinstance(name, str) else entry.uuid
        raise ConfigStoreError(
            f"configuration store {path}: {entry.kind} {label}: {err}"
        ) from None
