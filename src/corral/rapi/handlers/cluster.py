"""``/``, ``/version``, ``/2``, ``/2/info``, ``/2/features``, ``/2/modify``,
and ``/2/redistribute-config`` (``/openapi.json`` is served by the route table,
:func:`corral.rapi.routes.document`)."""

from __future__ import annotations

from typing import Any, Final

from corral.rapi.request import RapiRequest

__all__ = ["FEATURES", "RAPI_VERSION", "features", "info", "modify",
           "redistribute_config", "root", "version"]

#: The remote API version (``/version``); new resources go under ``/2``.
RAPI_VERSION: Final = 2

#: The optional features ``/2/features`` announces, oldest first, with what each one
#: added. Clients look for these strings before using a newer request format.
FEATURES: Final[tuple[tuple[str, str], ...]] = (
    ("instance-create-reqv1",
     "POST /2/instances takes a body with __version__ 1: the opcode's parameters"),
    ("instance-reinstall-reqv1",
     "POST /2/instances/[name]/reinstall takes a body: os, start, osparams"),
    ("node-migrate-reqv1",
     "POST /2/nodes/[name]/migrate takes a body: OP_NODE_MIGRATE's parameters"),
    ("node-evac-res1",
     "POST /2/nodes/[name]/evacuate answers a job whose result lists the jobs moving the "
     "instances"),
)

#: Keys ``/2/info`` also gives under the name Ganeti's opcodes use.
_INFO_ALIASES: Final = {"volume_group_name": "vg_name", "drbd_usermode_helper": "drbd_helper"}


async def root(req: RapiRequest) -> None:
    """``/`` and ``/2``: kept for old clients; answer null."""
    return None


async def version(req: RapiRequest) -> int:
    """The remote API version."""
    return RAPI_VERSION


async def info(req: RapiRequest) -> dict[str, Any]:
    """The cluster's settings (luxi ``QueryClusterInfo``), with Ganeti's alias keys."""
    result: dict[str, Any] = await req.call("QueryClusterInfo")
    for key, alias in _INFO_ALIASES.items():
        if key in result and alias not in result:
            result[alias] = result[key]
    return result


async def features(req: RapiRequest) -> list[str]:
    """The optional features this server implements."""
    return [name for name, _what in FEATURES]


async def modify(req: RapiRequest) -> int:
    """Change cluster parameters: ``OP_CLUSTER_SET_PARAMS`` from the body."""
    return await req.submit(req.opcode("OP_CLUSTER_SET_PARAMS", {}))


async def redistribute_config(req: RapiRequest) -> int:
    """Resynchronise the nodes: ``OP_CLUSTER_REDIST_CONF``; a job id."""
    return await req.submit(req.opcode("OP_CLUSTER_REDIST_CONF", {}, from_body=False))
