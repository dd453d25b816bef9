"""The allocator's vocabulary: disk templates, instance states, failure modes, groups'
allocation policies and the instance policy (``ipolicy``).

Values and orders are Ganeti's (its htools and iallocator protocol): the order of the
failure modes is the order of the counts hail and hspace print, the order of the disk
templates is the one a default policy lists, and the allocation policies sort from
``preferred`` to ``unallocable`` when groups are compared.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "ALLOC_POLICIES",
    "DEFAULT_IPOLICY",
    "DISK_TEMPLATES",
    "EVAC_MOVABLE_TEMPLATES",
    "INSTANCE_STATUSES",
    "LOCAL_STORAGE_TEMPLATES",
    "MOVABLE_TEMPLATES",
    "UNIT_CPU",
    "UNIT_DSK",
    "UNIT_MEM",
    "UNIT_SPINDLE",
    "AllocPolicy",
    "FailMode",
    "IPolicy",
    "ISpec",
    "MinMaxISpecs",
    "Mirror",
    "PolicyError",
    "alloc_policy_from_raw",
    "mirror_of",
    "required_nodes",
    "uses_memory_status",
]

#: Every disk template, in Ganeti's order (a default policy allows them in this order).
DISK_TEMPLATES: tuple[str, ...] = (
    "diskless", "file", "sharedfile", "plain", "blockdev", "drbd", "rbd", "ext", "gluster",
)

#: Templates whose disks htools counts against a node's free disk (only these: a
#: node reports free space of its volume group, not of its file storage).
LOCAL_STORAGE_TEMPLATES = frozenset({"drbd", "plain"})

#: Templates hbal may move (an instance of another template stays where it is).
MOVABLE_TEMPLATES = frozenset({"drbd", "blockdev", "sharedfile", "gluster", "rbd", "ext"})

#: Templates whose instances a node evacuation fails over to any node of the group
#: (the others are re-created elsewhere when N+1 redundancy is checked).
EVAC_MOVABLE_TEMPLATES = frozenset({"diskless", "sharedfile", "rbd", "ext", "gluster"})


class Mirror(enum.IntEnum):
    """How an instance's disks survive the loss of its primary node."""

    NONE = 0        #: nowhere (plain, file): the instance cannot move
    INTERNAL = 1    #: on its secondary node (drbd)
    EXTERNAL = 2    #: on shared storage: any node of the group can run it


_MIRRORS: dict[str, Mirror] = {
    "diskless": Mirror.EXTERNAL, "file": Mirror.NONE, "sharedfile": Mirror.EXTERNAL,
    "plain": Mirror.NONE, "blockdev": Mirror.EXTERNAL, "drbd": Mirror.INTERNAL,
    "rbd": Mirror.EXTERNAL, "ext": Mirror.EXTERNAL, "gluster": Mirror.EXTERNAL,
}


def mirror_of(template: str) -> Mirror:
    """The mirror type of a disk template."""
    return _MIRRORS[template]


def required_nodes(template: str) -> int:
    """How many nodes an instance of ``template`` needs (2 for drbd, else 1)."""
    return 2 if template == "drbd" else 1


#: Instance run states as the text format and RAPI write them.
INSTANCE_STATUSES: tuple[str, ...] = (
    "ADMIN_down", "ADMIN_offline", "ERROR_down", "ERROR_up", "ERROR_nodedown",
    "ERROR_nodeoffline", "running", "USER_down", "ERROR_wrongnode",
)

_USES_MEMORY = frozenset({"ERROR_up", "ERROR_nodedown", "ERROR_nodeoffline", "running",
                          "ERROR_wrongnode"})


def uses_memory_status(status: str) -> bool:
    """Whether an instance in run state ``status`` holds its memory on its node."""
    return status in _USES_MEMORY


class FailMode(enum.IntEnum):
    """Why an instance does not fit on a node, in the order htools counts them."""

    MEM = 0
    DISK = 1
    CPU = 2
    N1 = 3
    TAGS = 4
    MIG = 5
    DISK_COUNT = 6
    SPINDLES = 7
    INTERNAL = 8

    @property
    def label(self) -> str:
        """The name htools prints (``FailMem``, ``FailDiskCount``...)."""
        return _FAIL_LABELS[self]


_FAIL_LABELS = {
    FailMode.MEM: "FailMem", FailMode.DISK: "FailDisk", FailMode.CPU: "FailCPU",
    FailMode.N1: "FailN1", FailMode.TAGS: "FailTags", FailMode.MIG: "FailMig",
    FailMode.DISK_COUNT: "FailDiskCount", FailMode.SPINDLES: "FailSpindles",
    FailMode.INTERNAL: "FailInternal",
}


class AllocPolicy(enum.IntEnum):
    """A node group's allocation policy; lower sorts first when groups compete."""

    PREFERRED = 0
    LAST_RESORT = 1
    UNALLOCABLE = 2

    @property
    def raw(self) -> str:
        """The policy as Ganeti writes it."""
        return ALLOC_POLICIES[self]


ALLOC_POLICIES: tuple[str, ...] = ("preferred", "last_resort", "unallocable")


def alloc_policy_from_raw(value: str) -> AllocPolicy:
    """``preferred``/``last_resort``/``unallocable`` → :class:`AllocPolicy`."""
    try:
        return AllocPolicy(ALLOC_POLICIES.index(value))
    except ValueError:
        raise PolicyError(f"invalid allocation policy {value!r}; expected one of "
                          + ", ".join(ALLOC_POLICIES)) from None


#: The sizes by which tiered allocation shrinks an instance (memory and disk in MiB).
UNIT_MEM = 64
UNIT_DSK = 256
UNIT_CPU = 1
UNIT_SPINDLE = 1


class PolicyError(ValueError):
    """An instance policy or one of its specs that cannot be read."""


_SPEC_KEYS = ("memory-size", "cpu-count", "disk-size", "disk-count", "nic-count",
              "spindle-use")


@dataclass(frozen=True, slots=True)
class ISpec:
    """One instance spec of a policy (sizes in MiB)."""

    memory_size: int
    cpu_count: int
    disk_size: int
    disk_count: int
    nic_count: int
    spindle_use: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any], what: str = "spec") -> ISpec:
        """Read a spec in the iallocator/RAPI shape (``memory-size`` ...)."""
        if not isinstance(data, Mapping):
            raise PolicyError(f"{what}: expected an object with {', '.join(_SPEC_KEYS)}")
        values = []
        for key in _SPEC_KEYS:
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise PolicyError(f"{what}: {key} must be a number, got {value!r}")
            values.append(int(value))
        return cls(*values)

    def to_json(self) -> dict[str, int]:
        """The spec in the iallocator/RAPI shape."""
        return dict(zip(_SPEC_KEYS, self.as_tuple(), strict=True))

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        """(memory, cpus, disk size, disk count, nic count, spindle use)."""
        return (self.memory_size, self.cpu_count, self.disk_size, self.disk_count,
                self.nic_count, self.spindle_use)


@dataclass(frozen=True, slots=True)
class MinMaxISpecs:
    """A pair of minimum and maximum specs; an instance fits if it is within both."""

    min: ISpec
    max: ISpec


@dataclass(frozen=True, slots=True)
class IPolicy:
    """An instance policy as htools uses it: the allowed ranges of instance sizes, the
    standard size, the allowed disk templates and the CPU and spindle over-commit
    ratios."""

    minmax: tuple[MinMaxISpecs, ...]
    std: ISpec
    disk_templates: tuple[str, ...]
    vcpu_ratio: float
    spindle_ratio: float
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Any, what: str = "ipolicy") -> IPolicy:
        """Read a policy in the iallocator/RAPI shape; keys htools does not use are
        kept in :attr:`extra`."""
        if not isinstance(data, Mapping):
            raise PolicyError(f"{what}: expected an object, got {type(data).__name__}")
        try:
            raw_minmax = data["minmax"]
            std = ISpec.from_json(data["std"], f"{what}/std")
            templates = data["disk-templates"]
            vcpu = data["vcpu-ratio"]
            spindle = data["spindle-ratio"]
        except KeyError as err:
            raise PolicyError(f"{what}: missing key {err.args[0]!r}") from None
        if not isinstance(raw_minmax, Sequence) or isinstance(raw_minmax, str):
            raise PolicyError(f"{what}/minmax: expected a list of min/max pairs")
        minmax = []
        for pos, pair in enumerate(raw_minmax):
            if not isinstance(pair, Mapping) or "min" not in pair or "max" not in pair:
                raise PolicyError(f"{what}/minmax[{pos}]: expected an object with min and max")
            minmax.append(MinMaxISpecs(ISpec.from_json(pair["min"], f"{what}/minmax/min"),
                                       ISpec.from_json(pair["max"], f"{what}/minmax/max")))
        if not isinstance(templates, Sequence) or isinstance(templates, str):
            raise PolicyError(f"{what}/disk-templates: expected a list of disk templates")
        for template in templates:
            if template not in DISK_TEMPLATES:
                raise PolicyError(f"{what}/disk-templates: unknown disk template "
                                  f"{template!r}; known: {', '.join(DISK_TEMPLATES)}")
        for key, value in (("vcpu-ratio", vcpu), ("spindle-ratio", spindle)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise PolicyError(f"{what}/{key}: expected a number, got {value!r}")
        known = {"minmax", "std", "disk-templates", "vcpu-ratio", "spindle-ratio"}
        extra = {key: value for key, value in data.items() if key not in known}
        return cls(tuple(minmax), std, tuple(templates), float(vcpu), float(spindle), extra)

    def to_json(self) -> dict[str, Any]:
        """The policy in the iallocator/RAPI shape."""
        return {
            "minmax": [{"min": pair.min.to_json(), "max": pair.max.to_json()}
                       for pair in self.minmax],
            "std": self.std.to_json(),
            "disk-templates": list(self.disk_templates),
            "vcpu-ratio": self.vcpu_ratio,
            "spindle-ratio": self.spindle_ratio,
            **self.extra,
        }

    def with_vcpu_ratio(self, ratio: float) -> IPolicy:
        """This policy with another CPU over-commit ratio (``--max-cpu``)."""
        return replace(self, vcpu_ratio=ratio)


#: The policy of a cluster or group that gives none (Ganeti's built-in defaults as
#: htools assumes them).
DEFAULT_IPOLICY = IPolicy(
    minmax=(MinMaxISpecs(ISpec(128, 1, 1024, 1, 1, 1), ISpec(32768, 8, 1024 * 1024, 16, 8, 12)),),
    std=ISpec(128, 1, 1024, 1, 1, 1),
    disk_templates=DISK_TEMPLATES,
    vcpu_ratio=4.0,
    spindle_ratio=32.0,
)
