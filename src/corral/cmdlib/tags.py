"""Tag operations: get, set, delete and search the tags of the cluster, nodes, node
groups, instances and networks (Ganeti's tag kinds ``cluster``, ``node``,
``nodegroup``, ``instance``, ``network``).

For every kind but ``cluster`` the opcode's ``name`` names the object (a name or a
UUID). Tags follow Ganeti's rules: at most 128 characters from letters, digits and
``.+*/:@-_``, at most 4096 per object. Changing a node's, group's or instance's tags
takes that object's lock; reading takes none (one consistent snapshot).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, TypeVar, cast

from corral.cmdlib.base import LockRequest, LogicalUnit
from corral.cmdlib.common import expand_group, expand_instance, expand_node
from corral.cmdlib.query import NamedKind, named_lookup
from corral.errors import NotFoundError, OpPrereqError, ParameterError, TagError
from corral.locking import LockLevel
from corral.objects import ConfigObject
from corral.opcodes import TAG_KINDS, OpTagsDel, OpTagsGet, OpTagsSearch, OpTagsSet

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.config.transaction import Transaction

__all__ = ["MAX_TAGS_PER_OBJECT", "MAX_TAG_LENGTH", "LUTagsDel", "LUTagsGet", "LUTagsSearch",
           "LUTagsSet", "check_tag", "object_tags"]

#: Longest tag accepted.
MAX_TAG_LENGTH = 128
#: Most tags one object may carry.
MAX_TAGS_PER_OBJECT = 4096

_TAG_RE = re.compile(r"^[\w.+*/:@-]+$")

#: The lock level of each kind whose objects have locks.
_LOCK_LEVELS = {
    "node": LockLevel.NODE,
    "nodegroup": LockLevel.NODEGROUP,
    "instance": LockLevel.INSTANCE,
    "network": LockLevel.NETWORK,
}
_WHAT = {"node": "node", "nodegroup": "node group", "instance": "instance",
         "network": "network"}

_ChangeOp = TypeVar("_ChangeOp", OpTagsSet, OpTagsDel)


def check_tag(tag: str) -> None:
    """Refuse a tag that is empty, too long or has characters outside the allowed set;
    the first line of each refusal is Ganeti's, corral's detail follows."""
    if not tag:
        raise TagError("Tags cannot be empty")
    if len(tag) > MAX_TAG_LENGTH:
        raise TagError(f"Tag too long (>{MAX_TAG_LENGTH} characters)\n"
                       f"{len(tag)} characters: {tag[:20]}...")
    if not _TAG_RE.match(tag):
        raise TagError(f"Tag contains invalid characters\n{tag!r}: allowed are letters, "
                       "digits and . + * / : @ - _")


def _target(store: ConfigStore, kind: str, name: str | None) -> ConfigObject:
    """The object whose tags ``kind``/``name`` mean (shared: do not mutate)."""
    if kind == "cluster":
        return store.cluster
    if kind not in TAG_KINDS:
        raise ParameterError(f"unknown tag kind {kind!r}; kinds: {', '.join(TAG_KINDS)}")
    if not name:
        raise ParameterError(f"tags of kind {kind!r} need the name (or UUID) of the {_WHAT[kind]}")
    if kind == "node":
        return expand_node(store, name)
    if kind == "nodegroup":
        return expand_group(store, name)
    if kind == "network":
        found = store.find("network", name)
        if found is None:
            raise NotFoundError(f"Network name {name} not found; see gnt-network list")
        return found
    return expand_instance(store, name)


def object_tags(store: ConfigStore, kind: str, name: str | None) -> list[str]:
    """The sorted tags of one object (what luxi ``QueryTags(kind, name)`` answers).

    The object is found as queries find it (Ganeti's ``list-tags`` asks a query), so
    an unknown one is refused in the query's words: ``Instance name x not found``.
    """
    if kind in ("node", "nodegroup", "instance", "network") and name:
        return sorted(named_lookup(store, cast(NamedKind, kind))(name).tags)
    return sorted(_target(store, kind, name).tags)


def _describe(kind: str, obj: ConfigObject) -> str:
    if kind == "cluster":
        return "the cluster"
    return f"{_WHAT[kind]} {getattr(obj, 'name', obj.uuid)}"


class _TagsChange(LogicalUnit[_ChangeOp]):
    """What setting and deleting share: find the object, lock it, change a copy."""

    def check_arguments(self) -> None:
        """Every tag must be well formed."""
        for tag in self.op.tags:
            check_tag(tag)

    def expand_names(self) -> None:
        """Find the object (name or UUID); remember its UUID and lock name."""
        target = _target(self.master.store, self.op.kind, self.op.name)
        self._uuid = target.uuid
        self._lock_name = getattr(target, "name", "")

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The object's own lock, exclusively (nothing for the cluster)."""
        level = _LOCK_LEVELS.get(self.op.kind)
        return {} if level is None else {level: LockRequest([self._lock_name])}

    def check_prereq(self) -> None:
        """The object must still exist now that it is locked."""
        if self.op.kind != "cluster" and self.master.store.find(self.op.kind, self._uuid) is None:
            raise NotFoundError(
                f"{_WHAT[self.op.kind]} {self._lock_name} was removed while waiting for its lock"
            )

    def _copy(self, txn: Transaction) -> ConfigObject:
        if self.op.kind == "cluster":
            return txn.cluster()
        return txn.get(self.op.kind, self._uuid)


class LUTagsGet(LogicalUnit[OpTagsGet]):
    """``OP_TAGS_GET``: an object's tags."""

    OP_ID = "OP_TAGS_GET"
    USES_BGL = False

    async def execute(self) -> list[str]:
        """The object's tags, sorted."""
        return object_tags(self.master.store, self.op.kind, self.op.name)


class LUTagsSearch(LogicalUnit[OpTagsSearch]):
    """``OP_TAGS_SEARCH``: ``[path, tag]`` for each tag matching a regular expression."""

    OP_ID = "OP_TAGS_SEARCH"
    USES_BGL = False

    def check_arguments(self) -> None:
        """The pattern must be a valid regular expression."""
        try:
            self._pattern = re.compile(self.op.pattern)
        except re.error as err:
            raise ParameterError(f"Invalid search pattern {self.op.pattern!r}: {err}") from None

    async def execute(self) -> list[list[str]]:
        """Search every tagged object: ``/cluster``, ``/instances/<name>``,
        ``/nodes/<name>``, ``/nodegroup/<name>`` and ``/network/<name>`` (Ganeti's paths)."""
        store = self.master.store
        targets: list[tuple[str, ConfigObject]] = [("/cluster", store.cluster)]
        for prefix, kind in (("instances", "instance"), ("nodes", "node"),
                             ("nodegroup", "nodegroup"), ("network", "network")):
            targets.extend((f"/{prefix}/{obj.name}", obj) for obj in store.all(kind))
        return [[path, tag] for path, obj in targets for tag in sorted(obj.tags)
                if self._pattern.search(tag)]


class LUTagsSet(_TagsChange[OpTagsSet]):
    """``OP_TAGS_SET``: add tags; tags already there are kept once."""

    OP_ID = "OP_TAGS_SET"

    async def execute(self) -> None:
        """Add the tags to the object and commit."""
        async with self.master.store.transaction() as txn:
            obj = self._copy(txn)
            tags = list(obj.tags)
            tags.extend(t for t in dict.fromkeys(self.op.tags) if t not in tags)
            if len(tags) > MAX_TAGS_PER_OBJECT:
                raise OpPrereqError(
                    f"too many tags: {_describe(self.op.kind, obj)} would have {len(tags)}, "
                    f"at most {MAX_TAGS_PER_OBJECT} are allowed"
                )
            if self.op.dry_run or tags == obj.tags:
                txn.discard()
                return
            obj.tags = tags
            txn.update(obj)


class LUTagsDel(_TagsChange[OpTagsDel]):
    """``OP_TAGS_DEL``: remove tags; every one of them must be there."""

    OP_ID = "OP_TAGS_DEL"

    async def execute(self) -> Any:
        """Remove the tags from the object and commit."""
        async with self.master.store.transaction() as txn:
            obj = self._copy(txn)
            missing = sorted(set(self.op.tags) - set(obj.tags))
            if missing:
                raise OpPrereqError(
                    f"tag(s) {', '.join(repr(t) for t in missing)} not found on "
                    f"{_describe(self.op.kind, obj)}"
                )
            if self.op.dry_run:
                txn.discard()
                return None
            obj.tags = [t for t in obj.tags if t not in set(self.op.tags)]
            txn.update(obj)
        return None
