"""ExtStorage providers as the cluster sees them: ``OP_EXT_STORAGE_DIAGNOSE`` and the
``extstorage`` query (``gnt-storage diagnose`` and ``info``).

Every online, VM-capable node is asked once (``extstorage_diagnose``, all nodes in one
call) which providers it finds along the cluster's ExtStorage search path; the
answers are merged per provider, with Ganeti's fields:

- ``node_status``: ``{node name: [[path, valid, message, [[parameter, description],
  ...]]]}``, an empty list where the node lacks the provider (Ganeti keys it by node
  UUID, and its ``gnt-storage diagnose`` then prints UUIDs where it means names;
  corral keys it by name);
- ``nodegroup_status``: ``{group name: valid}``, valid when every node of the group
  that answered has the provider valid (a group without such nodes counts as valid,
  as in Ganeti);
- ``parameters``: the ``[name, description]`` pairs every node that has the provider
  valid declares, in the first such node's order (nodes without it, or where it is
  invalid, do not count).

Nodes that fail to answer are left out, so one node being down does not make every
provider invalid (as Ganeti does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.cmdlib.base import LogicalUnit, MasterContext, QueryResource
from corral.errors import NotFoundError, did_you_mean
from corral.opcodes.os_ops import OpExtStorageDiagnose
from corral.paths import Paths
from corral.qlang import FieldRegistry, make_simple_filter

__all__ = ["EXTSTORAGE_FIELDS", "UNITS", "ExtStorageItem", "LUExtStorageDiagnose",
           "collect_providers", "query_resources"]


@dataclass
class ExtStorageItem:
    """One provider, merged over the nodes that answered."""

    name: str
    node_status: dict[str, list[list[Any]]] = field(default_factory=dict)
    nodegroup_status: dict[str, bool] = field(default_factory=dict)
    parameters: list[list[str]] = field(default_factory=list)


#: Fields of the ``extstorage`` resource (Ganeti's).
EXTSTORAGE_FIELDS: FieldRegistry[None, ExtStorageItem] = FieldRegistry("extstorage")
EXTSTORAGE_FIELDS.add("name", "Name", "text", "ExtStorage provider name",
                      lambda _c, e: e.name)
EXTSTORAGE_FIELDS.add("node_status", "NodeStatus", "other", "Status from node",
                      lambda _c, e: e.node_status)
EXTSTORAGE_FIELDS.add("nodegroup_status", "NodegroupStatus", "other",
                      "Overall Nodegroup status", lambda _c, e: e.nodegroup_status)
EXTSTORAGE_FIELDS.add("parameters", "Parameters", "other", "ExtStorage provider parameters",
                      lambda _c, e: e.parameters)


def _merge(name: str, per_node: dict[str, dict[str, Any] | None],
           groups: dict[str, list[str]]) -> ExtStorageItem:
    """One provider from its per-node answers (None where a node lacks it)."""
    item = ExtStorageItem(name=name)
    for node, info in sorted(per_node.items()):
        item.node_status[node] = [] if info is None else [[
            info.get("path", ""), bool(info.get("valid")), info.get("message", ""),
            [list(p) for p in info.get("parameters") or []]]]
    for group, members in sorted(groups.items()):
        answered = [per_node[n] for n in members if n in per_node]
        item.nodegroup_status[group] = all(
            info is not None and bool(info.get("valid")) for info in answered)
    valid = [info for _node, info in sorted(per_node.items())
             if info is not None and info.get("valid")]
    if valid:
        common = [list(p) for p in valid[0].get("parameters") or []]
        for info in valid[1:]:
            theirs = {tuple(p) for p in info.get("parameters") or []}
            common = [p for p in common if tuple(p) in theirs]
        item.parameters = common
    return item


async def collect_providers(ctx: MasterContext) -> list[ExtStorageItem]:
    """Ask every online VM-capable node for its providers (one RPC) and merge them."""
    store = ctx.store
    nodes = [n for n in store.all("node") if not n.offline and n.vm_capable]
    groups: dict[str, list[str]] = {g.name: [] for g in store.all("nodegroup")}
    group_names = {g.uuid: g.name for g in store.all("nodegroup")}
    for node in nodes:
        groups.setdefault(group_names.get(node.group, node.group), []).append(node.name)
    if not nodes:
        return []
    search_path = list(store.cluster.extstorage_search_path
                       or Paths.DEFAULT_EXTSTORAGE_SEARCH_PATH)
    results = await ctx.rpc.call(nodes, "extstorage_diagnose", {"search_path": search_path})
    answered: dict[str, list[dict[str, Any]]] = {
        node: list(result.payload or []) for node, result in results.items()
        if not result.failed}
    names = sorted({str(info["name"]) for infos in answered.values() for info in infos})
    items = []
    for name in names:
        per_node = {node: next((i for i in infos if i.get("name") == name), None)
                    for node, infos in answered.items()}
        items.append(_merge(name, per_node, groups))
    return items


class LUExtStorageDiagnose(LogicalUnit[OpExtStorageDiagnose]):
    """``OP_EXT_STORAGE_DIAGNOSE``: one row of ``output_fields`` per provider
    (``gnt-storage``)."""

    OP_ID = "OP_EXT_STORAGE_DIAGNOSE"
    USES_BGL = False

    async def execute(self) -> list[list[Any]]:
        """Ask the nodes, merge and return the rows of the providers asked for."""
        items = await collect_providers(self.master)
        known = {item.name for item in items}
        unknown = [name for name in self.op.names if name not in known]
        if unknown:
            hint = did_you_mean(unknown, sorted(known), noun="ExtStorage providers found "
                                "on the nodes", listing="gnt-storage diagnose")
            raise NotFoundError(f"unknown ExtStorage provider {', '.join(unknown)}; {hint}")
        fields = list(self.op.output_fields)
        return EXTSTORAGE_FIELDS.values(items, fields,
                                        make_simple_filter("name", list(self.op.names)),
                                        None)


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (LUExtStorageDiagnose,)


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """The query resources this area answers (``OP_QUERY`` / luxi ``Query``)."""

    async def query(fields: list[str], qfilter: Any) -> dict[str, Any]:
        return EXTSTORAGE_FIELDS.query(await collect_providers(ctx), fields, qfilter, None)

    return {"extstorage": QueryResource(query=query,
                                        query_fields=EXTSTORAGE_FIELDS.query_fields)}
