"""Tag operations: get, set, delete and search tags (the cluster's, for now).

Tags follow Ganeti's rules: at most 128 characters from letters, digits and
``.+*/:@-_``, at most 4096 per object.
"""

from __future__ import annotations

import re
from typing import Any

from corral.cmdlib.base import LogicalUnit
from corral.errors import OpPrereqError, ParameterError
from corral.opcodes import OpTagsDel, OpTagsGet, OpTagsSearch, OpTagsSet

__all__ = ["MAX_TAGS_PER_OBJECT", "MAX_TAG_LENGTH", "LUTagsDel", "LUTagsGet", "LUTagsSearch",
           "LUTagsSet", "check_tag"]

#: Longest tag accepted.
MAX_TAG_LENGTH = 128
#: Most tags one object may carry.
MAX_TAGS_PER_OBJECT = 4096

_TAG_RE = re.compile(r"^[\w.+*/:@-]+$")


def check_tag(tag: str) -> None:
    """Refuse a tag that is empty, too long or has characters outside the allowed set."""
    if not tag:
        raise ParameterError("empty tags are not allowed")
    if len(tag) > MAX_TAG_LENGTH:
        raise ParameterError(
            f"tag too long ({len(tag)} characters, at most {MAX_TAG_LENGTH}): {tag[:20]}..."
        )
    if not _TAG_RE.match(tag):
        raise ParameterError(
            f"tag {tag!r} contains invalid characters; allowed: letters, digits and . + * / : @ - _"
        )


class LUTagsGet(LogicalUnit[OpTagsGet]):
    """``OP_TAGS_GET``: an object's tags."""

    OP_ID = "OP_TAGS_GET"
    USES_BGL = False

    async def execute(self) -> list[str]:
        """The cluster's tags, sorted."""
        return sorted(self.master.store.cluster.tags)


class LUTagsSearch(LogicalUnit[OpTagsSearch]):
    """``OP_TAGS_SEARCH``: ``[path, tag]`` for each tag matching a regular expression."""

    OP_ID = "OP_TAGS_SEARCH"
    USES_BGL = False

    def check_arguments(self) -> None:
        """The pattern must be a valid regular expression."""
        try:
            self._pattern = re.compile(self.op.pattern)
        except re.error as err:
            raise ParameterError(f"invalid search pattern {self.op.pattern!r}: {err}") from None

    async def execute(self) -> list[list[str]]:
        """Search every tagged object (the cluster is ``/cluster``)."""
        return [["/cluster", tag] for tag in sorted(self.master.store.cluster.tags)
                if self._pattern.search(tag)]


class LUTagsSet(LogicalUnit[OpTagsSet]):
    """``OP_TAGS_SET``: add tags; tags already there are kept once."""

    OP_ID = "OP_TAGS_SET"

    def check_arguments(self) -> None:
        """Every tag must be well formed."""
        for tag in self.op.tags:
            check_tag(tag)

    async def execute(self) -> None:
        """Add the tags to the cluster and commit."""
        with self.master.store.transaction() as txn:
            cluster = txn.cluster()
            tags = list(cluster.tags)
            tags.extend(t for t in dict.fromkeys(self.op.tags) if t not in tags)
            if len(tags) > MAX_TAGS_PER_OBJECT:
                raise OpPrereqError(
                    f"too many tags: the cluster would have {len(tags)}, at most "
                    f"{MAX_TAGS_PER_OBJECT} are allowed"
                )
            if self.op.dry_run or tags == cluster.tags:
                txn.discard()
                return
            cluster.tags = tags
            txn.update(cluster)


class LUTagsDel(LogicalUnit[OpTagsDel]):
    """``OP_TAGS_DEL``: remove tags; every one of them must be there."""

    OP_ID = "OP_TAGS_DEL"

    async def execute(self) -> Any:
        """Remove the tags from the cluster and commit."""
        with self.master.store.transaction() as txn:
            cluster = txn.cluster()
            missing = sorted(set(self.op.tags) - set(cluster.tags))
            if missing:
                raise OpPrereqError(
                    f"tag(s) {', '.join(repr(t) for t in missing)} not found on the cluster"
                )
            if self.op.dry_run:
                txn.discard()
                return None
            cluster.tags = [t for t in cluster.tags if t not in set(self.op.tags)]
            txn.update(cluster)
        return None
