"""``/2/nodes``, ``/2/nodes/[name]``, ``/role``, ``/modify``, ``/evacuate`` and
``/migrate``."""

from __future__ import annotations

from typing import Any, Final

from corral.errors import InternalError, ParameterError
from corral.rapi.handlers.common import query_one, query_rows, uri_list
from corral.rapi.request import RapiRequest

__all__ = ["NODE_FIELDS", "ROLES", "evacuate", "get", "get_role", "index", "migrate",
           "modify", "set_role"]

#: Fields of each node in ``/2/nodes?bulk=1`` and ``/2/nodes/[name]`` (Ganeti's list;
#: ``sptotal`` and ``spfree`` are null: corral has no spindle accounting yet).
NODE_FIELDS: Final = (
    "name", "offline", "master_candidate", "drained", "dtotal", "dfree", "sptotal", "spfree",
    "mtotal", "mnode", "mfree", "pinst_cnt", "sinst_cnt", "ctotal", "cnos", "cnodes",
    "csockets", "pip", "sip", "role", "pinst_list", "sinst_list", "master_capable",
    "vm_capable", "ndparams", "group.uuid", "ctime", "mtime", "uuid", "serial_no", "tags",
)

#: The query's one-letter role -> the role's RAPI name.
ROLES: Final = {"M": "master", "C": "master-candidate", "R": "regular", "D": "drained",
                "O": "offline"}

#: Node flags (master_candidate, offline, drained) that set a role; None leaves a flag.
_ROLE_FLAGS: Final[dict[str, tuple[bool | None, bool | None, bool | None]]] = {
    "regular": (False, False, False),
    "master-candidate": (True, None, None),
    "drained": (None, None, True),
    "offline": (None, True, None),
}


async def index(req: RapiRequest) -> list[dict[str, Any]]:
    """Every node: names and URIs, or with ``bulk=1`` their fields."""
    if req.flag("bulk"):
        return await query_rows(req, "node", NODE_FIELDS)
    rows = await query_rows(req, "node", ["name"])
    return uri_list((row["name"] for row in rows), "/2/nodes/%s", "id")


async def get(req: RapiRequest) -> dict[str, Any]:
    """One node's fields; ``secondary_ip`` repeats ``sip``."""
    node = await query_one(req, "node", "node", req.item("node_name"), NODE_FIELDS)
    node["secondary_ip"] = node["sip"]
    return node


async def get_role(req: RapiRequest) -> str:
    """The node's role: master, master-candidate, regular, drained or offline."""
    node = await query_one(req, "node", "node", req.item("node_name"), ["role"])
    role = ROLES.get(node["role"])
    if role is None:
        raise InternalError(f"node {req.item('node_name')} has an unknown role {node['role']!r}")
    return role


async def set_role(req: RapiRequest) -> int:
    """Give the node a role (the body is the role's name); a job id."""
    candidate, offline, drained = _ROLE_FLAGS[req.body]
    return await req.submit(req.opcode("OP_NODE_SET_PARAMS", {
        "node_name": req.item("node_name"), "master_candidate": candidate,
        "offline": offline, "drained": drained, "force": req.flag("force"),
        "auto_promote": req.flag("auto-promote"),
    }, from_body=False))


async def modify(req: RapiRequest) -> int:
    """Change node parameters (``OP_NODE_SET_PARAMS`` from the body); a job id."""
    return await req.submit(req.opcode("OP_NODE_SET_PARAMS",
                                       {"node_name": req.item("node_name")}))


async def evacuate(req: RapiRequest) -> int:
    """Move the node's instances away (``OP_NODE_EVACUATE`` from the body); a job id
    whose result lists the jobs that move them (feature ``node-evac-res1``)."""
    return await req.submit(req.opcode("OP_NODE_EVACUATE", {
        "node_name": req.item("node_name"), "dry_run": req.flag("dry-run")}))


async def migrate(req: RapiRequest) -> int:
    """Migrate the node's primary instances (``OP_NODE_MIGRATE``): the body's parameters
    (feature ``node-migrate-reqv1``) or, in the older form, the query arguments
    ``live`` (1 or 0) or ``mode``; a job id."""
    fixed: dict[str, Any] = {"node_name": req.item("node_name")}
    live, mode = req.integer("live"), req.text("mode")
    if live is not None or mode is not None:
        if live is not None and mode is not None:
            raise ParameterError("Only one of 'live' and 'mode' should be passed")
        fixed["mode"] = mode if live is None else ("live" if live else "non-live")
        return await req.submit(req.opcode("OP_NODE_MIGRATE", fixed, body={}))
    return await req.submit(req.opcode("OP_NODE_MIGRATE", fixed))
