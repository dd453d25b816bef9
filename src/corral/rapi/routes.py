"""The one table of RAPI resources: every path, what each method does, who may call it.

Paths, methods, query arguments and bodies are those of Ganeti's RAPI v2, so existing
clients work unchanged. The server dispatches through :data:`ROUTES`, and
``/openapi.json`` is generated from it: what is documented is what is served.

Methods Ganeti has on a path that corral does not serve yet are :class:`NotServed`
entries (answered 501 with the reason); the README lists them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from corral.errors import NotFoundError
from corral.rapi.handlers import (
    cluster,
    filters,
    groups,
    instances,
    jobs,
    moves,
    networks,
    nodes,
    os,
    query,
    storage,
    tags,
)
from corral.rapi.openapi import build_document
from corral.rapi.schema import NULL, Schema, opcode_schema
from corral.rapi.shapes import (
    CANCEL_RESULT,
    CLUSTER_INFO,
    CONSOLE,
    FEATURE_LIST,
    FILTER,
    FILTER_BODY,
    GROUP,
    INSTANCE,
    JOB,
    JOB_ID,
    NETWORK,
    NODE,
    NODE_ROLE,
    OPENAPI,
    QUERY_BODY,
    QUERY_FIELDS_RESULT,
    QUERY_RESULT,
    REINSTALL_BODY,
    ROLE_BODY,
    STRINGS,
    TAG_BODY,
    WAIT_BODY,
    WAIT_RESULT,
    bulk_or_index,
)
from corral.rapi.spec import (
    DEPENDS_ONLY,
    Access,
    Body,
    Handler,
    NotServed,
    Operation,
    QueryArg,
    Route,
)

if TYPE_CHECKING:
    from corral.rapi.request import RapiRequest

__all__ = ["REASON", "ROUTES", "document", "find"]

# -- query arguments ------------------------------------------------------------------

REASON: Final = QueryArg("reason", "text", "Why: added to the reason trail of the opcodes a "
                         "request submits, as a 'user' entry")
BULK: Final = QueryArg("bulk", "flag", "1: every item's fields instead of names and URIs")
DRY_RUN: Final = QueryArg("dry-run", "flag", "1: check everything, change nothing")
FORCE: Final = QueryArg("force", "flag", "1: go ahead despite warnings")
LOCK: Final = QueryArg("lock", "flag", "Accepted for Ganeti's clients; corral answers from "
                       "the configuration, which needs no locks")
NO_REMEMBER: Final = QueryArg("no_remember", "flag",
                              "1: do not record the new state; the watcher will undo it")
TAG: Final = QueryArg("tag", "texts", "a tag; repeat the argument for several tags "
                      "(?tag=a&tag=b)", required=True)


def _op(handler: Handler, access: Access, summary: str, response: Schema, *,
        args: tuple[QueryArg, ...] = (), body: Body | None = None,
        description: str = "") -> Operation:
    """An operation; every one takes ``reason``."""
    return Operation(handler, access, summary, response, args=(*args, REASON), body=body,
                     description=description)


def _job(handler: Handler, summary: str, *, args: tuple[QueryArg, ...] = (),
         body: Body | None = None, access: Access = "write", description: str = "") -> Operation:
    """An operation that submits a job and answers its id."""
    return Operation(handler, access, summary, JOB_ID, args=(*args, REASON), body=body,
                     description=description, job=True)


def _opcode_body(op_id: str, *, fixed: tuple[str, ...] = (),
                 rename: Mapping[str, str] | None = None,
                 extra: Mapping[str, Schema] | None = None,
                 extra_required: tuple[str, ...] = ()) -> Body:
    """A body made of opcode parameters, checked by decoding it into the opcode; it is
    required when the opcode has required parameters the URL does not give."""
    schema = opcode_schema(op_id, fixed=fixed, rename=rename, extra=extra)
    if extra_required:
        schema["required"] = [*schema.get("required", ()), *extra_required]
    return Body(schema, required=bool(schema.get("required")), check=False)


def _tags(kind: str) -> dict[str, Operation | NotServed]:
    return {
        "GET": _op(tags.get, "public", f"List the tags of {kind}", STRINGS),
        "PUT": _job(tags.add, f"Add tags to {kind}", args=(TAG, DRY_RUN),
                    body=Body(TAG_BODY)),
        "DELETE": _job(tags.remove, f"Remove tags from {kind}", args=(TAG, DRY_RUN),
                       body=Body(TAG_BODY)),

    }


STORAGE_TYPE: Final = QueryArg("storage_type", "text", "The storage type: lvm-pv, lvm-vg, "
                               "file, sharedfile (Ganeti's names)")
UNIT_NAME: Final = QueryArg("name", "text", "The storage unit's name (required)")
_INSTANCE = "/2/instances/{instance_name}"

async def _openapi(req: RapiRequest) -> dict[str, Any]:
    """The OpenAPI document of this server, generated from this table."""
    del req
    return document()


ROUTES: Final[tuple[Route, ...]] = (
    # -- cluster ------------------------------------------------------------------------
    Route("/", {"GET": _op(cluster.root, "public", "Nothing (kept for old clients)", NULL)},
          "The root"),
    Route("/version", {"GET": _op(cluster.version, "public", "The remote API version (2)",
                                  {"type": "integer", "enum": [2]})}, "API version"),
    Route("/2", {"GET": _op(cluster.root, "public", "Nothing (kept for old clients)", NULL)},
          "Version 2 of the API"),
    Route("/2/info", {"GET": _op(cluster.info, "public", "The cluster's settings",
                                 CLUSTER_INFO)}, "Cluster information"),
    Route("/2/features", {"GET": _op(cluster.features, "public", "Optional features",
                                     FEATURE_LIST)}, "Optional features"),
    Route("/2/modify", {"PUT": _job(cluster.modify, "Change cluster parameters",
                                    body=_opcode_body("OP_CLUSTER_SET_PARAMS"))},
          "Cluster parameters"),
    Route("/2/redistribute-config", {"PUT": _job(
        cluster.redistribute_config,
        "Push the configuration to the master candidates and the cluster's files to "
        "every node", body=DEPENDS_ONLY)}, "Configuration redistribution"),
    Route("/2/tags", _tags("the cluster"), "Cluster tags"),
    Route("/openapi.json", {"GET": _op(_openapi, "public",
                                       "This document (OpenAPI 3.1)", OPENAPI)},
          "OpenAPI description of this server (corral's addition)"),
    # -- jobs ---------------------------------------------------------------------------
    Route("/2/jobs", {"GET": _op(jobs.index, "public", "All jobs",
                                 bulk_or_index("id", {"type": "integer"}, JOB), args=(BULK,))},
          "Jobs"),
    Route("/2/jobs/{job_id}", {
        "GET": _op(jobs.get, "public", "A job's status, opcodes, results and log", JOB),
        "DELETE": _op(jobs.cancel, "write", "Cancel a job that has not started",
                      CANCEL_RESULT),
    }, "One job"),
    Route("/2/jobs/{job_id}/wait", {"GET": _op(
        jobs.wait, "write", "Wait up to ten seconds for the job to change", WAIT_RESULT,
        body=Body(WAIT_BODY, required=True))}, "Waiting for a job"),
    # -- filters ------------------------------------------------------------------------
    Route("/2/filters", {
        "GET": _op(filters.index, "public", "All job filter rules",
                   bulk_or_index("uuid", {"type": "string"}, FILTER), args=(BULK,)),
        "POST": _op(filters.add, "write", "Add a job filter rule; its UUID",
                    {"type": "string"}, body=Body(FILTER_BODY, required=True)),
    }, "Job filter rules"),
    Route("/2/filters/{filter_uuid}", {
        "GET": _op(filters.get, "public", "A job filter rule", FILTER),
        "PUT": _op(filters.replace, "write", "Replace the rule, or add it with this UUID",
                   {"type": "string"}, body=Body(FILTER_BODY, required=True)),
        "DELETE": _op(filters.delete, "write", "Delete a job filter rule", NULL),
    }, "One job filter rule"),
    # -- nodes --------------------------------------------------------------------------
    Route("/2/nodes", {"GET": _op(nodes.index, "public", "All nodes",
                                  bulk_or_index("id", {"type": "string"}, NODE),
                                  args=(BULK, LOCK))}, "Nodes"),
    Route("/2/nodes/{node_name}", {"GET": _op(nodes.get, "public", "A node", NODE,
                                              args=(LOCK,))}, "One node"),
    Route("/2/nodes/{node_name}/role", {
        "GET": _op(nodes.get_role, "public", "The node's role", NODE_ROLE, args=(LOCK,)),
        "PUT": _job(nodes.set_role, "Give the node a role", body=Body(ROLE_BODY, required=True),
                    args=(FORCE, QueryArg("auto-promote", "flag",
                                          "1: promote other nodes to keep enough master "
                                          "candidates"))),
    }, "A node's role"),
    Route("/2/nodes/{node_name}/modify", {"POST": _job(
        nodes.modify, "Change node parameters",
        body=_opcode_body("OP_NODE_SET_PARAMS", fixed=("node_name",)))}, "Node parameters"),
    Route("/2/nodes/{node_name}/tags", _tags("a node"), "Node tags"),
    Route("/2/nodes/{node_name}/powercycle", {"POST": NotServed(
        "corral has no OP_NODE_POWERCYCLE yet")}, "Power-cycling a node"),
    Route("/2/nodes/{node_name}/evacuate", {"POST": _job(
        nodes.evacuate, "Move the node's instances away (one job per instance)",
        args=(DRY_RUN,),
        body=_opcode_body("OP_NODE_EVACUATE", fixed=("node_name", "dry_run")),
        description="The job's result lists the jobs that move the instances "
                    "(feature node-evac-res1): {\"jobs\": [[success, job id], ...]}.")},
        "Evacuating a node"),
    Route("/2/nodes/{node_name}/migrate", {"POST": _job(
        nodes.migrate, "Migrate the node's primary instances (one job per instance)",
        args=(QueryArg("live", "int", "Older form: 1 for a live migration, 0 for "
                       "non-live"),
              QueryArg("mode", "text", "Older form: live or non-live",
                       choices=("live", "non-live"))),
        body=_opcode_body("OP_NODE_MIGRATE", fixed=("node_name",)),
        description="The body holds OP_NODE_MIGRATE's parameters (feature "
                    "node-migrate-reqv1); without it the query arguments say the mode.")},
        "Migrating a node's instances"),
    Route("/2/nodes/{node_name}/storage", {"GET": _job(
        storage.list_storage, "List the node's storage units of a type in a job (its "
        "result holds the rows of output_fields)", body=DEPENDS_ONLY, args=(
            STORAGE_TYPE, QueryArg("output_fields", "text", "Comma-separated fields "
                                   "(node, type, name, size, used, free, allocatable; "
                                   "required)")))}, "Node storage units"),
    Route("/2/nodes/{node_name}/storage/modify", {"PUT": _job(
        storage.modify_storage, "Change a storage unit (a physical volume's allocatable "
        "flag)", body=DEPENDS_ONLY, args=(
            STORAGE_TYPE, UNIT_NAME,
            QueryArg("allocatable", "flag", "1 or 0: set the allocatable flag")))},
        "Storage changes"),
    Route("/2/nodes/{node_name}/storage/repair", {"PUT": _job(
        storage.repair_storage, "Repair a storage unit (a volume group's consistency)",
        body=DEPENDS_ONLY, args=(STORAGE_TYPE, UNIT_NAME))}, "Storage repair"),
    # -- node groups --------------------------------------------------------------------
    Route("/2/groups", {
        "GET": _op(groups.index, "public", "All node groups",
                   bulk_or_index("name", {"type": "string"}, GROUP), args=(BULK, LOCK)),
        "POST": _job(groups.add, "Add a node group", args=(DRY_RUN,), body=_opcode_body(
            "OP_GROUP_ADD", fixed=("dry_run",), rename=groups.ADD_RENAME)),
    }, "Node groups"),
    Route("/2/groups/{group_name}", {
        "GET": _op(groups.get, "public", "A node group", GROUP, args=(LOCK,)),
        "DELETE": _job(groups.delete, "Remove an empty node group", args=(DRY_RUN,),
                       body=DEPENDS_ONLY),
    }, "One node group"),
    Route("/2/groups/{group_name}/modify", {"PUT": _job(
        groups.modify, "Change a node group's parameters", body=_opcode_body(
            "OP_GROUP_SET_PARAMS", fixed=("group_name",), rename=groups.MODIFY_RENAME))},
        "Node group parameters"),
    Route("/2/groups/{group_name}/rename", {"PUT": _job(
        groups.rename, "Rename a node group", args=(DRY_RUN,),
        body=_opcode_body("OP_GROUP_RENAME", fixed=("group_name", "dry_run")))},
        "Renaming a node group"),
    Route("/2/groups/{group_name}/assign-nodes", {"PUT": _job(
        groups.assign_nodes, "Move nodes into the group", args=(FORCE, DRY_RUN),
        body=_opcode_body("OP_GROUP_ASSIGN_NODES", fixed=("group_name", "dry_run", "force")))},
        "Assigning nodes to a group"),
    Route("/2/groups/{group_name}/tags", _tags("a node group"), "Node group tags"),
    # -- instances ----------------------------------------------------------------------
    Route("/2/instances", {
        "GET": _op(instances.index, "public", "All instances",
                   bulk_or_index("id", {"type": "string"}, INSTANCE), args=(BULK, LOCK)),
        "POST": _job(instances.create, "Create an instance", args=(DRY_RUN,),
                     body=_opcode_body("OP_INSTANCE_CREATE", fixed=("dry_run",),
                                       rename=instances.CREATE_RENAME,
                                       extra={instances.VERSION_KEY: {"enum": [1]}},
                                       extra_required=(instances.VERSION_KEY,
                                                       *instances.CREATE_REQUIRED)),
                     description="The body is the instance-create-reqv1 format: "
                                 "\"__version__\": 1 and OP_INSTANCE_CREATE's parameters "
                                 "('name' and 'os' stand for instance_name and os_type)."),
    }, "Instances"),
    Route("/2/instances-multi-alloc", {"POST": _op(
        instances.multi_alloc, "write", "Place several new instances at once and create "
        "each that fits in a job of its own; the job id", JOB_ID, args=(DRY_RUN,),
        body=Body(opcode_schema("OP_INSTANCE_MULTI_ALLOC", fixed=("dry_run",), extra={
            "instances": {"type": "array", "items": opcode_schema(
                "OP_INSTANCE_CREATE", fixed=("dry_run",), rename=instances.CREATE_RENAME)}}),
            required=True, check=False),
        description="The job's result: {\"jobs\": [[success, job id], ...], \"allocatable\": "
                    "[names], \"failed\": [names]}; with dry-run=1 no job is submitted.")},
        "Allocating several instances"),
    Route(_INSTANCE, {
        "GET": _op(instances.get, "public", "An instance", INSTANCE, args=(LOCK,)),
        "DELETE": _job(instances.delete, "Remove an instance and its disks", args=(DRY_RUN,),
                       body=_opcode_body("OP_INSTANCE_REMOVE", fixed=(
                           "instance_name", "ignore_failures", "dry_run"))),
    }, "One instance"),
    Route(f"{_INSTANCE}/info", {"GET": _job(
        instances.info, "Gather detailed information in a job (its result holds it)",
        access="public", body=DEPENDS_ONLY,
        args=(QueryArg("static", "flag", "1: from the configuration only, without asking "
                                         "the nodes"),))}, "Detailed instance information"),
    Route(f"{_INSTANCE}/reboot", {"POST": _job(
        instances.reboot, "Reboot an instance", args=(
            QueryArg("type", "text", "soft, hard (default) or full", default="hard",
                     choices=("soft", "hard", "full")),
            QueryArg("ignore_secondaries", "flag", "1: ignore errors on secondary nodes"),
            DRY_RUN),
        body=_opcode_body("OP_INSTANCE_REBOOT", fixed=(
            "instance_name", "reboot_type", "ignore_secondaries", "dry_run")))},
        "Rebooting an instance"),
    Route(f"{_INSTANCE}/startup", {"PUT": _job(
        instances.startup, "Start an instance", args=(FORCE, DRY_RUN, NO_REMEMBER),
        body=DEPENDS_ONLY)}, "Starting an instance"),
    Route(f"{_INSTANCE}/shutdown", {"PUT": _job(
        instances.shutdown, "Stop an instance", args=(DRY_RUN, NO_REMEMBER),
        body=_opcode_body("OP_INSTANCE_SHUTDOWN", fixed=(
            "instance_name", "no_remember", "dry_run")))}, "Stopping an instance"),
    Route(f"{_INSTANCE}/reinstall", {"POST": _job(
        instances.reinstall, "Reinstall the OS (stop, reinstall, start)",
        body=Body(REINSTALL_BODY), args=(
            QueryArg("os", "text", "Older form: OS to install"),
            QueryArg("nostartup", "flag", "Older form: 1 to leave the instance stopped")))},
        "Reinstalling an instance"),
    Route(f"{_INSTANCE}/rename", {"PUT": _job(
        instances.rename, "Rename a stopped instance",
        body=_opcode_body("OP_INSTANCE_RENAME", fixed=("instance_name",)))},
        "Renaming an instance"),
    Route(f"{_INSTANCE}/modify", {"PUT": _job(
        instances.modify, "Change an instance's parameters, disks and NICs",
        body=_opcode_body("OP_INSTANCE_SET_PARAMS", fixed=("instance_name",),
                          rename=instances.MODIFY_RENAME))}, "Instance parameters"),
    Route(f"{_INSTANCE}/migrate", {"PUT": _job(
        instances.migrate, "Migrate an instance to another node",
        body=_opcode_body("OP_INSTANCE_MIGRATE", fixed=("instance_name",)))},
        "Migrating an instance"),
    Route(f"{_INSTANCE}/failover", {"PUT": _job(
        instances.failover, "Fail an instance over to another node",
        body=_opcode_body("OP_INSTANCE_FAILOVER", fixed=("instance_name",)))},
        "Failing an instance over"),
    Route(f"{_INSTANCE}/change-group", {"PUT": _job(
        instances.change_group, "Move an instance to another node group",
        body=_opcode_body("OP_INSTANCE_CHANGE_GROUP", fixed=("instance_name",)),
        description="corral's resource (Ganeti 3.0 has the opcode but no path for it): "
                    "the job's result lists the jobs that move the instance.")},
        "Changing an instance's group"),
    Route(f"{_INSTANCE}/activate-disks", {"PUT": _job(
        instances.activate_disks, "Activate an instance's disks", body=DEPENDS_ONLY,
        args=(QueryArg("ignore_size", "flag", "1: do not check the recorded disk sizes"),))},
        "Activating disks"),
    Route(f"{_INSTANCE}/deactivate-disks", {"PUT": _job(
        instances.deactivate_disks, "Deactivate an instance's disks", args=(FORCE,),
        body=DEPENDS_ONLY)}, "Deactivating disks"),
    Route(f"{_INSTANCE}/disk/{{disk_index}}/grow", {"POST": _job(
        instances.grow_disk, "Grow a disk",
        body=_opcode_body("OP_INSTANCE_GROW_DISK", fixed=("instance_name", "disk")))},
        "Growing a disk"),
    Route(f"{_INSTANCE}/console", {"GET": _op(
        instances.console, "read", "How to reach the console of a running instance",
        CONSOLE)}, "An instance's console"),
    Route(f"{_INSTANCE}/tags", _tags("an instance"), "Instance tags"),
    Route(f"{_INSTANCE}/replace-disks", {"POST": _job(
        storage.replace_disks, "Replace disks from their mirror (internally mirrored "
        "templates only); body or, Ganeti's older form, query arguments",
        body=Body(opcode_schema("OP_INSTANCE_REPLACE_DISKS", fixed=("instance_name",)),
                  check=False),
        args=(QueryArg("mode", "text", "replace_on_primary, replace_on_secondary, "
                       "replace_new_secondary or replace_auto"),
              QueryArg("remote_node", "text", "The new secondary node"),
              QueryArg("iallocator", "text", "The allocator choosing the new secondary"),
              QueryArg("disks", "text", "Comma-separated disk indexes")))},
        "Replacing disks"),
    Route(f"{_INSTANCE}/recreate-disks", {"POST": _job(
        storage.recreate_disks, "Make lost disks again, empty (on the instance's node or "
        "new nodes)", body=_opcode_body("OP_INSTANCE_RECREATE_DISKS",
                                        fixed=("instance_name",)))}, "Recreating disks"),
    Route(f"{_INSTANCE}/disk-status", {"GET": _job(
        storage.disk_status, "The status of each disk on each node holding it, in a job "
        "(corral: design 2.1's instance disk status)", access="read", body=DEPENDS_ONLY)},
        "Instance disk status (corral's addition)"),
    Route(f"{_INSTANCE}/repair-disks", {"POST": _job(
        storage.repair_disks, "Repair what is broken in the instance's disks while it "
        "keeps a good copy (corral: design 2.1's repair instance)", args=(DRY_RUN,),
        body=DEPENDS_ONLY)}, "Repairing an instance's disks (corral's addition)"),
    Route(f"{_INSTANCE}/prepare-export", {"PUT": _job(
        moves.prepare_export, "Prepare an export: for mode=remote, a key for an "
        "inter-cluster move on the instance's primary node", body=DEPENDS_ONLY,
        args=(QueryArg("mode", "text", "local or remote", required=True,
                       choices=("local", "remote")),),
        description="The job's result (mode=remote): {\"handshake\": [version, hmac, salt], "
                    "\"x509_key_name\": [name, hmac, salt], \"x509_ca\": signed PEM}, each "
                    "signed with the cluster domain secret; null for mode=local.")},
        "Preparing an export"),
    Route(f"{_INSTANCE}/export", {"PUT": _job(
        moves.export, "Export an instance: to a node of this cluster (mode local, "
        "destination a node name) or to another cluster (mode remote)", args=(DRY_RUN,),
        body=_opcode_body("OP_BACKUP_EXPORT", fixed=("instance_name", "dry_run"),
                          rename=moves.EXPORT_RENAME),
        description="The job's result: [finalized, [per-disk success]].")},
        "Exporting an instance"),
    # -- OS definitions and queries -----------------------------------------------------
    Route("/2/os", {"GET": _op(os.index, "public", "OS names (with variants)", STRINGS)},
          "OS definitions"),
    Route("/2/query/{resource}", {
        "GET": _op(query.get, "read", "Selected fields of every item", QUERY_RESULT,
                   args=(QueryArg("fields", "text", "the fields to return, comma-separated "
                                  "(GET /2/query/[resource]/fields lists them)",
                                  required=True),)),
        "PUT": _op(query.put, "read", "Selected fields of the items a filter accepts",
                   QUERY_RESULT, body=Body(QUERY_BODY),
                   args=(QueryArg("fields", "text", "Fields, unless the body gives them"),)),
    }, "Generic query"),
    Route("/2/query/{resource}/fields", {"GET": _op(
        query.fields, "public", "Definitions of the resource's fields", QUERY_FIELDS_RESULT,
        args=(QueryArg("fields", "text", "Only these fields, comma-separated"),))},
        "Query fields"),
    # -- networks -----------------------------------------------------------------------
    Route("/2/networks", {
        "GET": _op(networks.index, "public", "All networks",
                   bulk_or_index("name", {"type": "string"}, NETWORK), args=(BULK, LOCK)),
        "POST": _job(networks.add, "Add a network", args=(DRY_RUN,),
                     body=_opcode_body("OP_NETWORK_ADD", fixed=("dry_run",))),
    }, "Networks"),
    Route("/2/networks/{network_name}", {
        "GET": _op(networks.get, "public", "A network", NETWORK, args=(LOCK,)),
        "DELETE": _job(networks.delete, "Remove a network connected to no group",
                       args=(DRY_RUN,), body=DEPENDS_ONLY),
    }, "One network"),
    Route("/2/networks/{network_name}/modify", {"PUT": _job(
        networks.modify, "Change a network's gateway, IPv6 settings, MAC prefix or "
        "reservations", args=(DRY_RUN,),
        body=_opcode_body("OP_NETWORK_SET_PARAMS", fixed=("network_name", "dry_run")))},
        "Network parameters"),
    Route("/2/networks/{network_name}/connect", {"PUT": _job(
        networks.connect, "Connect the network to a node group with a NIC mode and link",
        args=(DRY_RUN,),
        body=_opcode_body("OP_NETWORK_CONNECT", fixed=("network_name", "dry_run")))},
        "Connecting a network"),
    Route("/2/networks/{network_name}/disconnect", {"PUT": _job(
        networks.disconnect, "Disconnect the network from a node group", args=(DRY_RUN,),
        body=_opcode_body("OP_NETWORK_DISCONNECT", fixed=("network_name", "dry_run")))},
        "Disconnecting a network"),
    Route("/2/networks/{network_name}/tags", _tags("a network"), "Network tags"),
)

_STATIC: Final = {r.path: r for r in ROUTES if not r.params}
_PATTERNED: Final = tuple(r for r in ROUTES if r.params)


def find(path: str) -> tuple[Route, dict[str, Any]]:
    """The route serving ``path`` and its path arguments.

    :raises NotFoundError: when no resource has this path.
    """
    route = _STATIC.get(path)
    if route is not None:
        return route, {}
    for route in _PATTERNED:
        match = route.regex.fullmatch(path)
        if match:
            return route, match.groupdict()
    raise NotFoundError(f"no resource at {path}; the resources are listed in /openapi.json")


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI document of :data:`ROUTES` (built once; the table does not change at
    run time)."""
    return build_document(ROUTES)
