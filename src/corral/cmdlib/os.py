"""OS definitions as the cluster sees them: ``OP_OS_DIAGNOSE`` and the ``os`` query.

Every online, VM-capable node is asked once (``os_diagnose``, all nodes in one call)
which OS definitions it finds along the cluster's OS search path; the answers are
merged per OS name:

- ``valid``: the OS is present and valid on every node that answered, and every node
  reports the same ``os_version`` (a difference makes it invalid, and ``message``
  names the nodes and their versions);
- ``variants``, ``parameters``, ``api_versions``: what all those nodes have in common;
- ``node_status``: ``{node name: [[path, valid, message, variants, parameters,
  api_versions, trusted]]}`` (Ganeti's shape; an empty list where the node lacks it);
- ``hidden``, ``blacklisted``, ``os_hvp``, ``osparams``: from the cluster settings.

Nodes that fail to answer are left out, so one node being down does not make every
OS invalid (as Ganeti does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.cmdlib.base import LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.common import os_state_listed
from corral.errors import NotFoundError, did_you_mean
from corral.opcodes.os_ops import OpOsDiagnose
from corral.qlang import FieldRegistry, make_simple_filter

__all__ = ["OS_FIELDS", "UNITS", "LUOsDiagnose", "OsItem", "collect_os", "query_resources"]


@dataclass
class OsItem:
    """One OS definition, merged over the nodes that answered."""

    name: str
    valid: bool = True
    message: str = ""
    hidden: bool = False
    blacklisted: bool = False
    variants: list[str] = field(default_factory=list)
    parameters: list[list[str]] = field(default_factory=list)
    api_versions: list[int] = field(default_factory=list)
    os_version: str | None = None
    trusted: bool = True
    node_status: dict[str, list[list[Any]]] = field(default_factory=dict)
    os_hvp: dict[str, Any] = field(default_factory=dict)
    osparams: dict[str, Any] = field(default_factory=dict)


#: Fields of the ``os`` resource (Ganeti's, plus ``os_version`` and ``message``).
OS_FIELDS: FieldRegistry[None, OsItem] = FieldRegistry("os")
OS_FIELDS.add("name", "Name", "text", "Operating system name", lambda _c, o: o.name)
OS_FIELDS.add("valid", "Valid", "bool", "Whether operating system definition is valid",
              lambda _c, o: o.valid)
OS_FIELDS.add("hidden", "Hidden", "bool", "Whether operating system is hidden",
              lambda _c, o: o.hidden)
OS_FIELDS.add("blacklisted", "Blacklisted", "bool", "Whether operating system is blacklisted",
              lambda _c, o: o.blacklisted)
OS_FIELDS.add("variants", "Variants", "other", "Operating system variants",
              lambda _c, o: sorted(o.variants))
OS_FIELDS.add("api_versions", "ApiVersions", "other", "Operating system API versions",
              lambda _c, o: sorted(o.api_versions))
OS_FIELDS.add("parameters", "Parameters", "other",
              "Operating system parameters: [name, description]",
              lambda _c, o: sorted(o.parameters, key=lambda p: p[0]))
OS_FIELDS.add("node_status", "NodeStatus", "other",
              "Status from node: {node: [[path, valid, message, variants, parameters, "
              "api_versions, trusted]]}", lambda _c, o: o.node_status)
OS_FIELDS.add("os_hvp", "OsHypervisorParams", "other",
              "Operating system specific hypervisor parameters", lambda _c, o: o.os_hvp)
OS_FIELDS.add("osparams", "OsParameters", "other", "Operating system specific parameters",
              lambda _c, o: o.osparams)
OS_FIELDS.add("trusted", "Trusted", "bool", "Whether this OS is trusted",
              lambda _c, o: o.trusted)
OS_FIELDS.add("os_version", "OsVersion", "text",
              "Version the OS definition declares (null when not the same on all nodes)",
              lambda _c, o: o.os_version)
OS_FIELDS.add("message", "Message", "text", "Why the OS is not valid (empty when valid)",
              lambda _c, o: o.message)


def _entry(info: dict[str, Any]) -> list[Any]:
    return [
        info.get("path", ""), bool(info.get("valid")), info.get("message", ""),
        list(info.get("variants") or []), [list(p) for p in info.get("parameters") or []],
        list(info.get("api_versions") or []), bool(info.get("trusted", True)),
    ]


def _merge(name: str, per_node: dict[str, dict[str, Any] | None]) -> OsItem:
    """Merge one OS's per-node answers (None where the node does not have it)."""
    item = OsItem(name=name)
    item.node_status = {node: [] if info is None else [_entry(info)]
                        for node, info in sorted(per_node.items())}
    missing = sorted(node for node, info in per_node.items() if info is None)
    invalid = sorted(node for node, info in per_node.items()
                     if info is not None and not info.get("valid"))
    problems: list[str] = []
    if missing:
        problems.append(f"not found on node(s) {', '.join(missing)}")
    for node in invalid:
        info = per_node[node]
        assert info is not None
        problems.append(f"invalid on node {node}: {info.get('message') or 'no reason given'}")
    present = [info for _node, info in sorted(per_node.items())
               if info is not None and info.get("valid")]
    for index, info in enumerate(present):
        variants = set(info.get("variants") or [])
        params = {tuple(p) for p in info.get("parameters") or []}
        apis = set(info.get("api_versions") or [])
        if index == 0:
            all_variants, all_params, all_apis = variants, params, apis
        else:
            all_variants &= variants
            all_params &= params
            all_apis &= apis
        item.trusted = item.trusted and bool(info.get("trusted", True))
    if present:
        item.variants = sorted(all_variants)
        item.parameters = sorted([list(p) for p in all_params])
        item.api_versions = sorted(all_apis)
    versions: dict[str | None, list[str]] = {}
    for node, info in sorted(per_node.items()):
        if info is not None and info.get("valid"):
            versions.setdefault(info.get("os_version"), []).append(node)
    if len(versions) > 1:
        shown = "; ".join(
            f"{version if version is not None else '(none)'} on {', '.join(nodes)}"
            for version, nodes in sorted(versions.items(), key=lambda kv: str(kv[0]))
        )
        problems.append(f"os_version differs between nodes: {shown}")
    elif versions:
        item.os_version = next(iter(versions))
    item.valid = not problems and bool(present)
    item.message = "; ".join(problems)
    return item


async def collect_os(ctx: MasterContext) -> list[OsItem]:
    """Ask every online VM-capable node for its OS definitions (one RPC) and merge them."""
    store = ctx.store
    cluster = store.cluster
    nodes = [n for n in store.all("node") if not n.offline and n.vm_capable]
    if not nodes:
        return []
    results = await ctx.rpc.call(nodes, "os_diagnose",
                                 {"search_path": list(cluster.os_search_path)})
    answered: dict[str, list[dict[str, Any]]] = {
        name: list(result.payload or []) for name, result in results.items() if not result.failed
    }
    names = sorted({str(info["name"]) for infos in answered.values() for info in infos})
    items = []
    for os_name in names:
        per_node: dict[str, dict[str, Any] | None] = {}
        for node, infos in answered.items():
            per_node[node] = next((i for i in infos if i.get("name") == os_name), None)
        item = _merge(os_name, per_node)
        item.hidden = os_state_listed(cluster.hidden_os, os_name)
        item.blacklisted = os_state_listed(cluster.blacklisted_os, os_name)
        keys = [os_name, *(f"{os_name}+{v}" for v in item.variants)]
        item.os_hvp = {k: cluster.os_hvp[k] for k in keys if k in cluster.os_hvp}
        item.osparams = {k: cluster.osparams[k] for k in keys if k in cluster.osparams}
        items.append(item)
    return items


def diagnose_filter(fields: Sequence[str], names: Sequence[str]) -> list[Any] | None:
    """Ganeti's legacy filter of ``OP_OS_DIAGNOSE``: the names asked for, and no
    hidden, blacklisted or invalid OS unless that field is among ``fields``."""
    status: list[Any] = [["!", ["?", name]] for name in ("hidden", "blacklisted")
                         if name not in fields]
    if "valid" not in fields:
        status.append(["?", "valid"])
    parts = [f for f in (make_simple_filter("name", list(names)),
                         ["&", *status] if status else None) if f]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else ["&", *parts]


class LUOsDiagnose(LogicalUnit[OpOsDiagnose]):
    """``OP_OS_DIAGNOSE``: one row of ``output_fields`` per OS (``gnt-os``)."""

    OP_ID = "OP_OS_DIAGNOSE"
    USES_BGL = False

    async def execute(self) -> list[list[Any]]:
        """Ask the nodes, merge, filter as Ganeti does and return the rows."""
        items = await collect_os(self.master)
        known = {item.name for item in items}
        unknown = [name for name in self.op.names if name not in known]
        if unknown:
            hint = did_you_mean(unknown, sorted(known), noun="OSes found on the nodes",
                                listing="gnt-os list")
            raise NotFoundError(f"unknown OS {', '.join(unknown)}; {hint}")
        fields = list(self.op.output_fields)
        return OS_FIELDS.values(items, fields, diagnose_filter(fields, self.op.names), None)


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (LUOsDiagnose,)


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """The query resources this area answers (``OP_QUERY`` / luxi ``Query``)."""

    async def query(fields: list[str], qfilter: Any) -> dict[str, Any]:
        return OS_FIELDS.query(await collect_os(ctx), fields, qfilter, None)

    return {"os": QueryResource(query=query, query_fields=OS_FIELDS.query_fields)}
