"""Tags of the cluster (``/2/tags``), nodes, node groups, instances and networks
(``.../tags``).

Tags to add or remove are given as repeated query arguments, ``?tag=a&tag=b``, as in
Ganeti. A body holding a list of strings is accepted and ignored, as Ganeti does:
its client library sends the tags that way too when adding node tags.
"""

from __future__ import annotations

from typing import Final

from corral.rapi.request import RapiRequest

__all__ = ["TAG_KINDS", "add", "get", "remove"]

#: The path parameter naming the tagged object -> the tag kind of ``OP_TAGS_*``.
TAG_KINDS: Final = {"node_name": "node", "group_name": "nodegroup",
                    "instance_name": "instance", "network_name": "network"}


def _target(req: RapiRequest) -> tuple[str, str | None]:
    for param, kind in TAG_KINDS.items():
        if param in req.path_args:
            return kind, req.item(param)
    return "cluster", None




async def get(req: RapiRequest) -> list[str]:
    """The object's tags."""
    kind, name = _target(req)
    tags: list[str] = await req.call("QueryTags", kind, name or "")
    return list(tags)


async def _change(req: RapiRequest, op_id: str) -> int:
    kind, name = _target(req)
    return await req.submit(req.opcode(op_id, {
        "kind": kind, "name": name, "tags": req.texts("tag"), "dry_run": req.flag("dry-run"),
    }, from_body=False))


async def add(req: RapiRequest) -> int:
    """Add the tags; a job id."""
    return await _change(req, "OP_TAGS_SET")


async def remove(req: RapiRequest) -> int:
    """Remove the tags; a job id."""
    return await _change(req, "OP_TAGS_DEL")
