"""The request and response shapes of the RAPI resources, apart from their handlers.

Responses follow Ganeti's RAPI; objects allow more keys than they list, so that a
field added later does not break a client checking them.
"""

from __future__ import annotations

from typing import Final

from corral.jobs.model import STATUSES
from corral.objects.ipolicy import SPEC_PARAMETERS
from corral.rapi.handlers.nodes import ROLES
from corral.rapi.schema import (
    ANY,
    NULL,
    Schema,
    any_of,
    array,
    boolean,
    integer,
    nullable,
    obj,
    string,
)
from corral.rapi.spec import DEPENDS_ONLY

__all__ = [
    "CANCEL_RESULT", "CLUSTER_INFO", "CONSOLE", "ERROR", "FEATURE_LIST", "FILTER",
    "FILTER_BODY", "GROUP", "INSTANCE", "IPOLICY", "JOB", "JOB_ID", "NETWORK", "NODE",
    "NODE_ROLE", "OPENAPI",
    "QUERY_BODY", "QUERY_FIELDS_RESULT", "QUERY_RESULT", "REINSTALL_BODY", "ROLE_BODY",
    "STRINGS", "TAG_BODY", "WAIT_BODY", "WAIT_RESULT", "bulk_or_index",
]

#: What write operations answer: the id of the job they submitted, a JSON number as
#: Ganeti 3.0's RAPI answers it.
JOB_ID: Final = integer("ID of the submitted job; follow it at /2/jobs/[job_id]", minimum=0)

#: Every error answer.
ERROR: Final = obj({
    "code": integer("The HTTP status code"),
    "message": string("What was wrong, and what is accepted"),
    "explain": string("What the HTTP status means"),
}, required=("code", "message", "explain"))

STRINGS: Final = array(string())

_TIMESTAMP: Final = nullable(array(integer(), "[seconds, microseconds]"))


def bulk_or_index(key: str, key_schema: Schema, item: Schema) -> Schema:
    """An index resource's answer: ``[{key, uri}]``, or the items with ``bulk=1``."""
    link = obj({key: key_schema, "uri": string()}, required=(key, "uri"))
    return any_of(array(link, "Without bulk: an id and a URI per item"),
                  array(item, "With bulk=1: every item's fields"))


_SPEC: Final = obj({name: integer(minimum=0) for name in SPEC_PARAMETERS},
                  doc="An instance specification (sizes in MiB)")
#: An instance policy as Ganeti shows it (``ipolicy`` of /2/info and /2/groups).
IPOLICY: Final = obj({
    "minmax": array(obj({"min": _SPEC, "max": _SPEC}), "Bounds: an instance fits one pair"),
    "std": _SPEC,
    "disk-templates": array(string(), "The disk templates instances may use"),
    "vcpu-ratio": {"type": "number", "description": "Virtual CPUs per physical CPU"},
    "spindle-ratio": {"type": "number", "description": "Spindle uses per spindle"},
}, doc="An instance policy (a group's custom one has only the keys it overrides)")

CLUSTER_INFO: Final = obj({
    "name": string("The cluster's name"),
    "uuid": string(),
    "master": string("The master node's name"),
    "software_version": string(),
    "protocol_version": integer(),
    "enabled_hypervisors": STRINGS,
    "default_hypervisor": string(),
    "beparams": obj(), "hvparams": obj(), "nicparams": obj(), "ndparams": obj(),
    "tags": STRINGS, "ipolicy": IPOLICY, "default_iallocator": string(
        "The default allocators, comma-separated, tried in turn"),
    "aggregates": obj(additional=string(), doc="corral's named placement aggregates: "
                      "name -> aggregate UUID (gnt-cluster add-aggregate)"),
}, required=("name", "uuid", "master"), doc="The cluster's settings (Ganeti's keys)")

FEATURE_LIST: Final = array(string(), "Optional features this server implements")

JOB: Final = obj({
    "id": integer(), "status": string(enum=STATUSES),
    "ops": array(obj()), "summary": STRINGS, "opstatus": STRINGS,
    "received_ts": _TIMESTAMP, "start_ts": _TIMESTAMP, "end_ts": _TIMESTAMP,
    "oplog": array(array(ANY)), "opresult": array(ANY),
}, required=("id", "status"))

CANCEL_RESULT: Final = array(ANY, "[success, message]")

WAIT_BODY: Final = obj({
    "fields": array(string(), "Job fields to return (as in /2/jobs/[job_id])"),
    "previous_job_info": nullable(array(ANY, "The values of 'fields' the client has")),
    "previous_log_serial": nullable(integer("The last log entry serial the client has")),
}, required=("fields",), additional=False)

WAIT_RESULT: Final = nullable(obj({
    "job_info": array(ANY, "The values of the asked fields"),
    "log_entries": array(array(ANY), "[serial, [sec, usec], type, message] each"),
}, required=("job_info", "log_entries"), doc="Null when nothing changed in ten seconds"))

FILTER: Final = obj({
    "uuid": string(), "watermark": integer(), "priority": integer(),
    "predicates": array(array(ANY)), "action": any_of(string(), array(ANY)),
    "reason_trail": array(array(ANY)),
}, required=("uuid",))

FILTER_BODY: Final = obj({
    "priority": integer("Rules are tried by increasing priority (default 0)", minimum=0),
    "predicates": array(array(ANY), "[kind, query filter] each; kinds: jobid, opcode, "
                                    "reason (default: none, the rule matches every job)"),
    "action": any_of(string(enum=("ACCEPT", "PAUSE", "REJECT", "CONTINUE")), array(ANY),
                     doc="ACCEPT, PAUSE, REJECT, CONTINUE or [\"RATE_LIMIT\", n] "
                         "(default CONTINUE)"),
    "reason": array(array(ANY), "The rule's reason trail: [source, reason, timestamp_ns] "
                                "each; 'gnt:' sources are refused, except the ['gnt:client', "
                                "'', timestamp_ns] entry Ganeti's client library adds, stored "
                                "as 'gnt:client:rapi-client'"),
}, additional=False)

NODE: Final = obj({
    "name": string(), "uuid": string(), "role": string(enum=tuple(ROLES)),
    "offline": nullable(boolean()), "master_candidate": nullable(boolean()),
    "drained": nullable(boolean()), "pip": nullable(string()), "sip": nullable(string()),
    "group.uuid": nullable(string()), "pinst_list": nullable(STRINGS),
    "sinst_list": nullable(STRINGS), "tags": nullable(STRINGS),
}, required=("name",))

NODE_ROLE: Final = string("The node's role", enum=tuple(ROLES.values()))
ROLE_BODY: Final = string("The new role",
                          enum=("regular", "master-candidate", "drained", "offline"))

GROUP: Final = obj({
    "name": string(), "uuid": string(), "alloc_policy": nullable(string()),
    "node_cnt": nullable(integer()), "node_list": nullable(STRINGS),
    "ndparams": nullable(obj()), "tags": nullable(STRINGS),
    "ipolicy": nullable(IPOLICY), "custom_ipolicy": nullable(IPOLICY),
}, required=("name",))

NETWORK: Final = obj({
    "name": string(), "uuid": string(), "network": string("IPv4 subnet (CIDR)"),
    "gateway": nullable(string()), "network6": nullable(string()),
    "gateway6": nullable(string()), "mac_prefix": nullable(string()),
    "free_count": nullable(integer()), "reserved_count": nullable(integer()),
    "map": nullable(string("One character per address: X taken, . free")),
    "group_list": nullable(array(STRINGS, "[group, NIC mode, NIC link, VLAN] per group")),
    "inst_list": nullable(STRINGS), "external_reservations": nullable(string()),
    "tags": nullable(STRINGS),
}, required=("name",))

INSTANCE: Final = obj({
    "name": string(), "uuid": string(), "os": nullable(string()), "pnode": nullable(string()),
    "snodes": nullable(STRINGS), "disk_template": nullable(string()),
    "admin_state": nullable(string()), "oper_state": nullable(boolean()),
    "status": nullable(string()), "beparams": nullable(obj()), "hvparams": nullable(obj()),
    "disk.sizes": nullable(array(integer())), "nic.macs": nullable(STRINGS),
    "tags": nullable(STRINGS),
}, required=("name",))

REINSTALL_BODY: Final = obj({
    "os": nullable(string("OS to install (default: the instance's)")),
    "start": boolean("Start the instance afterwards (default true)"),
    "osparams": nullable(obj(doc="OS parameters for this installation only")),
}, additional=False)

CONSOLE: Final = obj({
    "instance": string(), "kind": string("msg, ssh, vnc or spice"),
    "message": string("kind msg: why there is nothing to connect to"),
    "host": string("ssh: the primary node; vnc, spice: the address listened on"),
    "port": nullable(integer("ssh: the node's ssh port; vnc, spice: the TCP port")),
    "user": string("ssh: the user to log in as"),
    "command": array(string(), doc="ssh: the command attaching to the serial console"),
    "display": integer("vnc: the display number (port - 5900)"),
}, required=("instance", "kind"), additional=False,
    doc="How to reach the console (Ganeti's console description: only the keys of its "
        "kind)")

_FIELD_DEF: Final = obj({"name": string(), "title": string(), "kind": string(),
                         "doc": string()}, required=("name", "title", "kind", "doc"))

QUERY_RESULT: Final = obj({
    "fields": array(_FIELD_DEF),
    "data": array(array(array(ANY, "[status, value]; status 0 is a normal value"))),
}, required=("fields", "data"))

QUERY_FIELDS_RESULT: Final = obj({"fields": array(_FIELD_DEF)}, required=("fields",))

QUERY_BODY: Final = obj({
    "fields": array(string(), "Fields to return (default: the 'fields' query argument)"),
    "qfilter": ANY | {"description": "Query filter in list form, e.g. "
                                     "[\"=\", \"name\", \"web1\"]"},
    "filter": ANY | {"description": "Older name of qfilter"},
}, additional=False)

TAG_BODY: Final = any_of(
    STRINGS | {"description": "Ignored: Ganeti's client repeats the tags here"},
    DEPENDS_ONLY.schema,
)

OPENAPI: Final = obj({"openapi": string(), "info": obj(), "paths": obj()},
                     required=("openapi", "info", "paths"))

#: JSON null, for resources that answer nothing.
NOTHING: Final = NULL
