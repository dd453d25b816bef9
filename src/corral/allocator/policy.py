"""Whether an instance is within an instance policy (htools' check, in its order)."""

from __future__ import annotations

from corral.allocator.model import Instance
from corral.allocator.types import FailMode, IPolicy, ISpec

__all__ = ["matches_policy", "matches_specs"]


def _compare(inst: Instance, spec: ISpec, excl: bool, above: bool) -> FailMode | None:
    """Whether ``inst`` is on the wrong side of ``spec``: below it when ``above``
    (``spec`` is a minimum), else above it."""
    def wrong(value: int, limit: int) -> bool:
        return value < limit if above else value > limit

    if wrong(inst.mem, spec.memory_size):
        return FailMode.MEM
    if any(wrong(size, spec.disk_size) for size, _ in inst.disks):
        return FailMode.DISK
    if wrong(inst.vcpus, spec.cpu_count):
        return FailMode.CPU
    if excl:
        spindles = inst.total_spindles
        if spindles is None or wrong(spindles, spec.spindle_use):
            return FailMode.SPINDLES
    elif wrong(inst.spindle_use, spec.spindle_use):
        return FailMode.SPINDLES
    if inst.disk_template != "diskless" and wrong(len(inst.disks), spec.disk_count):
        return FailMode.DISK_COUNT
    return None


def matches_specs(inst: Instance, policy: IPolicy, excl: bool = False) -> FailMode | None:
    """Whether ``inst`` is within one of the policy's min/max pairs; the failure of the
    first pair if within none (htools reports that one)."""
    if not policy.minmax:
        return None
    first: FailMode | None = None
    for pos, pair in enumerate(policy.minmax):
        fail = _compare(inst, pair.min, excl, above=True)
        if fail is None:
            fail = _compare(inst, pair.max, excl, above=False)
        if fail is None:
            return None
        if pos == 0:
            first = fail
    return first


def matches_policy(inst: Instance, policy: IPolicy, excl: bool = False) -> FailMode | None:
    """Whether ``inst`` may be placed under ``policy``: within its specs and of an
    allowed disk template. None if so, else the reason."""
    fail = matches_specs(inst, policy, excl)
    if fail is not None:
        return fail
    if inst.disk_template not in policy.disk_templates:
        return FailMode.DISK
    return None
