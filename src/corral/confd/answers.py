"""What confd answers: a pure function of a configuration snapshot and a request.

:class:`Snapshot` is built once per configuration serial and holds exactly the
indexes the queries need (node role by name, instance IP -> primary node IP per NIC
link, ...), so that every answer is a dictionary lookup. :func:`answer` maps a
request to ``(status, answer)`` with Ganeti 3.0's semantics:

==== ============================ ===============================================
type query                        answer
==== ============================ ===============================================
0    (ignored)                    the configuration schema version (Ganeti: its
                                  config version)
1    node name or UUID            the node's role (:class:`NodeRole`): master, else
                                  drained, else offline, else candidate, else regular
2    ``{"1": ip}`` or             the primary IP of the primary node of the instance
     ``{"2": [ip, ...]}``,        owning ``ip`` on link ``"0"`` (default: the
     optional ``{"0": link}``     cluster's default NIC link); for a list, OK and one
                                  ``[status, answer, serial]`` per IP
3    None, or ``{"3": [f, ...]}`` the master node's name; for fields, a list with
                                  the master's name (0), cluster IP (1), node
                                  primary IP (2)
4    (ignored)                    every node's primary IP
5    (ignored)                    the master candidates' primary IPs
6    None or a link name          the IPs of instance NICs on that link (default:
                                  the cluster's default NIC link), sorted
100  (ignored)                    every instance's name (corral)
101  instance name or UUID        the instance's primary node's name (corral)
102  (ignored)                    the offline nodes' names (corral)
==== ============================ ===============================================

Errors are ``(Status.ERROR, ErrorCode)``: an unknown node, instance or IP is
``UNKNOWN_ENTRY``, a query of the wrong shape ``ARGUMENT``. Types Ganeti has and
corral does not implement (DRBD minors, node instances, instance disks, config
path queries, data collectors) answer ``Status.NOTIMPLEMENTED``. Lists of nodes are
in node-name order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral import CONFIG_SCHEMA_VERSION
from corral.confd.protocol import (
    ErrorCode,
    MasterField,
    NodeRole,
    QueryKey,
    QueryType,
    Status,
)
from corral.config import ConfigStore

__all__ = ["Answer", "Snapshot", "answer", "build_snapshot"]

#: ``(status, answer)`` as it goes into a reply.
Answer = tuple[int, Any]

_UNKNOWN_ENTRY: Answer = (Status.ERROR, ErrorCode.UNKNOWN_ENTRY)
_ARGUMENT_ERROR: Answer = (Status.ERROR, ErrorCode.ARGUMENT)


@dataclass(frozen=True)
class Snapshot:
    """The indexes confd answers from, for one configuration serial. Immutable once
    built: the server swaps in a new one rather than changing it."""

    serial: int
    master_name: str
    master_ip: str
    master_pip: str
    #: node name and UUID -> role
    roles: dict[str, int]
    node_pips: list[str]
    mc_pips: list[str]
    default_link: str
    #: link -> instance IP -> primary node's primary IP (None: node missing)
    pip_by_ip: dict[str, dict[str, str | None]]
    #: link -> sorted instance IPs
    ips_by_link: dict[str, list[str]]
    instance_names: list[str]
    #: instance name and UUID -> primary node name
    primary_node: dict[str, str]
    offline_nodes: list[str]
    version: int = CONFIG_SCHEMA_VERSION
    #: Memo of computed answers for string and empty queries (see :func:`answer`).
    memo: dict[tuple[int, str | None], Answer] = field(default_factory=dict, compare=False)


def build_snapshot(store: ConfigStore) -> Snapshot:
    """Compute the indexes from a loaded configuration (cost O(configuration))."""
    cluster = store.cluster
    nodes = store.all("node")
    by_uuid = {node.uuid: node for node in nodes}
    master = by_uuid.get(cluster.master_node)
    roles: dict[str, int] = {}
    for node in nodes:
        if node.uuid == cluster.master_node:
            role = NodeRole.MASTER
        elif node.drained:
            role = NodeRole.DRAINED
        elif node.offline:
            role = NodeRole.OFFLINE
        elif node.master_candidate:
            role = NodeRole.CANDIDATE
        else:
            role = NodeRole.REGULAR
        roles[node.name] = int(role)
        roles[node.uuid] = int(role)
    default_link = str(cluster.nicparams.get("default", {}).get("link", ""))
    pip_by_ip: dict[str, dict[str, str | None]] = {}
    primary_node: dict[str, str] = {}
    instances = store.all("instance")
    for inst in instances:
        pnode = by_uuid.get(inst.primary_node)
        if pnode is not None:
            primary_node[inst.name] = pnode.name
            primary_node[inst.uuid] = pnode.name
        for nic in inst.nics:
            if not nic.ip:
                continue
            link = str(nic.nicparams.get("link") or default_link)
            pip_by_ip.setdefault(link, {})[nic.ip] = pnode.primary_ip if pnode else None
    return Snapshot(
        serial=store.serial,
        master_name=master.name if master else "",
        master_ip=cluster.master_ip,
        master_pip=master.primary_ip if master else "",
        roles=roles,
        node_pips=[node.primary_ip for node in nodes],
        mc_pips=[node.primary_ip for node in nodes
                 if node.master_candidate or node.uuid == cluster.master_node],
        default_link=default_link,
        pip_by_ip=pip_by_ip,
        ips_by_link={link: sorted(ips) for link, ips in pip_by_ip.items()},
        instance_names=[inst.name for inst in instances],
        primary_node=primary_node,
        offline_nodes=[node.name for node in nodes if node.offline],
    )


#: Memo entries kept per snapshot; beyond that the memo starts afresh (flat memory).
MEMO_LIMIT = 4096


def answer(snap: Snapshot, qtype: int, query: Any) -> Answer | None:
    """``(status, answer)`` for a request, or None when ``qtype`` is no query type
    at all (such a request gets no answer, as with Ganeti).

    Answers to string and empty queries are memoised in the snapshot, so repeated
    queries cost one lookup.
    """
    handler = _HANDLERS.get(qtype)
    if handler is None:
        if qtype in _NOT_IMPLEMENTED:
            return (Status.NOTIMPLEMENTED, f"query type {qtype} is not implemented by corral")
        return None
    if query is None or isinstance(query, str):
        key = (qtype, query)
        found = snap.memo.get(key)
        if found is None:
            found = handler(snap, query)
            if len(snap.memo) >= MEMO_LIMIT:
                snap.memo.clear()
            snap.memo[key] = found
        return found
    return handler(snap, query)


def _ping(snap: Snapshot, query: Any) -> Answer:
    return (Status.OK, snap.version)


def _node_role(snap: Snapshot, query: Any) -> Answer:
    if not isinstance(query, str):
        return _ARGUMENT_ERROR
    role = snap.roles.get(query)
    return _UNKNOWN_ENTRY if role is None else (Status.OK, role)


def _pip_of(snap: Snapshot, link: str, ip: Any) -> Answer:
    pip = snap.pip_by_ip.get(link, {}).get(ip) if isinstance(ip, str) else None
    return _UNKNOWN_ENTRY if pip is None else (Status.OK, pip)


def _node_pip_by_instance_ip(snap: Snapshot, query: Any) -> Answer:
    if not isinstance(query, dict):
        return _ARGUMENT_ERROR
    link = query.get(QueryKey.LINK)
    if link is None:
        link = snap.default_link
    ip = query.get(QueryKey.IP)
    iplist = query.get(QueryKey.IPLIST, [])
    if not isinstance(link, str) or not isinstance(iplist, list) or not (
            ip is None or isinstance(ip, str)):
        return _ARGUMENT_ERROR
    if ip is not None:
        return _pip_of(snap, link, ip)
    if not all(isinstance(item, str) for item in iplist):
        return _ARGUMENT_ERROR
    results = []
    for item in iplist:
        status, value = _pip_of(snap, link, item)
        results.append([status, value, snap.serial if status == Status.OK else 0])
    return (Status.OK, results)


def _cluster_master(snap: Snapshot, query: Any) -> Answer:
    if query is None:
        return (Status.OK, snap.master_name)
    if not isinstance(query, dict):
        return _ARGUMENT_ERROR
    fields = query.get(QueryKey.FIELDS, [])
    values = {MasterField.NAME: snap.master_name, MasterField.IP: snap.master_ip,
              MasterField.MNODE_PIP: snap.master_pip}
    if not isinstance(fields, list) or not all(
            type(f) is int and f in values for f in fields):
        return _ARGUMENT_ERROR
    return (Status.OK, [values[MasterField(f)] for f in fields])


def _node_pip_list(snap: Snapshot, query: Any) -> Answer:
    return (Status.OK, snap.node_pips)


def _mc_pip_list(snap: Snapshot, query: Any) -> Answer:
    return (Status.OK, snap.mc_pips)


def _instances_ips_list(snap: Snapshot, query: Any) -> Answer:
    if query is None:
        query = snap.default_link
    if not isinstance(query, str):
        return _ARGUMENT_ERROR
    return (Status.OK, snap.ips_by_link.get(query, []))


def _instance_list(snap: Snapshot, query: Any) -> Answer:
    return (Status.OK, snap.instance_names)


def _instance_primary_node(snap: Snapshot, query: Any) -> Answer:
    if not isinstance(query, str):
        return _ARGUMENT_ERROR
    node = snap.primary_node.get(query)
    return _UNKNOWN_ENTRY if node is None else (Status.OK, node)


def _offline_nodes(snap: Snapshot, query: Any) -> Answer:
    return (Status.OK, snap.offline_nodes)


_HANDLERS: dict[int, Callable[[Snapshot, Any], Answer]] = {
    QueryType.PING: _ping,
    QueryType.NODE_ROLE_BYNAME: _node_role,
    QueryType.NODE_PIP_BY_INSTANCE_IP: _node_pip_by_instance_ip,
    QueryType.CLUSTER_MASTER: _cluster_master,
    QueryType.NODE_PIP_LIST: _node_pip_list,
    QueryType.MC_PIP_LIST: _mc_pip_list,
    QueryType.INSTANCES_IPS_LIST: _instances_ips_list,
    QueryType.INSTANCE_LIST: _instance_list,
    QueryType.INSTANCE_PRIMARY_NODE: _instance_primary_node,
    QueryType.OFFLINE_NODES: _offline_nodes,
}

_NOT_IMPLEMENTED = frozenset({
    QueryType.NODE_DRBD, QueryType.NODE_INSTANCES, QueryType.INSTANCE_DISKS,
    QueryType.CONFIG_QUERY, QueryType.DATA_COLLECTORS,
})
