"""Where the htools read a cluster from.

- ``-t FILE``: the text data format (:mod:`corral.allocator.textformat`);
- ``-I FILE``: an iallocator request's cluster;
- ``-L[SOCKET]``: a corral master daemon, through luxi queries (node, instance and
  group fields and the cluster's info, the ones Ganeti's htools ask for);
- ``-m ADDRESS``: a corral or Ganeti cluster's RAPI (``/2/groups?bulk=1``, nodes,
  instances, ``/2/info``), as ``https://user:password@host:port``, ``host:port`` or
  ``host`` (port 5080); certificates are not checked (as the htools do), a
  ``file://DIR`` reads the four answers from ``DIR/groups.json`` ... ``info.json``;
- ``--simulate``: empty groups of identical nodes.

Offline or not VM-capable nodes report nothing and count as offline, drained ones
too. A group without an instance policy (a cluster that keeps none) gets Ganeti's
default policy.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from corral.allocator.load import finish, set_node_status
from corral.allocator.model import NO_NODE, Cluster, Group, Instance, LoadError, Node
from corral.allocator.types import (
    DEFAULT_IPOLICY,
    DISK_TEMPLATES,
    INSTANCE_STATUSES,
    IPolicy,
    PolicyError,
    alloc_policy_from_raw,
)
from corral.cli.htools.options import Options, fail, parse_unit

__all__ = ["load", "read_utilisation"]

RAPI_PORT = 5080
_DEFAULT_GROUP = "00000000-0000-0000-0000-000000000000"

NODE_FIELDS = ["name", "mtotal", "mnode", "mfree", "dtotal", "dfree", "ctotal", "cnos",
               "offline", "drained", "vm_capable", "ndp/spindle_count", "group.uuid",
               "tags", "ndp/exclusive_storage", "sptotal", "spfree", "ndp/cpu_speed"]
INSTANCE_FIELDS = ["name", "disk_usage", "be/memory", "be/vcpus", "status", "pnode",
                   "snodes", "tags", "be/auto_balance", "disk_template", "be/spindle_use",
                   "disk.sizes", "disk.spindles", "forthcoming"]
GROUP_FIELDS = ["uuid", "name", "alloc_policy", "ipolicy", "tags"]


def _policy(value: Any, what: str) -> IPolicy:
    if value is None:
        return DEFAULT_IPOLICY
    try:
        return IPolicy.from_json(value, what)
    except PolicyError as err:
        raise LoadError(str(err)) from None


def _group(cluster: Cluster, uuid: str, name: str, policy: str, ipolicy: Any,
           tags: Sequence[str]) -> None:
    try:
        apol = alloc_policy_from_raw(policy)
    except PolicyError as err:
        raise LoadError(f"Group '{name}': {err}") from None
    cluster.groups.append(Group(name, uuid, apol, (), _policy(ipolicy, f"group {name}"),
                                tuple(tags), len(cluster.groups)))


def _node(cluster: Cluster, groups: dict[str, int], name: str, get: Callable[[str], Any],
          optional: Callable[[str, Any], Any]) -> None:
    offline = bool(get("offline"))
    drained = bool(get("drained"))
    vm_capable = optional("vm_capable", True)
    vm_capable = True if vm_capable is None else bool(vm_capable)
    live = not offline and vm_capable
    guuid = optional("group.uuid", _DEFAULT_GROUP) or _DEFAULT_GROUP
    if guuid not in groups:
        raise LoadError(f"Unknown group '{guuid}' for node {name}")
    excl = bool(optional("ndp/exclusive_storage", False))

    def lv(key: str, default: Any, kind: type = int) -> Any:
        if not live:
            return default
        value = get(key)
        if value is None or isinstance(value, bool):
            raise LoadError(f"Node '{name}', error while reading attribute '{key}': "
                            f"no value ({value!r})")
        return kind(value)

    def lv_opt(key: str, default: Any, kind: type = int) -> Any:
        if not live:
            return default
        value = optional(key, None)
        return default if value is None else kind(value)

    t_sp = lv("sptotal", 0) if excl else int(optional("ndp/spindle_count", 1) or 1)
    node = Node(name, lv("mtotal", 0.0, float), lv("mnode", 0), lv("mfree", 0),
                lv_opt("dtotal", 0.0, float), lv_opt("dfree", 0), lv("ctotal", 0.0, float),
                lv("cnos", 0), (not live) or drained, t_sp, lv_opt("spfree", 0),
                groups[guuid], excl)
    node.tags = tuple(optional("tags", []) or [])
    speed = optional("ndp/cpu_speed", None)
    if speed is not None:
        node.cpu_speed = float(speed)
    node.idx = len(cluster.nodes)
    cluster.nodes.append(node)


def _instance(cluster: Cluster, nodes: dict[str, int], name: str, get: Callable[[str], Any],
              mem: Any, vcpus: Any, auto_balance: Any, spindle_use: Any) -> None:
    what = f"Instance '{name}'"
    pnode = get("pnode")
    if pnode not in nodes:
        raise LoadError(f"Unknown node '{pnode}' for instance {name}")
    snodes = get("snodes") or []
    for snode in snodes[:1]:
        if snode not in nodes:
            raise LoadError(f"Unknown node '{snode}' for instance {name}")
    status = get("status")
    if status not in INSTANCE_STATUSES:
        raise LoadError(f"{what}: unknown status {status!r}")
    template = get("disk_template")
    if template not in DISK_TEMPLATES:
        raise LoadError(f"{what}: unknown disk template {template!r}")
    sizes = get("disk.sizes") or []
    spindles = get("disk.spindles") or [None] * len(sizes)
    disks = tuple((int(size), None if sp is None else int(sp))
                  for size, sp in zip(sizes, spindles, strict=False))
    usage = get("disk_usage")
    inst = Instance(name, int(mem), int(usage or 0), int(vcpus), status, nodes[pnode],
                    nodes[snodes[0]] if snodes else NO_NODE, template, int(spindle_use or 1),
                    tuple(get("tags") or []), bool(auto_balance),
                    bool(get("forthcoming") or False), disks or ((int(usage or 0), None),))
    inst.idx = len(cluster.instances)
    cluster.instances.append(inst)


def _set_master(cluster: Cluster, master: str) -> None:
    node = cluster.node_by_name(master)
    if node is None:
        raise LoadError(f"Master node {master} unknown")
    node.is_master = True


def _cluster_info(cluster: Cluster, info: dict[str, Any]) -> None:
    cluster.tags = list(info.get("tags") or [])
    cluster.ipolicy = _policy(info.get("ipolicy"), "cluster ipolicy")
    hypervisor = info.get("default_hypervisor")
    for node in cluster.nodes:
        node.hypervisor = hypervisor
    _set_master(cluster, info["master"])


# -- luxi -----------------------------------------------------------------------------

def _luxi_rows(client: Any, resource: str, fields: list[str]) -> list[list[Any]]:
    answer = client.call("Query", resource, fields, None)
    return [list(row) for row in answer["data"]]


def read_luxi(socket_path: str) -> Cluster:
    """The cluster of a corral master daemon (luxi at ``socket_path``; empty: this
    node's master socket)."""
    from pathlib import Path

    from corral.errors import CorralError
    from corral.luxi.client import Client
    from corral.paths import Paths

    path = Path(socket_path) if socket_path else Paths.from_env().master_socket
    client = Client(path)
    try:
        try:
            group_rows = _luxi_rows(client, "group", GROUP_FIELDS)
        except CorralError as err:
            if "ipolicy" not in str(err):
                raise
            # a cluster that keeps no instance policies: Ganeti's default applies
            group_rows = [[r[0], r[1], r[2], (0, None), r[3]] for r in
                          _luxi_rows(client, "group", ["uuid", "name", "alloc_policy",
                                                      "tags"])]
        node_rows = _luxi_rows(client, "node", NODE_FIELDS)
        inst_rows = _luxi_rows(client, "instance", INSTANCE_FIELDS)
        info = client.call("QueryClusterInfo")
    except CorralError as err:
        raise LoadError(str(err)) from None
    except OSError as err:
        raise LoadError(f"cannot reach the master daemon at {path}: "
                        f"{err.strerror or err}") from None
    finally:
        client.close()
    return _from_rows(group_rows, node_rows, inst_rows, info)


def _value(kind: str, name: str, field: str, cell: Any, strict: bool = True) -> Any:
    status, value = cell
    if status != 0:
        if strict:
            raise LoadError(f"{kind} '{name}', error while reading attribute '{field}': "
                            f"no data (status {status})")
        return None
    return value


def _from_rows(group_rows: list[list[Any]], node_rows: list[list[Any]],
               inst_rows: list[list[Any]], info: dict[str, Any]) -> Cluster:
    cluster = Cluster()
    groups: dict[str, int] = {}
    for row in group_rows:
        name = _value("Group", "?", "name", row[1])
        uuid = _value("Group", name, "uuid", row[0])
        groups[uuid] = len(cluster.groups)
        _group(cluster, uuid, name, _value("Group", name, "alloc_policy", row[2]),
               _value("Group", name, "ipolicy", row[3], strict=False),
               _value("Group", name, "tags", row[4]))
    nodes: dict[str, int] = {}
    for row in node_rows:
        cells = dict(zip(NODE_FIELDS, row, strict=True))
        name = _value("Node", "?", "name", cells["name"])
        nodes[name] = len(cluster.nodes)

        def nget(key: str, c: dict[str, Any] = cells, n: str = name) -> Any:
            return _value("Node", n, key, c[key])

        def nopt(key: str, default: Any, c: dict[str, Any] = cells, n: str = name) -> Any:
            value = _value("Node", n, key, c[key], strict=False)
            return default if value is None else value

        _node(cluster, groups, name, nget, nopt)
    for row in inst_rows:
        cells = dict(zip(INSTANCE_FIELDS, row, strict=True))
        name = _value("Instance", "?", "name", cells["name"])

        def get(key: str, c: dict[str, Any] = cells, n: str = name) -> Any:
            return _value("Instance", n, key, c[key], strict=key not in (
                "forthcoming", "disk.spindles"))

        _instance(cluster, nodes, name, get, get("be/memory"), get("be/vcpus"),
                  get("be/auto_balance"), get("be/spindle_use"))
    _cluster_info(cluster, info)
    return cluster


# -- RAPI -------------------------------------------------------------------------------

def _rapi_base(master: str) -> tuple[str, str | None]:
    """The base URL and the Basic credentials of ``-m ADDRESS``."""
    if "://" not in master:
        master = f"https://{master}" if ":" in master else f"https://{master}:{RAPI_PORT}"
    parts = urllib.parse.urlsplit(master)
    auth = None
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        auth = base64.b64encode(f"{user}:{password}".encode()).decode()
        netloc = parts.hostname or ""
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        master = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return master.rstrip("/"), auth


def _rapi_get(base: str, auth: str | None, path: str) -> Any:
    request = urllib.request.Request(base + path)
    if auth:
        request.add_header("Authorization", f"Basic {auth}")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    shown = base.split("//", 1)[-1]
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as err:
        raise LoadError(f"RAPI error for '{shown}{path}': HTTP {err.code} {err.reason}") \
            from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise LoadError(f"cannot read '{shown}{path}': {reason}") from None
    except json.JSONDecodeError as err:
        raise LoadError(f"'{shown}{path}' did not answer JSON: {err}") from None


def read_rapi(master: str) -> Cluster:
    """The cluster behind a RAPI address (see the module text)."""
    if master.startswith("file://"):
        directory = master[len("file://"):]

        def fetch(name: str) -> Any:
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as handle:
                    return json.load(handle)
            except (OSError, json.JSONDecodeError) as err:
                raise LoadError(f"cannot read {name} in {directory}: {err}") from None

        groups, nodes, insts, info = (fetch("groups.json"), fetch("nodes.json"),
                                      fetch("instances.json"), fetch("info.json"))
    else:
        base, auth = _rapi_base(master)
        groups = _rapi_get(base, auth, "/2/groups?bulk=1")
        nodes = _rapi_get(base, auth, "/2/nodes?bulk=1")
        insts = _rapi_get(base, auth, "/2/instances?bulk=1")
        info = _rapi_get(base, auth, "/2/info")
    return _from_rapi(groups, nodes, insts, info)


def _need(obj: dict[str, Any], key: str, what: str) -> Any:
    if key not in obj:
        raise LoadError(f"{what}: key '{key}' is missing")
    return obj[key]


def _from_rapi(groups: list[dict[str, Any]], nodes: list[dict[str, Any]],
               insts: list[dict[str, Any]], info: dict[str, Any]) -> Cluster:
    cluster = Cluster()
    gidx: dict[str, int] = {}
    for raw in groups:
        name = _need(raw, "name", "Parsing new group")
        what = f"Group '{name}'"
        uuid = _need(raw, "uuid", what)
        gidx[uuid] = len(cluster.groups)
        _group(cluster, uuid, name, _need(raw, "alloc_policy", what), raw.get("ipolicy"),
               _need(raw, "tags", what))
    nidx: dict[str, int] = {}
    for raw in nodes:
        name = _need(raw, "name", "Parsing new node")
        what = f"Node '{name}', error while parsing data"
        ndparams = _need(raw, "ndparams", what)
        flat = dict(raw)
        flat["ndp/exclusive_storage"] = ndparams.get("exclusive_storage", False)
        flat["ndp/spindle_count"] = ndparams.get("spindle_count", 1)
        nidx[name] = len(cluster.nodes)

        def rget(key: str, f: dict[str, Any] = flat, w: str = what) -> Any:
            return _need(f, key, w)

        def ropt(key: str, default: Any, f: dict[str, Any] = flat) -> Any:
            return None if key == "ndp/cpu_speed" else f.get(key, default)

        _node(cluster, gidx, name, rget, ropt)
    for raw in insts:
        name = _need(raw, "name", "Parsing new instance")
        what = f"Instance '{name}', error while parsing data"
        beparams = _need(raw, "beparams", what)
        oper = raw.get("oper_ram")
        mem = oper if isinstance(oper, int) and not isinstance(oper, bool) else (
            beparams.get("memory", beparams.get("maxmem")))
        if mem is None:
            raise LoadError(f"{what}: no memory size")
        def iget(key: str, r: dict[str, Any] = raw, w: str = what) -> Any:
            return r.get(key) if key in ("forthcoming", "disk.spindles") else _need(r, key, w)

        _instance(cluster, nidx, name, iget, mem, _need(beparams, "vcpus", what),
                  _need(beparams, "auto_balance", what), _need(beparams, "spindle_use", what))
    _cluster_info(cluster, info)
    return cluster


# -- simulation -------------------------------------------------------------------------

def simulate(specs: Sequence[str]) -> Cluster:
    """Empty groups of identical nodes, one per ``alloc_policy,nodes,disk,ram,cpu
    [,spindles[,exclusive_storage]]``."""
    cluster = Cluster()
    abbrev = {"p": "preferred", "a": "last_resort", "u": "unallocable"}
    for gnum, spec in enumerate(specs, start=1):
        parts = spec.split(",")
        if len(parts) == 5:
            parts.append("1")
        if len(parts) == 6:
            parts.append("False")
        if len(parts) != 7:
            raise LoadError(f"Invalid cluster specification, expected 6 comma-separated "
                            f"sections (allocation policy, node count, disk size, memory "
                            f"size, number of CPUs, spindles) but got {len(parts)}: '{spec}'")
        try:
            apol = alloc_policy_from_raw(abbrev.get(parts[0], parts[0]))
        except PolicyError:
            raise LoadError(f"Cannot parse AllocPolicy abbreviation '{parts[0]}'") from None
        try:
            count = int(parts[1])
            disk = parse_unit(parts[2], "disk size")
            mem = parse_unit(parts[3], "memory size")
            cpu = int(parts[4])
            spindles = int(parts[5])
        except ValueError as err:
            raise LoadError(f"Invalid cluster specification '{spec}': {err}") from None
        excl = parts[6] == "True"
        group = Group(f"group-{gnum:02d}", f"fake-uuid-{gnum:02d}", apol, (),
                      DEFAULT_IPOLICY, (), len(cluster.groups))
        cluster.groups.append(group)
        for num in range(1, count + 1):
            node = Node(f"node-{gnum:02d}-{num:03d}", float(mem), 0, mem, float(disk), disk,
                        float(cpu), 1, False, spindles, 0, group.idx, excl)
            node.is_master = gnum == 1 and num == 1
            node.idx = len(cluster.nodes)
            cluster.nodes.append(node)
    return cluster


# -- all together -----------------------------------------------------------------------

def read_utilisation(path: str) -> dict[str, tuple[float, float, float, float]]:
    """``-U FILE``: lines ``name cpu mem disk net``."""
    out = {}
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except OSError as err:
        fail(f"can't parse utilisation data: {err}")
    for line in lines:
        if not line:
            continue
        parts = line.split(" ")
        if len(parts) != 5:
            fail(f"can't parse utilisation data: Cannot parse line {line}")
        try:
            out[parts[0]] = (float(parts[1]), float(parts[2]), float(parts[3]),
                             float(parts[4]))
        except ValueError:
            fail(f"can't parse utilisation data: {parts[0]}: cannot parse string "
                 f"'{line}'")
    return out


def read_cluster(opts: Options) -> Cluster:
    """The unfinished cluster from the backend the options name."""
    from corral.allocator import textformat

    chosen = [opts.master != "", opts.luxi is not None, opts.data_file is not None]
    if sum(chosen) > 1:
        fail("Only one of the rapi, luxi, and data files options should be given.")
    if opts.master:
        return read_rapi(opts.master)
    if opts.luxi is not None:
        return read_luxi(opts.luxi)
    if opts.simulate:
        return simulate(opts.simulate)
    if opts.data_file is not None:
        return textformat.read_file(opts.data_file)
    if opts.ialloc_src is not None:
        from corral.allocator.request import RequestError, parse

        try:
            with open(opts.ialloc_src, encoding="utf-8") as handle:
                raw = json.load(handle)
        except (OSError, json.JSONDecodeError) as err:
            raise LoadError(f"{opts.ialloc_src}: {err}") from None
        try:
            parsed = parse(raw, 0, finish_cluster=False)
        except RequestError as err:
            raise LoadError(str(err)) from None
        return parsed.cluster
    fail("No backend selected! Exiting.")


def load(opts: Options, *, node_status: bool = True) -> Cluster:
    """Read, finish and (with ``node_status``) apply -O/--max-cpu/--min-disk: the
    cluster a tool works on. Exits with htools' message if it cannot be read."""
    util = None
    if opts.dynu_file and not opts.ignore_dynu:
        util = read_utilisation(opts.dynu_file)
    try:
        cluster = read_cluster(opts)
        if opts.luxi is not None and not opts.master and opts.data_file is None:
            # corral migrates diskless instances freely (htools leaves them alone)
            for inst in cluster.instances:
                if inst.disk_template == "diskless":
                    inst.movable = True
        warnings = finish(cluster,
                          exclusion_tags=[t + ":" for t in opts.exclusion_tags or []],
                          selected=opts.select_instances, excluded=opts.exclude_instances,
                          util=util, static_kvm_memory=opts.static_kvm_memory)
    except LoadError as err:
        fail(f"failed to load data, aborting: {err}")
    if warnings and opts.verbose != 0:
        sys.stderr.write("Warning: cluster has inconsistent data:\n"
                         + "".join(f"  - {w}\n" for w in warnings) + "\n")
    if node_status:
        try:
            set_node_status(cluster, offline=opts.offline, max_cpu=opts.max_cpu,
                            min_disk=opts.min_disk)
        except LoadError as err:
            fail(str(err))
    return cluster

