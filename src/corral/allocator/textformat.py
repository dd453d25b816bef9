"""Ganeti's htools text data format (``hbal -t FILE``, written by ``hscan``).

A file has sections separated by an empty line: node groups, nodes, instances,
cluster tags (one per line) and instance policies (the cluster's, owner empty, then
each group's by name). Fields are separated by ``|``, lists by ``,``::

    group:     name|uuid|alloc_policy|tags|networks
    node:      name|t_mem|n_mem|f_mem|t_dsk|f_dsk|t_cpu|flag|group_uuid|spindles|tags|
               exclusive_storage|free_spindles|node_os_cpus|cpu_speed
               (flag: M master, Y offline, N other)
    instance:  name|mem|dsk|vcpus|status|auto_balance|pnode|snode|disk_template|tags|
               spindle_use|spindles|forthcoming
    policy:    owner|std_spec|min_spec;max_spec[;min;max...]|disk_templates|
               vcpu_ratio|spindle_ratio
               (spec: memory,cpus,disk_size,disk_count,nic_count,spindle_use)

Trailing node and instance fields may be left out (older files): they take htools'
defaults. :func:`parse` refuses a file with an error that names the line, the field
and what it accepts; :func:`serialize` writes what :func:`parse` reads back.
"""

from __future__ import annotations

import decimal
from typing import TypeVar

from corral.allocator.model import NO_NODE, Cluster, Group, Instance, LoadError, Node
from corral.allocator.types import (
    ALLOC_POLICIES,
    DEFAULT_IPOLICY,
    DISK_TEMPLATES,
    INSTANCE_STATUSES,
    IPolicy,
    ISpec,
    MinMaxISpecs,
    alloc_policy_from_raw,
)

__all__ = ["TextFormatError", "haskell_double", "parse", "read_file", "serialize"]

T = TypeVar("T")

_NODE_FIELDS = ("name", "t_mem", "n_mem", "f_mem", "t_dsk", "f_dsk", "t_cpu", "flag",
                "group_uuid", "spindles", "tags", "exclusive_storage", "free_spindles",
                "node_os_cpus", "cpu_speed")
_NODE_DEFAULTS = ("1", "", "N", "0", "1", "1.0")      # for fields 10.. when missing
_INST_FIELDS = ("name", "mem", "dsk", "vcpus", "status", "auto_balance", "pnode",
                "snode", "disk_template", "tags", "spindle_use", "spindles",
                "forthcoming")
_INST_DEFAULTS = ("1", "-", "N")                     # for fields 11.. when missing
_SPEC_FIELDS = ("memory", "cpus", "disk_size", "disk_count", "nic_count", "spindle_use")


class TextFormatError(LoadError):
    """A text data file that cannot be read; the message names line and field."""


def sep_split(sep: T, items: list[T]) -> list[list[T]]:
    """Split a list at each ``sep`` (htools' rule: an empty list gives no part, a
    trailing separator an empty last part)."""
    parts: list[list[T]] = []
    rest = items
    while rest:
        try:
            cut = rest.index(sep)
        except ValueError:
            parts.append(rest)
            return parts
        parts.append(rest[:cut])
        rest = rest[cut + 1:]
        if not rest:
            parts.append([])
    return parts


def _list(text: str) -> list[str]:
    return text.split(",") if text else []


class _Line:
    """One line being read: reports errors with its number and section."""

    def __init__(self, number: int, section: str, text: str) -> None:
        self.number = number
        self.section = section
        self.fields = text.split("|")

    def fail(self, message: str) -> TextFormatError:
        return TextFormatError(f"line {self.number} ({self.section}): {message}")

    def field_error(self, pos: int, names: tuple[str, ...], accepted: str) -> TextFormatError:
        value = self.fields[pos] if pos < len(self.fields) else ""
        return self.fail(f"field {pos + 1} ({names[pos]}) is {value!r}; expected {accepted}")

    def int_(self, pos: int, names: tuple[str, ...]) -> int:
        try:
            return int(self.fields[pos])
        except ValueError:
            raise self.field_error(pos, names, "an integer") from None

    def float_(self, pos: int, names: tuple[str, ...]) -> float:
        text = self.fields[pos]
        try:
            if text.strip() != text or not text:
                raise ValueError(text)
            return float(text)
        except ValueError:
            raise self.field_error(pos, names, "a number") from None

    def yes_no(self, pos: int, names: tuple[str, ...]) -> bool:
        value = self.fields[pos]
        if value not in ("Y", "N"):
            raise self.field_error(pos, names, "Y or N")
        return value == "Y"


def parse(text: str) -> Cluster:
    """Read a text data file into an (unfinished) cluster: see
    :func:`corral.allocator.load.finish` for what loading adds."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    numbered = list(enumerate(lines, start=1))
    sections = sep_split("", [line for _, line in numbered])
    if len(sections) < 4:
        raise TextFormatError(
            f"the file has {len(sections)} section(s) separated by empty lines; expected "
            "at least 4: node groups, nodes, instances, cluster tags (and policies)")
    starts = []
    pos = 1
    for section in sections:
        starts.append(pos)
        pos += len(section) + 1
    cluster = Cluster()
    group_uuids = _read_groups(cluster, sections[0], starts[0])
    node_names = _read_nodes(cluster, sections[1], starts[1], group_uuids)
    _read_instances(cluster, sections[2], starts[2], node_names)
    cluster.tags = list(sections[3])
    if len(sections) > 4:
        _read_policies(cluster, sections[4], starts[4])
    return cluster


def read_file(path: str) -> Cluster:
    """Read a text data file (see :func:`parse`)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise TextFormatError(f"cannot read {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise TextFormatError(f"{path} is not a text file ({err})") from None
    try:
        return parse(text)
    except TextFormatError as err:
        raise TextFormatError(f"{path}: {err}") from None


def _read_groups(cluster: Cluster, lines: list[str], start: int) -> dict[str, int]:
    uuids: dict[str, int] = {}
    for offset, text in enumerate(lines):
        line = _Line(start + offset, "node groups", text)
        if len(line.fields) < 4:
            raise line.fail(f"{len(line.fields)} field(s); a group has name|uuid|"
                            "alloc_policy|tags|networks")
        name, uuid, policy = line.fields[:3]
        if policy not in ALLOC_POLICIES:
            raise line.fail(f"field 3 (alloc_policy) is {policy!r}; expected one of "
                            + ", ".join(ALLOC_POLICIES))
        networks = _list(line.fields[4]) if len(line.fields) > 4 else []
        group = Group(name, uuid, alloc_policy_from_raw(policy), tuple(networks),
                      DEFAULT_IPOLICY, tuple(_list(line.fields[3])), len(cluster.groups))
        if uuid in uuids:
            raise line.fail(f"group UUID {uuid!r} appears twice")
        uuids[uuid] = group.idx
        cluster.groups.append(group)
    return uuids


def _read_nodes(cluster: Cluster, lines: list[str], start: int,
                group_uuids: dict[str, int]) -> dict[str, int]:
    names: dict[str, int] = {}
    for offset, text in enumerate(lines):
        line = _Line(start + offset, "nodes", text)
        fields = line.fields
        if len(fields) < 9:
            raise line.fail(f"{len(fields)} field(s); a node has at least "
                            + "|".join(_NODE_FIELDS[:9]))
        if len(fields) < 15:
            fields.extend(_NODE_DEFAULTS[len(fields) - 9:])
        name = fields[0]
        gdx = group_uuids.get(fields[8])
        if gdx is None:
            raise line.field_error(8, _NODE_FIELDS, "the UUID of a group of the first "
                                   "section")
        if "?" in fields[1:7]:
            node = Node(name, 0, 0, 0, 0, 0, 0, 0, True, 0, 0, gdx, False)
        else:
            t_mem = line.float_(1, _NODE_FIELDS)
            n_mem = line.int_(2, _NODE_FIELDS)
            f_mem = line.int_(3, _NODE_FIELDS)
            t_dsk = line.float_(4, _NODE_FIELDS)
            f_dsk = line.int_(5, _NODE_FIELDS)
            t_cpu = line.float_(6, _NODE_FIELDS)
            n_cpu = line.int_(13, _NODE_FIELDS)
            spindles = line.int_(9, _NODE_FIELDS)
            cpu_speed = line.float_(14, _NODE_FIELDS)
            free_sp = line.int_(12, _NODE_FIELDS)
            excl = line.yes_no(11, _NODE_FIELDS)
            node = Node(name, t_mem, n_mem, f_mem, t_dsk, f_dsk, t_cpu, n_cpu,
                        fields[7] == "Y", spindles, free_sp, gdx, excl)
            node.is_master = fields[7] == "M"
            node.tags = tuple(_list(fields[10]))
            node.cpu_speed = cpu_speed
        if name in names:
            raise line.fail(f"node {name!r} appears twice")
        node.idx = len(cluster.nodes)
        names[name] = node.idx
        cluster.nodes.append(node)
    return names


def _read_instances(cluster: Cluster, lines: list[str], start: int,
                    node_names: dict[str, int]) -> None:
    seen: set[str] = set()
    for offset, text in enumerate(lines):
        line = _Line(start + offset, "instances", text)
        fields = line.fields
        if len(fields) < 10:
            raise line.fail(f"{len(fields)} field(s); an instance has at least "
                            + "|".join(_INST_FIELDS[:10]))
        if len(fields) < 13:
            fields.extend(_INST_DEFAULTS[len(fields) - 10:])
        name = fields[0]
        pnode = node_names.get(fields[6])
        if pnode is None:
            raise line.field_error(6, _INST_FIELDS, "a node of the nodes section")
        if fields[7]:
            snode = node_names.get(fields[7])
            if snode is None:
                raise line.field_error(7, _INST_FIELDS,
                                       "a node of the nodes section or nothing")
        else:
            snode = NO_NODE
        mem = line.int_(1, _INST_FIELDS)
        dsk = line.int_(2, _INST_FIELDS)
        vcpus = line.int_(3, _INST_FIELDS)
        if fields[4] not in INSTANCE_STATUSES:
            raise line.field_error(4, _INST_FIELDS, "one of " + ", ".join(INSTANCE_STATUSES))
        auto_balance = line.yes_no(5, _INST_FIELDS)
        if fields[8] not in DISK_TEMPLATES:
            raise line.field_error(8, _INST_FIELDS, "one of " + ", ".join(DISK_TEMPLATES))
        spindle_use = line.int_(10, _INST_FIELDS)
        spindles = None if fields[11] == "-" else line.int_(11, _INST_FIELDS)
        forthcoming = line.yes_no(12, _INST_FIELDS)
        inst = Instance(name, mem, dsk, vcpus, fields[4], pnode, snode, fields[8],
                        spindle_use, tuple(_list(fields[9])), auto_balance, forthcoming,
                        ((dsk, spindles),))
        if inst.has_secondary and snode == pnode:
            raise line.fail(f"instance {name} has the same primary and secondary node "
                            f"{fields[6]}")
        if name in seen:
            raise line.fail(f"instance {name!r} appears twice")
        seen.add(name)
        inst.idx = len(cluster.instances)
        cluster.instances.append(inst)


def _spec(line: _Line, pos: int, text: str, what: str) -> ISpec:
    parts = text.split(",")
    if len(parts) < 6:
        raise line.fail(f"field {pos + 1} ({what}) is {text!r}; expected "
                        + ",".join(_SPEC_FIELDS))
    values = []
    for name, part in zip(_SPEC_FIELDS, parts, strict=False):
        try:
            values.append(int(part))
        except ValueError:
            raise line.fail(f"field {pos + 1} ({what}): {name} is {part!r}; expected "
                            "an integer") from None
    return ISpec(*values)


def _read_policies(cluster: Cluster, lines: list[str], start: int) -> None:
    names = ("owner", "std_spec", "minmax_specs", "disk_templates", "vcpu_ratio",
             "spindle_ratio")
    for offset, text in enumerate(lines):
        line = _Line(start + offset, "instance policies", text)
        fields = line.fields
        if len(fields) < 6:
            raise line.fail(f"{len(fields)} field(s); a policy has " + "|".join(names))
        std = _spec(line, 1, fields[1], "std_spec")
        specs = fields[2].split(";") if fields[2] else []
        if len(specs) % 2:
            raise line.fail("field 3 (minmax_specs) has an odd number of specs; "
                            "expected min;max pairs")
        minmax = tuple(MinMaxISpecs(_spec(line, 2, specs[i], "min spec"),
                                    _spec(line, 2, specs[i + 1], "max spec"))
                       for i in range(0, len(specs), 2))
        templates = _list(fields[3])
        for template in templates:
            if template not in DISK_TEMPLATES:
                raise line.field_error(3, names, "disk templates among "
                                       + ", ".join(DISK_TEMPLATES))
        policy = IPolicy(minmax, std, tuple(templates), line.float_(4, names),
                         line.float_(5, names))
        owner = fields[0]
        if not owner:
            cluster.ipolicy = policy
            continue
        group = cluster.group_by_name(owner)
        if group is None:
            raise line.field_error(0, names, "empty (the cluster) or a group's name")
        group.ipolicy = policy


# -- writing ------------------------------------------------------------------------

def haskell_double(value: float) -> str:
    """A float as Haskell's ``show`` prints it (``4.0``, ``5.0e-2``, ``1.0e7``)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    sign = "-" if value < 0 else ""
    digits_tuple = decimal.Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(str(d) for d in digits_tuple.digits)
    exponent = int(digits_tuple.exponent) + len(digits) - 1   # value = d.ddd * 10^exp
    if 0.1 <= abs(value) < 10 ** 7:
        if exponent >= 0:
            whole = digits[:exponent + 1].ljust(exponent + 1, "0")
            frac = digits[exponent + 1:] or "0"
        else:
            whole = "0"
            frac = "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{frac}"
    frac = digits[1:] or "0"
    return f"{sign}{digits[0]}.{frac}e{exponent}"


def _spec_text(spec: ISpec) -> str:
    return ",".join(str(v) for v in spec.as_tuple())


def _policy_line(owner: str, policy: IPolicy) -> str:
    minmax = ";".join(f"{_spec_text(pair.min)};{_spec_text(pair.max)}"
                      for pair in policy.minmax)
    return "|".join([owner, _spec_text(policy.std), minmax, ",".join(policy.disk_templates),
                     haskell_double(policy.vcpu_ratio), haskell_double(policy.spindle_ratio)])


def _node_line(cluster: Cluster, node: Node) -> str:
    flag = "Y" if node.offline else ("M" if node.is_master else "N")
    return "|".join([
        node.name, f"{node.t_mem:.0f}", str(node.n_mem), str(node.f_mem),
        f"{node.t_dsk:.0f}", str(node.f_dsk), f"{node.t_cpu:.0f}", flag,
        cluster.groups[node.group].uuid, str(node.t_sp), ",".join(node.tags),
        "Y" if node.excl else "N", str(node.f_sp), str(node.n_cpu), f"{node.cpu_speed:f}",
    ])


def _instance_line(cluster: Cluster, inst: Instance) -> str:
    snode = cluster.nodes[inst.snode].name if inst.snode != NO_NODE else ""
    spindles = inst.total_spindles
    return "|".join([
        inst.name, str(inst.mem), str(inst.dsk), str(inst.vcpus), inst.run_st,
        "Y" if inst.auto_balance else "N", cluster.nodes[inst.pnode].name, snode,
        inst.disk_template, ",".join(inst.tags), str(inst.spindle_use),
        "-" if spindles is None else str(spindles), "Y" if inst.forthcoming else "N",
    ])


def serialize(cluster: Cluster) -> str:
    """The cluster in the text data format."""
    def block(lines: list[str]) -> str:
        return "".join(line + "\n" for line in lines)

    groups = block(["|".join([g.name, g.uuid, g.alloc_policy.raw, ",".join(g.tags),
                              ",".join(g.networks)]) for g in cluster.groups])
    nodes = block([_node_line(cluster, node) for node in cluster.nodes])
    insts = block([_instance_line(cluster, inst) for inst in cluster.instances])
    policies = block([_policy_line("", cluster.ipolicy)]
                     + [_policy_line(g.name, g.ipolicy) for g in cluster.groups])
    return "\n".join([groups, nodes, insts, block(cluster.tags), policies])
