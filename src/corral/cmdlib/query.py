"""Generic queries (``OP_QUERY``, ``OP_QUERY_FIELDS``) and the field registries of the
resources the master daemon owns besides jobs: job filters and locks.

Field names are Ganeti's: filters have ``uuid``, ``watermark``, ``priority``,
``predicates``, ``action`` and ``reason_trail``; locks have ``name``, ``mode``,
``owner`` and ``pending`` (a list of ``[mode, [owners]]``). Every filter field has the
kind ``other``, as in Ganeti.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from corral.cmdlib.base import LogicalUnit, QueryResource
from corral.errors import NotFoundError, ParameterError, did_you_mean
from corral.locking import LockInfo
from corral.objects import FilterRule
from corral.opcodes import OpQuery, OpQueryFields
from corral.qlang import FieldRegistry
from corral.utils.nicesort import nice_sorted

if TYPE_CHECKING:
    from corral.config import ConfigStore

__all__ = ["FILTER_FIELDS", "LOCK_FIELDS", "LUQuery", "LUQueryFields", "NamedKind",
           "find_resource", "named_lookup", "resource"]

NamedKind = Literal["node", "nodegroup", "instance", "network"]

#: How Ganeti's query names an object kind in its "not found" error, and the command
#: listing the objects of the kind.
_NOUNS: dict[str, tuple[str, str, str]] = {
    "instance": ("Instance", "instance", "gnt-instance list"),
    "node": ("Node", "node", "gnt-node list"),
    "nodegroup": ("NodeGroup", "node group", "gnt-group list"),
    "network": ("Network", "network", "gnt-network list"),
}


def named_lookup(store: ConfigStore, kind: NamedKind) -> Callable[[str], Any]:
    """How a query finds an object it was asked for by name: by name or UUID, else by
    the unique name of which ``key`` is the first DNS labels (``node1`` for
    ``node1.example.com``), as Ganeti's queries do.

    An unknown name is a :class:`NotFoundError` (Ganeti's ``unknown_entity``) whose
    first line is Ganeti's (``Instance name web9 not found``), then the known names
    nearest to it.
    """
    noun, plain, listing = _NOUNS[kind]

    def lookup(key: str) -> Any:
        found = store.find(kind, key)
        if found is not None:
            return found
        objects = store.all(kind)
        longer = [obj for obj in objects if obj.name.startswith(key + ".")]
        if len(longer) == 1:
            return longer[0]
        hint = did_you_mean(key, nice_sorted(obj.name for obj in objects),
                            noun=f"known {plain} names", listing=listing)
        raise NotFoundError(f"{noun} name {key} not found\n{hint}")

    return lookup

#: Fields of job filter rules (``gnt-filter list``, ``/2/filters``).
FILTER_FIELDS: FieldRegistry[None, FilterRule] = FieldRegistry("filter")
FILTER_FIELDS.add("uuid", "UUID", "other", "Filter rule UUID", lambda _c, f: f.uuid)
FILTER_FIELDS.add("watermark", "Watermark", "other",
                  "Highest job ID at the time the filter was added", lambda _c, f: f.watermark)
FILTER_FIELDS.add("priority", "Priority", "other",
                  "Rules are tried in increasing priority", lambda _c, f: f.priority)
FILTER_FIELDS.add("predicates", "Predicates", "other",
                  "All must hold for the rule to apply", lambda _c, f: f.predicates)
FILTER_FIELDS.add("action", "Action", "other",
                  "What happens to jobs the rule applies to", lambda _c, f: f.action)
FILTER_FIELDS.add("reason_trail", "ReasonTrail", "other",
                  "Why the rule was added", lambda _c, f: f.reason_trail)

#: Fields of locks (``gnt-debug locks``).
LOCK_FIELDS: FieldRegistry[None, LockInfo] = FieldRegistry("lock")
LOCK_FIELDS.add("name", "Name", "other", "Level and name of the lock", lambda _c, lock: lock.name)
LOCK_FIELDS.add("mode", "Mode", "other", "exclusive or shared while held; empty when free",
                lambda _c, lock: lock.mode)
LOCK_FIELDS.add("owner", "Owner", "other", "Holders of the lock",
                lambda _c, lock: list(lock.holders))
LOCK_FIELDS.add(
    "pending", "Pending", "other", "Waiters, in queue order: [mode, [owners]]",
    lambda _c, lock: [[p.mode, list(p.owners)] for p in lock.pending],
)


def resource(registry: FieldRegistry[None, Any], items: Any) -> QueryResource:
    """A query resource over ``registry`` whose items come from calling ``items()``."""

    async def query(fields: list[str], qfilter: Any) -> dict[str, Any]:
        return registry.query(items(), fields, qfilter, None)

    return QueryResource(query=query, query_fields=registry.query_fields)


def find_resource(
    what: str, known: Mapping[str, QueryResource], also: Iterable[str] = ()
) -> QueryResource:
    """The resource called ``what``; the error lists ``known`` and ``also`` (answered
    elsewhere, such as jobs by the queue)."""
    found = known.get(what)
    if found is None:
        names = ", ".join(sorted({*known, *also}))
        raise ParameterError(f"cannot query resource {what!r}; resources: {names}")
    return found


class LUQuery(LogicalUnit[OpQuery]):
    """``OP_QUERY``: selected fields of a resource's items that pass a filter."""

    OP_ID = "OP_QUERY"
    USES_BGL = False

    async def execute(self) -> dict[str, Any]:
        """Answer with Ganeti's QueryResponse."""
        return await find_resource(self.op.what, self.master.queries).query(
            list(self.op.fields), self.op.qfilter)


class LUQueryFields(LogicalUnit[OpQueryFields]):
    """``OP_QUERY_FIELDS``: the definitions of a resource's fields."""

    OP_ID = "OP_QUERY_FIELDS"
    USES_BGL = False

    async def execute(self) -> dict[str, Any]:
        """Answer with Ganeti's QueryFieldsResponse."""
        fields = None if self.op.fields is None else list(self.op.fields)
        return find_resource(self.op.what, self.master.queries).query_fields(fields)
