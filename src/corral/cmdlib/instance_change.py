"""Instance changes that are not its life cycle: modify, disks, migration, move, console."""

from __future__ import annotations

from typing import Any

from corral.cmdlib.base import LogicalUnit, MasterContext, QueryResource

__all__ = ["UNITS", "query_resources"]

#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = ()


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """This area answers no query resource of its own."""
    return {}
