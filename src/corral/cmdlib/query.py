"""Generic queries (``OP_QUERY``, ``OP_QUERY_FIELDS``) and the field registries of the
resources the master daemon owns besides jobs: job filters and locks.

Field names are Ganeti's: filters have ``uuid``, ``watermark``, ``priority``,
``predicates``, ``action`` and ``reason_trail``; locks have ``name``, ``mode``,
``owner`` and ``pending`` (a list of ``[mode, [owners]]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from corral.cmdlib.base import LogicalUnit, QueryResource
from corral.errors import ParameterError
from corral.locking import LockInfo
from corral.objects import FilterRule
from corral.opcodes import OpQuery, OpQueryFields
from corral.qlang import FieldRegistry

__all__ = ["FILTER_FIELDS", "LOCK_FIELDS", "LUQuery", "LUQueryFields", "find_resource", "resource"]

#: Fields of job filter rules (``gnt-filter list``, ``/2/filters``).
FILTER_FIELDS: FieldRegistry[None, FilterRule] = FieldRegistry("filter")
FILTER_FIELDS.add("uuid", "UUID", "text", "Filter rule UUID", lambda _c, f: f.uuid)
FILTER_FIELDS.add("watermark", "Watermark", "number",
                  "Highest job ID at the time the filter was added", lambda _c, f: f.watermark)
FILTER_FIELDS.add("priority", "Priority", "number",
                  "Rules are tried in increasing priority", lambda _c, f: f.priority)
FILTER_FIELDS.add("predicates", "Predicates", "other",
                  "All must hold for the rule to apply", lambda _c, f: f.predicates)
FILTER_FIELDS.add("action", "Action", "other",
                  "What happens to jobs the rule applies to", lambda _c, f: f.action)
FILTER_FIELDS.add("reason_trail", "ReasonTrail", "other",
                  "Why the rule was added", lambda _c, f: f.reason_trail)

#: Fields of locks (``gnt-debug locks``).
LOCK_FIELDS: FieldRegistry[None, LockInfo] = FieldRegistry("lock")
LOCK_FIELDS.add("name", "Name", "text", "Level and name of the lock", lambda _c, lock: lock.name)
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
