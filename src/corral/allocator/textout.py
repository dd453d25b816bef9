"""How the htools print numbers and tables: node and instance lists (``-p``,
``--print-instances``), the metric table, fixed-point numbers rounded as Haskell's
``printf`` rounds them (on the shortest decimal form, ties to even), and ``show`` of
lists and floats."""

from __future__ import annotations

import decimal
from collections.abc import Sequence

from corral.allocator.model import NO_NODE, Cluster, Instance, Node
from corral.allocator.nodeops import pdsk
from corral.allocator.textformat import haskell_double
from corral.allocator.types import IPolicy, ISpec

__all__ = [
    "NODE_DEFAULT_FIELDS",
    "UnknownFieldError",
    "fixed",
    "format_rows",
    "format_table",
    "node_fields",
    "print_instances",
    "print_nodes",
    "show_ipolicy",
]

UNKNOWN_FIELD = "<unknown field>"


class UnknownFieldError(ValueError):
    """A node field that the node list does not know."""


def fixed(value: float, decimals: int) -> str:
    """``printf "%.Nf"`` as the htools print it: the shortest decimal form of the
    number rounded, a tie to the even digit (Python's ``%`` rounds the binary value
    instead, which differs when the shortest form ends in 5)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    quantum = decimal.Decimal(1).scaleb(-decimals)
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        number = decimal.Decimal(repr(value)).quantize(quantum,
                                                       rounding=decimal.ROUND_HALF_EVEN)
    text = f"{number:f}"
    if text.startswith("-") and float(number) == 0:
        text = text[1:]
    return text


def _pad(text: str, width: int, numeric: bool) -> str:
    return text.rjust(width) if numeric else text.ljust(width)


def format_rows(rows: Sequence[Sequence[str]], numeric: Sequence[bool],
                prefix: str = "") -> str:
    """Rows as the htools print tables: columns padded to their widest cell (numbers
    to the right), one space before each line, ``prefix`` before that."""
    if not rows:
        return ""
    table = [list(row) for row in rows]
    width = len(table[0])
    widths = [max(len(row[col]) for row in table) for col in range(width)]
    flags = list(numeric) + [True] * (width - len(numeric))
    lines = []
    for row in table:
        cells = [_pad(cell, widths[col], flags[col]) for col, cell in enumerate(row)]
        lines.append(prefix + " " + " ".join(cells))
    return "".join(line + "\n" for line in lines)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]],
                 numeric: Sequence[bool], prefix: str = "") -> str:
    """A table with a header line (see :func:`format_rows`)."""
    return format_rows([list(header), *rows], numeric, prefix)


#: The fields ``-p`` prints by default.
NODE_DEFAULT_FIELDS: tuple[str, ...] = (
    "status", "name", "tmem", "nmem", "imem", "xmem", "fmem", "umem", "rmem", "tdsk",
    "fdsk", "tcpu", "ucpu", "pcnt", "scnt", "pfmem", "pfdsk", "rcpu", "cload", "mload",
    "dload", "nload",
)

_HEADERS: dict[str, tuple[str, bool]] = {
    "idx": ("Index", True), "name": ("Name", False), "fqdn": ("Name", False),
    "status": ("F", False), "tmem": ("t_mem", True), "nmem": ("n_mem", True),
    "xmem": ("x_mem", True), "fmem": ("f_mem", True), "umem": ("u_mem", True),
    "amem": ("a_mem", True), "imem": ("i_mem", True), "rmem": ("r_mem", True),
    "tdsk": ("t_dsk", True), "fdsk": ("f_dsk", True), "tcpu": ("pcpu", True),
    "ucpu": ("vcpu", True), "pcnt": ("pcnt", True), "scnt": ("scnt", True),
    "plist": ("primaries", True), "slist": ("secondaries", True),
    "pfmem": ("p_fmem", True), "pfdsk": ("p_fdsk", True), "rcpu": ("r_cpu", True),
    "cload": ("lCpu", True), "mload": ("lMem", True), "dload": ("lDsk", True),
    "nload": ("lNet", True), "ptags": ("PrimaryTags", False), "peermap": ("PeerMap", False),
    "spindle_count": ("NodeSpindles", True), "hi_spindles": ("MaxSpindles", True),
    "inst_spindles": ("InstSpindles", True),
}


def _show_list(values: Sequence[int]) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def _node_field(node: Node, field: str) -> str:
    unalloc = node.unallocated_mem
    load = node.util_load
    if field == "idx":
        return f"{node.idx:4d}"
    if field == "name":
        return node.alias
    if field == "fqdn":
        return node.name
    if field == "status":
        return "-" if node.offline else ("*" if node.fail_n1 else " ")
    simple: dict[str, str] = {
        "tmem": fixed(node.t_mem, 0).rjust(5), "nmem": f"{node.n_mem:5d}",
        "xmem": f"{node.x_mem:5d}", "fmem": f"{node.f_mem:5d}", "umem": f"{unalloc:5d}",
        "imem": f"{node.i_mem:5d}", "rmem": f"{node.r_mem:5d}",
        "amem": f"{node.avail_mem:5d}", "tdsk": fixed(node.t_dsk / 1024, 0).rjust(5),
        "fdsk": f"{node.f_dsk // 1024:5d}", "tcpu": fixed(node.t_cpu, 0).rjust(4),
        "ucpu": f"{node.u_cpu:4d}", "pcnt": f"{len(node.p_list):3d}",
        "scnt": f"{len(node.s_list):3d}",
    }
    if field in simple:
        return simple[field]
    if field == "plist":
        return _show_list(list(reversed(node.p_list)))
    if field == "slist":
        return _show_list(list(reversed(node.s_list)))
    if field == "pfmem":
        return fixed(unalloc / node.t_mem if node.t_mem else 0.0, 4).rjust(6)
    if field == "pfdsk":
        return fixed(pdsk(node, node.f_sp, node.f_dsk), 4).rjust(6)
    if field == "rcpu":
        return fixed(node.u_cpu / node.t_cpu if node.t_cpu else 0.0, 2).rjust(5)
    loads = {"cload": 0, "mload": 1, "dload": 2, "nload": 3}
    if field in loads:
        return fixed(load[loads[field]], 3).rjust(5)
    if field == "ptags":
        return ",".join(f"{tag}={count}" for tag, count in sorted(node.p_tags.items()))
    if field == "peermap":
        ordered = sorted(node.peers.items(), key=lambda kv: -kv[1])
        return "[" + ",".join(f"({k},{v})" for k, v in ordered) + "]"
    if field == "spindle_count":
        return str(node.t_sp)
    if field == "hi_spindles":
        return haskell_double(node.hi_sp)
    if field == "inst_spindles":
        return haskell_double(node.inst_sp)
    return UNKNOWN_FIELD


def node_fields(spec: Sequence[str] | None) -> list[str]:
    """The fields to print for ``-p``: the default ones, those given, or the default
    ones plus those after a leading ``+``."""
    if not spec:
        return list(NODE_DEFAULT_FIELDS)
    if spec[0] == "+":
        return [*NODE_DEFAULT_FIELDS, *spec[1:]]
    return list(spec)


def print_nodes(nodes: Sequence[Node], fields: Sequence[str] | None) -> str:
    """The node list of ``-p`` (``fields`` as :func:`node_fields` takes them)."""
    names = node_fields(fields)
    header = [_HEADERS.get(f, (UNKNOWN_FIELD, False))[0] for f in names]
    numeric = [_HEADERS.get(f, (UNKNOWN_FIELD, False))[1] for f in names]
    rows = [[_node_field(node, f) for f in names]
            for node in sorted(nodes, key=lambda n: n.idx)]
    return format_table(header, rows, numeric)


def print_instances(cluster: Cluster, instances: Sequence[Instance]) -> str:
    """The instance list of ``--print-instances``."""
    rows = []
    for inst in sorted(instances, key=lambda i: i.idx):
        snode = cluster.nodes[inst.snode].name if inst.snode != NO_NODE else ""
        util = inst.util
        rows.append([
            "R" if inst.running else " ", inst.name, cluster.nodes[inst.pnode].name, snode,
            "Y" if inst.auto_balance else "N", f"{inst.vcpus:3d}", f"{inst.mem:5d}",
            f"{inst.dsk // 1024:5d}", fixed(util[0], 3).rjust(5), fixed(util[1], 3).rjust(5),
            fixed(util[2], 3).rjust(5), fixed(util[3], 3).rjust(5),
        ])
    header = ["F", "Name", "Pri_node", "Sec_node", "Auto_bal", "vcpu", "mem", "dsk",
              "lCpu", "lMem", "lDsk", "lNet"]
    return format_table(header, rows, [False] * 5 + [True] * 7)


_DT_NAMES = {"diskless": "DTDiskless", "file": "DTFile", "sharedfile": "DTSharedFile",
             "plain": "DTPlain", "blockdev": "DTBlock", "drbd": "DTDrbd8", "rbd": "DTRbd",
             "ext": "DTExt", "gluster": "DTGluster"}


def _show_spec(spec: ISpec) -> str:
    return (f"ISpec {{iSpecMemorySize = {spec.memory_size}, iSpecCpuCount = "
            f"{spec.cpu_count}, iSpecDiskSize = {spec.disk_size}, iSpecDiskCount = "
            f"{spec.disk_count}, iSpecNicCount = {spec.nic_count}, iSpecSpindleUse = "
            f"{spec.spindle_use}}}")


def show_ipolicy(policy: IPolicy) -> str:
    """A policy as hbal -v -v prints it (Haskell's ``show`` of its record)."""
    minmax = ",".join(f"MinMaxISpecs {{minMaxISpecsMinSpec = {_show_spec(p.min)}, "
                      f"minMaxISpecsMaxSpec = {_show_spec(p.max)}}}" for p in policy.minmax)
    templates = ",".join(_DT_NAMES[t] for t in policy.disk_templates)
    return (f"IPolicy {{iPolicyMinMaxISpecs = [{minmax}], iPolicyStdSpec = "
            f"{_show_spec(policy.std)}, iPolicyDiskTemplates = [{templates}], "
            f"iPolicyVcpuRatio = {haskell_double(policy.vcpu_ratio)}, iPolicySpindleRatio = "
            f"{haskell_double(policy.spindle_ratio)}}}")
