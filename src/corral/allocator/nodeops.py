"""Placing instances on nodes and taking them off, one node at a time.

These are htools' node operations, with its checks in its order (the first check
that fails names the :class:`~corral.allocator.types.FailMode` that is counted):

- :func:`add_pri` / :func:`add_sec` place an instance as primary / secondary and
  return the changed copy of the node, or the reason it does not fit. *Hard* limits
  (memory, disk, exclusive-storage spindles) always apply; *soft* ones (reserved
  disk, spindle ratio, N+1, CPU ratio, exclusion tags, forthcoming instances) not
  when ``force`` is given (ignoring soft errors, or leaving an offline node);
- :func:`remove_pri` / :func:`remove_sec` take it off again;
- :func:`set_pri`, :func:`set_sec` and :func:`build_peers` build a node's state while
  a cluster is loaded (the node's reported free memory already counts its running
  instances, so they change fewer fields).

The vectorised versions in :mod:`corral.allocator.kernels` compute the same results
for many candidate nodes at once; tests check that both agree.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

from corral.allocator.model import NO_NODE, Instance, Node
from corral.allocator.types import FailMode

__all__ = [
    "add_pri",
    "add_sec",
    "build_peers",
    "check_migration",
    "desired_location_score",
    "location_pairs",
    "pdsk",
    "remove_pri",
    "remove_sec",
    "set_pri",
    "set_sec",
]

MEM, DISK, CPU, TAGS, MIG, SPINDLES = (FailMode.MEM, FailMode.DISK, FailMode.CPU,
                                       FailMode.TAGS, FailMode.MIG, FailMode.SPINDLES)


def pdsk(node: Node, free_sp: int, free_dsk: int) -> float:
    """The free share of a node's disk (of its spindles with exclusive storage); a
    node without any counts as all free."""
    if node.excl:
        return 1.0 if node.t_sp == 0 else free_sp / node.t_sp
    return 1.0 if node.t_dsk == 0 else free_dsk / node.t_dsk


def _spindle_use(node: Node, inst: Instance, current: float, adding: bool) -> float:
    if node.excl:
        return 0.0
    if not inst.local_storage:
        return current
    return current + inst.spindle_use if adding else current - inst.spindle_use


def _free_spindles(node: Node, inst: Instance, current: int, adding: bool) -> int:
    if not node.excl:
        return 0
    total = inst.total_spindles
    if total is None:
        return -1 if adding else current
    return current - total if adding else current + total


def _add_util(a: tuple[float, float, float, float],
              b: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])


def _sub_util(a: tuple[float, float, float, float],
              b: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3])


def _add_dsk_util(a: tuple[float, float, float, float], inst: Instance,
                  sign: float) -> tuple[float, float, float, float]:
    return (a[0], a[1], a[2] + sign * inst.util[2], a[3])


#: A counted key: an exclusion tag or a location pair.
_K = TypeVar("_K", bound=Hashable)


def _count_in(counts: dict[_K, int], keys: Iterable[_K]) -> None:
    """Count one more of each key (exclusion tags, location pairs)."""
    for key in keys:
        counts[key] = counts.get(key, 0) + 1


def _count_out(counts: dict[_K, int], keys: Iterable[_K]) -> None:
    """Count one fewer of each key, dropping keys that reach zero; absent keys are left."""
    for key in keys:
        count = counts.get(key)
        if count is None:
            continue
        if count > 1:
            counts[key] = count - 1
        else:
            del counts[key]


def desired_location_score(node: Node, inst: Instance) -> int:
    """How many of the instance's desired locations the node is not in."""
    if not inst.dsrd_loc_tags:
        return 0
    return len(inst.dsrd_loc_tags) - len(inst.dsrd_loc_tags & node.loc_tags)


def location_pairs(node: Node, inst: Instance) -> list[tuple[str, str]]:
    """Every (location tag of the node, exclusion tag of the instance) pair."""
    if not node.loc_tags or not inst.excl_tags:
        return []
    return [(loc, excl) for loc in sorted(node.loc_tags) for excl in inst.excl_tags]


def check_migration(src: Node, dst: Node) -> FailMode | None:
    """Whether an instance may migrate from ``src`` to ``dst`` (migration tags)."""
    if src.mig_tags <= dst.rmig_tags:
        return None
    return MIG


# -- loading ------------------------------------------------------------------------

def set_pri(node: Node, inst: Instance) -> None:
    """Count an existing primary instance on a node being loaded."""
    _count_in(node.p_tags, inst.excl_tags)
    node.p_list_forth.append(inst.idx)
    if inst.not_offline:
        node.u_cpu_forth += inst.vcpus
    node.util_load_forth = _add_util(node.util_load_forth, inst.util)
    if not inst.uses_memory:
        node.f_mem_forth -= inst.mem
    node.inst_sp_forth = _spindle_use(node, inst, node.inst_sp_forth, True)
    if inst.forthcoming:
        if inst.local_storage:
            node.f_dsk_forth -= inst.dsk
        node.f_sp_forth = _free_spindles(node, inst, node.f_sp_forth, True)
        return
    node.p_list.append(inst.idx)
    if inst.not_offline:
        node.u_cpu += inst.vcpus
    node.util_load = _add_util(node.util_load, inst.util)
    node.inst_sp = _spindle_use(node, inst, node.inst_sp, True)
    node.loc_score += inst.location_score + desired_location_score(node, inst)
    _count_in(node.inst_map, location_pairs(node, inst))


def set_sec(node: Node, inst: Instance) -> None:
    """Count an existing secondary instance on a node being loaded."""
    node.s_list_forth.append(inst.idx)
    node.util_load_forth = _add_dsk_util(node.util_load_forth, inst, 1.0)
    node.inst_sp_forth = _spindle_use(node, inst, node.inst_sp_forth, True)
    if inst.forthcoming:
        if inst.local_storage:
            node.f_dsk_forth -= inst.dsk
        node.f_sp_forth = _free_spindles(node, inst, node.f_sp_forth, True)
        return
    node.s_list.append(inst.idx)
    node.util_load = _add_dsk_util(node.util_load, inst, 1.0)
    node.inst_sp = _spindle_use(node, inst, node.inst_sp, True)


def build_peers(node: Node, instances: list[Instance]) -> None:
    """Compute what the node's secondaries would need if their primaries failed."""
    peers: dict[int, int] = {}
    for idx in node.s_list:
        inst = instances[idx]
        mem = inst.mem if inst.uses_sec_mem and not inst.forthcoming else 0
        peers[inst.pnode] = peers.get(inst.pnode, 0) + mem
    node.peers = peers
    node.r_mem = max(peers.values(), default=0)
    node.fail_n1 = node.f_mem < node.r_mem


# -- moving instances ---------------------------------------------------------------

def _forth_violation_pri(node: Node, inst: Instance, new_mem_forth: int,
                         new_dsk_forth: int, new_free_sp_forth: int,
                         new_inst_sp_forth: float, new_pcpu_forth: float) -> FailMode | None:
    uses_disk = inst.local_storage
    if new_mem_forth <= 0:
        return MEM
    if uses_disk and new_dsk_forth <= 0:
        return DISK
    if uses_disk and new_dsk_forth < node.lo_dsk:
        return DISK
    if uses_disk and node.excl and new_free_sp_forth < 0:
        return SPINDLES
    if uses_disk and new_inst_sp_forth > node.hi_sp:
        return DISK
    if node.vcpu_ratio >= 0 and node.vcpu_ratio < new_pcpu_forth:
        return CPU
    return None


def add_pri(node: Node, inst: Instance, force: bool = False, *,
            inplace: bool = False) -> Node | FailMode:
    """Place ``inst`` on ``node`` as primary; ``force`` skips the soft checks.
    ``inplace`` changes ``node`` itself (a copy nobody else holds) instead of a copy;
    on a failure it is left unchanged."""
    strict = not force
    uses_disk = inst.local_storage
    if not inst.forthcoming:
        # the first (hard) checks below, early: most refused candidates stop here
        mem = inst.mem if inst.uses_memory else 0
        if int(node.t_mem) - node.n_mem - node.i_mem - mem - max(0, node.x_mem) <= 0:
            return MEM
        if uses_disk and node.f_dsk - inst.dsk <= 0:
            return DISK
    new_mem_forth = node.f_mem_forth - inst.mem
    new_dsk_forth = node.f_dsk_forth - inst.dsk if uses_disk else node.f_dsk_forth
    new_free_sp_forth = _free_spindles(node, inst, node.f_sp_forth, True)
    new_inst_sp_forth = _spindle_use(node, inst, node.inst_sp_forth, True)
    new_ucpu_forth = node.u_cpu_forth + inst.vcpus if inst.not_offline else node.u_cpu_forth
    new_pcpu_forth = new_ucpu_forth / node.t_cpu if node.t_cpu else _div0(new_ucpu_forth)

    if inst.forthcoming:
        if strict:
            fail = _forth_violation_pri(node, inst, new_mem_forth, new_dsk_forth,
                                        new_free_sp_forth, new_inst_sp_forth,
                                        new_pcpu_forth)
            if fail is not None:
                return fail
        new = node if inplace else node.copy()
    else:
        new_i_mem = node.i_mem + inst.mem if inst.uses_memory else node.i_mem
        new_free_mem = int(node.t_mem) - node.n_mem - new_i_mem - max(0, node.x_mem)
        new_failn1 = new_free_mem <= node.r_mem
        new_dsk = node.f_dsk - inst.dsk if uses_disk else node.f_dsk
        new_free_sp = _free_spindles(node, inst, node.f_sp, True)
        new_inst_sp = _spindle_use(node, inst, node.inst_sp, True)
        new_ucpu = node.u_cpu + inst.vcpus if inst.not_offline else node.u_cpu
        new_pcpu = new_ucpu / node.t_cpu if node.t_cpu else _div0(new_ucpu)
        l_cpu = node.vcpu_ratio
        if new_free_mem <= 0:
            return MEM
        if uses_disk and new_dsk <= 0:
            return DISK
        if strict and uses_disk and new_dsk < node.lo_dsk:
            return DISK
        if uses_disk and node.excl and new_free_sp < 0:
            return SPINDLES
        if strict and uses_disk and new_inst_sp > node.hi_sp:
            return DISK
        if strict and new_failn1 and not node.fail_n1:
            return MEM
        if strict and l_cpu >= 0 and l_cpu < new_pcpu:
            return CPU
        if strict and inst.excl_tags and any(tag in node.p_tags for tag in inst.excl_tags):
            return TAGS
        if strict:
            fail = _forth_violation_pri(node, inst, new_mem_forth, new_dsk_forth,
                                        new_free_sp_forth, new_inst_sp_forth,
                                        new_pcpu_forth)
            if fail is not None:
                return fail
        new = node if inplace else node.copy()
        new.p_list.append(inst.idx)
        new.i_mem = new_i_mem
        new.f_dsk = new_dsk
        new.fail_n1 = new_failn1
        new.u_cpu = new_ucpu
        new.util_load = _add_util(node.util_load, inst.util)
        new.inst_sp = new_inst_sp
        new.f_sp = new_free_sp
        new.loc_score = (node.loc_score + inst.location_score
                         + desired_location_score(node, inst))
        _count_in(new.inst_map, location_pairs(node, inst))
    _count_in(new.p_tags, inst.excl_tags)
    new.p_list_forth.append(inst.idx)
    new.f_mem_forth = new_mem_forth
    new.f_dsk_forth = new_dsk_forth
    new.u_cpu_forth = new_ucpu_forth
    new.util_load_forth = _add_util(node.util_load_forth, inst.util)
    new.inst_sp_forth = new_inst_sp_forth
    new.f_sp_forth = new_free_sp_forth
    return new


def remove_pri(node: Node, inst: Instance, *, inplace: bool = False) -> Node:
    """Take primary instance ``inst`` off ``node`` (itself if ``inplace``)."""
    uses_disk = inst.local_storage
    new = node if inplace else node.copy()
    if not inst.forthcoming:
        new.p_list.remove(inst.idx)
        if inst.uses_memory:
            new.i_mem = node.i_mem - inst.mem
        new_free_mem = int(node.t_mem) - node.n_mem - new.i_mem - max(0, node.x_mem)
        new.fail_n1 = new_free_mem <= node.r_mem
        if uses_disk:
            new.f_dsk = node.f_dsk + inst.dsk
        new.f_sp = _free_spindles(node, inst, node.f_sp, False)
        new.inst_sp = _spindle_use(node, inst, node.inst_sp, False)
        if inst.not_offline:
            new.u_cpu = node.u_cpu - inst.vcpus
        new.util_load = _sub_util(node.util_load, inst.util)
        new.loc_score = (node.loc_score - inst.location_score
                         - desired_location_score(node, inst))
        _count_out(new.inst_map, location_pairs(node, inst))
    _count_out(new.p_tags, inst.excl_tags)
    new.p_list_forth.remove(inst.idx)
    new.f_mem_forth = node.f_mem_forth + inst.mem
    if uses_disk:
        new.f_dsk_forth = node.f_dsk_forth + inst.dsk
    new.f_sp_forth = _free_spindles(node, inst, node.f_sp_forth, False)
    new.inst_sp_forth = _spindle_use(node, inst, node.inst_sp_forth, False)
    if inst.not_offline:
        new.u_cpu_forth = node.u_cpu_forth - inst.vcpus
    new.util_load_forth = _sub_util(node.util_load_forth, inst.util)
    return new


def remove_sec(node: Node, inst: Instance, *, inplace: bool = False) -> Node:
    """Take secondary instance ``inst`` (whose primary is ``inst.pnode``) off ``node``
    (itself if ``inplace``)."""
    uses_disk = inst.local_storage
    new = node if inplace else node.copy()
    if not inst.forthcoming:
        new.s_list.remove(inst.idx)
        if uses_disk:
            new.f_dsk = node.f_dsk + inst.dsk
        new.f_sp = _free_spindles(node, inst, node.f_sp, False)
        new.inst_sp = _spindle_use(node, inst, node.inst_sp, False)
        pnode = inst.pnode
        old_peem = node.peers.get(pnode, 0)
        new_peem = old_peem - inst.mem if inst.uses_sec_mem else old_peem
        if new_peem > 0:
            new.peers[pnode] = new_peem
        else:
            new.peers.pop(pnode, None)
        if old_peem < node.r_mem:
            new.r_mem = node.r_mem
        else:
            new.r_mem = max(new.peers.values(), default=0)
        new.fail_n1 = node.unallocated_mem <= new.r_mem
        new.util_load = _add_dsk_util(node.util_load, inst, -1.0)
    new.s_list_forth.remove(inst.idx)
    if uses_disk:
        new.f_dsk_forth = node.f_dsk_forth + inst.dsk
    new.f_sp_forth = _free_spindles(node, inst, node.f_sp_forth, False)
    new.inst_sp_forth = _spindle_use(node, inst, node.inst_sp_forth, False)
    new.util_load_forth = _add_dsk_util(node.util_load_forth, inst, -1.0)
    return new


def add_sec(node: Node, inst: Instance, pdx: int, force: bool = False,
            ignore_disks: bool = False, *, inplace: bool = False) -> Node | FailMode:
    """Place ``inst`` on ``node`` as secondary of primary node ``pdx``;
    ``ignore_disks`` skips the disk check (failing over away from an offline node);
    ``inplace`` as for :func:`add_pri`."""
    strict = not force
    needed = inst.mem if inst.uses_sec_mem else 0
    new_peem = node.peers.get(pdx, 0) + needed
    new_dsk_forth = node.f_dsk_forth - inst.dsk
    new_free_sp_forth = _free_spindles(node, inst, node.f_sp_forth, True)
    new_inst_sp_forth = _spindle_use(node, inst, node.inst_sp_forth, True)

    def forth_violation() -> FailMode | None:
        if not inst.has_secondary:
            return DISK
        if new_dsk_forth <= 0 or new_dsk_forth < node.lo_dsk:
            return DISK
        if node.excl and new_free_sp_forth < 0:
            return SPINDLES
        if new_inst_sp_forth > node.hi_sp:
            return DISK
        if needed >= node.f_mem_forth:
            return MEM
        return None

    if inst.forthcoming:
        if strict:
            fail = forth_violation()
            if fail is not None:
                return fail
        new = node if inplace else node.copy()
    else:
        old_mem = node.unallocated_mem
        new_dsk = node.f_dsk - inst.dsk
        new_free_sp = _free_spindles(node, inst, node.f_sp, True)
        new_inst_sp = _spindle_use(node, inst, node.inst_sp, True)
        new_rmem = max(node.r_mem, new_peem)
        new_failn1 = old_mem <= new_rmem
        if not inst.has_secondary:
            return DISK
        if not ignore_disks and new_dsk <= 0:
            return DISK
        if strict and new_dsk < node.lo_dsk:
            return DISK
        if node.excl and new_free_sp < 0:
            return SPINDLES
        if strict and new_inst_sp > node.hi_sp:
            return DISK
        if strict and needed >= old_mem:
            return MEM
        if strict and new_failn1 and not node.fail_n1:
            return MEM
        if strict:
            fail = forth_violation()
            if fail is not None:
                return fail
        new = node if inplace else node.copy()
        new.s_list.append(inst.idx)
        new.f_dsk = new_dsk
        new.peers[pdx] = new_peem
        new.fail_n1 = new_failn1
        new.r_mem = new_rmem
        new.util_load = _add_dsk_util(node.util_load, inst, 1.0)
        new.inst_sp = new_inst_sp
        new.f_sp = new_free_sp
    new.s_list_forth.append(inst.idx)
    new.f_dsk_forth = new_dsk_forth
    new.util_load_forth = _add_dsk_util(node.util_load_forth, inst, 1.0)
    new.inst_sp_forth = new_inst_sp_forth
    new.f_sp_forth = new_free_sp_forth
    return new


def _div0(value: float) -> float:
    """x/0 as IEEE (and htools) computes it."""
    if value > 0:
        return float("inf")
    if value < 0:
        return float("-inf")
    return float("nan")


def secondary_of(inst: Instance) -> int:
    """The instance's secondary node index, or :data:`NO_NODE`."""
    return inst.snode if inst.snode != NO_NODE else NO_NODE
