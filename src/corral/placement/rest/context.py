"""What one handler call gets: the engine, the request, its microversion, the path's
arguments, the query string, and the record of what it changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from email.utils import formatdate
from urllib.parse import parse_qsl

from corral.placement.model import PlacementStore
from corral.placement.rest.protocol import Changes, HttpProblem, PlacementRequest, Version

__all__ = ["Call", "cache_headers", "forbid_read_only"]


@dataclass
class Call:
    """One call to a handler."""

    store: PlacementStore
    req: PlacementRequest
    version: Version
    args: dict[str, str]
    changes: Changes = field(default_factory=Changes)

    @property
    def params(self) -> list[tuple[str, str]]:
        """The query string as ``(key, value)`` pairs, repeats and blanks kept."""
        return parse_qsl(self.req.query, keep_blank_values=True)

    def at_least(self, minor: int) -> bool:
        """Whether the call is at microversion ``1.minor`` or later."""
        return self.version >= (1, minor)

    def url(self, path: str) -> str:
        """A link to ``path`` below the mount point."""
        return f"{self.req.prefix}{path}"


def forbid_read_only(call: Call, action: str) -> None:
    """403 when the caller may only read."""
    if call.req.read_only:
        raise HttpProblem(403, f"Policy does not allow placement:{action} to be performed: "
                               f"user {call.req.user!r} has no 'write' option",
                          code="placement.undefined_code")


def cache_headers(call: Call) -> dict[str, str]:
    """``Cache-Control`` and ``Last-Modified`` (the time of the answer) from 1.15, for
    the bodiless answers that carry them in Placement (the router adds them to every
    answer with a body)."""
    if not call.at_least(15):
        return {}
    return {"Cache-Control": "no-cache", "Last-Modified": formatdate(usegmt=True)}
