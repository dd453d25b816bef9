"""``/2/instances`` and everything under ``/2/instances/[name]``.

Each write builds one opcode (reinstall: shutdown, reinstall and optionally startup
in one job) from the body and the URL, the way Ganeti's RAPI does, and answers with
the job's id.
"""

from __future__ import annotations

from typing import Any, Final

from corral.errors import ParameterError
from corral.opcodes import op_from_dict
from corral.rapi.errors import HttpError
from corral.rapi.handlers.common import query_one, query_rows, uri_list
from corral.rapi.request import RapiRequest

__all__ = [
    "CREATE_RENAME", "INSTANCE_FIELDS", "MODIFY_RENAME", "activate_disks", "change_group",
    "console", "create", "deactivate_disks", "delete", "failover", "get", "grow_disk", "index",
    "info", "migrate", "modify", "multi_alloc", "reboot", "reinstall", "rename", "shutdown",
    "startup",
]

#: Fields of each instance in ``/2/instances?bulk=1`` and ``/2/instances/[name]``.
INSTANCE_FIELDS: Final = (
    "name", "admin_state", "os", "pnode", "snodes", "disk_template", "nic.ips", "nic.macs",
    "nic.modes", "nic.uuids", "nic.names", "nic.links", "nic.networks", "nic.networks.names",
    "nic.bridges", "network_port", "disk.sizes", "disk.spindles", "disk_usage", "disk.uuids",
    "disk.names", "beparams", "hvparams", "oper_state", "oper_ram", "oper_vcpus", "status",
    "custom_hvparams", "custom_beparams", "custom_nicparams", "ctime", "mtime", "uuid",
    "serial_no", "tags",
    # corral's: the placement constraints the instance keeps
    "member_of", "member_of.uuid", "required_traits", "forbidden_traits",
)

#: The body key that says which instance creation request format the body uses.
VERSION_KEY: Final = "__version__"
#: Body keys of ``POST /2/instances`` that fill an opcode parameter of another name.
CREATE_RENAME: Final = {"os": "os_type", "name": "instance_name"}
#: Creation parameters a body must give, in the order Ganeti checks them.
CREATE_REQUIRED: Final = {
    "disks": "a list of disk definitions, [] for diskless",
    "mode": "create, import or remote-import",
    "nics": "a list of NIC definitions, [] for none",
}
#: The creation parameters as the body names them (for errors).
_CREATE_NAMES: Final = {new: old for old, new in CREATE_RENAME.items()}
#: Body keys of ``PUT .../modify`` named after the instance's query fields.
MODIFY_RENAME: Final = {"custom_beparams": "beparams", "custom_hvparams": "hvparams"}


def _with_memory(instance: dict[str, Any]) -> dict[str, Any]:
    """Old clients read ``beparams.memory``: the maximum memory."""
    beparams = instance.get("beparams")
    if isinstance(beparams, dict) and "maxmem" in beparams:
        beparams["memory"] = beparams["maxmem"]
    return instance


async def index(req: RapiRequest) -> list[dict[str, Any]]:
    """Every instance: names and URIs, or with ``bulk=1`` their fields."""
    if req.flag("bulk"):
        return [_with_memory(row) for row in await query_rows(req, "instance", INSTANCE_FIELDS)]
    rows = await query_rows(req, "instance", ["name"])
    return uri_list((row["name"] for row in rows), "/2/instances/%s", "id")


async def create(req: RapiRequest) -> int:
    """Create an instance from an ``instance-create-reqv1`` body; a job id."""
    body = req.body_dict()
    version = body.pop(VERSION_KEY, 0)
    if version == 0:
        raise ParameterError(
            f"Instance creation request version 0 is no longer supported: send the "
            f"opcode's parameters with \"{VERSION_KEY}\": 1 (feature instance-create-reqv1)")
    if version != 1 or isinstance(version, bool):
        raise ParameterError(f"Unsupported request data version {version}: the supported "
                             f"version is the integer 1, got {version!r}")
    missing = [key for key in CREATE_REQUIRED if key not in body]
    if missing:
        # Ganeti's opcode has no usable default for these and refuses the body at once.
        raise ParameterError(
            f"body parameter {missing[0]!r} is missing; an instance-create-reqv1 body needs "
            + ", ".join(f"{key!r} ({what})" for key, what in CREATE_REQUIRED.items()))
    return await req.submit(req.opcode("OP_INSTANCE_CREATE", {"dry_run": req.flag("dry-run")},
                                       rename=CREATE_RENAME, body=body))


async def get(req: RapiRequest) -> dict[str, Any]:
    """One instance's fields."""
    return _with_memory(await query_one(req, "instance", "instance", req.item("instance_name"),
                                        INSTANCE_FIELDS))


def _name(req: RapiRequest) -> dict[str, Any]:
    return {"instance_name": req.item("instance_name")}


async def delete(req: RapiRequest) -> int:
    """Remove an instance and its disks; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_REMOVE", {
        **_name(req), "ignore_failures": False, "dry_run": req.flag("dry-run")}))


async def info(req: RapiRequest) -> int:
    """Submit a job gathering detailed information (``static=1``: configuration only);
    the job's result holds it. A job id."""
    return await req.submit(req.opcode("OP_INSTANCE_QUERY_DATA", {
        "instances": [req.item("instance_name")], "static": req.flag("static")},
        from_body=False))


async def reboot(req: RapiRequest) -> int:
    """Reboot (``type``: soft, hard or full; hard by default); a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_REBOOT", {
        **_name(req), "reboot_type": req.text("type"),
        "ignore_secondaries": req.flag("ignore_secondaries"), "dry_run": req.flag("dry-run")}))


async def startup(req: RapiRequest) -> int:
    """Start an instance; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_STARTUP", {
        **_name(req), "force": req.flag("force"), "dry_run": req.flag("dry-run"),
        "no_remember": req.flag("no_remember")}, from_body=False))


async def shutdown(req: RapiRequest) -> int:
    """Stop an instance; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_SHUTDOWN", {
        **_name(req), "no_remember": req.flag("no_remember"), "dry_run": req.flag("dry-run")}))


async def reinstall(req: RapiRequest) -> int:
    """Reinstall the OS: one job that stops the instance, reinstalls it and (unless
    ``start`` is false) starts it again. Body ``{os, start, osparams}``, or the older
    query arguments ``os`` and ``nostartup``. A job id."""
    legacy = req.text("os") is not None or req.flag("nostartup")
    if req.body is not None and legacy:
        raise ParameterError("give the reinstall parameters either in the body or as the "
                             "query arguments os/nostartup, not both")
    body = req.body_dict() if req.body is not None else {
        "os": req.text("os"), "start": not req.flag("nostartup")}
    name = req.item("instance_name")
    ops = [
        req.opcode("OP_INSTANCE_SHUTDOWN", {"instance_name": name}, from_body=False),
        req.opcode("OP_INSTANCE_REINSTALL", {"instance_name": name, "os_type": body.get("os"),
                                             "osparams": body.get("osparams")},
                   from_body=False, names={"os_type": "os"}),
    ]
    if body.get("start", True):
        ops.append(req.opcode("OP_INSTANCE_STARTUP", {"instance_name": name, "force": False},
                              from_body=False))
    return await req.submit(*ops)


async def rename(req: RapiRequest) -> int:
    """Rename a stopped instance (body: ``new_name``, ``ip_check``, ``name_check``)."""
    return await req.submit(req.opcode("OP_INSTANCE_RENAME", _name(req)))


async def modify(req: RapiRequest) -> int:
    """Change an instance's parameters, disks and NICs; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_SET_PARAMS", _name(req),
                                       rename=MODIFY_RENAME))


async def migrate(req: RapiRequest) -> int:
    """Live-migrate (or fail over, if allowed) to another node; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_MIGRATE", _name(req)))


async def failover(req: RapiRequest) -> int:
    """Stop the instance and start it on another node; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_FAILOVER", _name(req)))


async def change_group(req: RapiRequest) -> int:
    """Move the instance to another node group (``OP_INSTANCE_CHANGE_GROUP``; corral's
    resource: Ganeti 3.0 has the opcode but no RAPI path for it); a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_CHANGE_GROUP", _name(req)))


async def multi_alloc(req: RapiRequest) -> int:
    """Place several new instances at once (``OP_INSTANCE_MULTI_ALLOC``): ``instances``
    holds ``OP_INSTANCE_CREATE`` parameters each (``name`` and ``os`` stand for
    ``instance_name`` and ``os_type``, as in an instance creation); a job id."""
    body = req.body_dict()
    if "instances" not in body:
        raise ParameterError("Request is missing required 'instances' field in body")
    instances = body["instances"]
    if not isinstance(instances, list):
        raise ParameterError("body: parameter 'instances': expected a list of instance "
                             f"definitions, got {type(instances).__name__}")
    renamed = []
    for index, inst in enumerate(instances):
        if not isinstance(inst, dict):
            raise ParameterError(f"body: parameter 'instances[{index}]': expected an object of "
                                 "OP_INSTANCE_CREATE parameters")
        inst = dict(inst)
        for old, new in CREATE_RENAME.items():
            if old in inst and new in inst:
                raise ParameterError(f"body: instances[{index}]: {old!r} is another name for "
                                     f"{new!r}; give only one of them")
            if old in inst:
                inst[new] = inst.pop(old)
        inst.pop("OP_ID", None)
        op_from_dict({"OP_ID": "OP_INSTANCE_CREATE", **inst},
                     where=f"body: instances[{index}]", names=_CREATE_NAMES)
        renamed.append(inst)
    body["instances"] = renamed
    return await req.submit(req.opcode("OP_INSTANCE_MULTI_ALLOC",
                                       {"dry_run": req.flag("dry-run")}, body=body))


async def activate_disks(req: RapiRequest) -> int:
    """Make the instance's disks available on its node; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_ACTIVATE_DISKS", {
        **_name(req), "ignore_size": req.flag("ignore_size")}, from_body=False))


async def deactivate_disks(req: RapiRequest) -> int:
    """Release the instance's disks on its node; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_DEACTIVATE_DISKS", {
        **_name(req), "force": req.flag("force")}, from_body=False))


async def grow_disk(req: RapiRequest) -> int:
    """Grow one disk (body: ``amount`` in MiB, ``absolute``, ...); a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_GROW_DISK", {
        **_name(req), "disk": int(req.item("disk_index"))}))


async def console(req: RapiRequest) -> Any:
    """How to reach a running instance's console (Ganeti's console description)."""
    name = req.item("instance_name")
    state = await query_one(req, "instance", "instance", name, ["oper_state"])
    if not state["oper_state"]:
        raise HttpError(503, f"instance {name} is not running: its console is unavailable")
    (result,) = await req.run(req.opcode("OP_INSTANCE_CONSOLE", _name(req), from_body=False))
    return result
