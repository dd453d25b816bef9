"""Instance moves, as hbal and node evacuation use them.

A move is a pair ``(kind, target node)``; the kinds are htools' (what hbal prints
after ``a=``):

- ``f``    failover/migrate a drbd instance to its secondary;
- ``fa``   failover/migrate an instance on shared storage to the target node;
- ``rp``   replace the primary: failover, replace the secondary with the target,
           failover again (``f r:T f``);
- ``rs``   replace the secondary with the target (``r:T``);
- ``raf``  replace the secondary with the target, then failover (``r:T f``);
- ``far``  failover, then replace the secondary with the target (``f r:T``).

:func:`apply_move` computes the nodes and instance after a move, with htools' checks
(soft limits are ignored with ``force`` and when leaving an offline node).
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.allocator.model import Instance, Node
from corral.allocator.nodeops import add_pri, add_sec, check_migration, remove_pri, remove_sec
from corral.allocator.types import FailMode

__all__ = ["FAILOVER", "Move", "apply_move", "location_score"]

#: A move: its kind and its target node (-1 for a failover).
Move = tuple[str, int]

FAILOVER: Move = ("f", -1)


def location_score(pnode: Node, snode: Node | None) -> int:
    """How many failure domains (location tags) an instance's two nodes share."""
    if snode is None:
        return 0
    return len(pnode.loc_tags & snode.loc_tags)


def _with(inst: Instance, pnode: int, snode: int, loc: int | None = None) -> Instance:
    new = inst.copy()
    new.pnode = pnode
    new.snode = snode
    if loc is not None:
        new.location_score = loc
    return new


def apply_move(nodes: Sequence[Node], inst: Instance, move: Move,
               force: bool = False) -> tuple[list[Node], Instance] | FailMode:
    """The changed nodes and the moved instance, or why the move does not fit."""
    kind, tdx = move
    pdx, sdx = inst.pnode, inst.snode
    old_p = nodes[pdx]
    if kind == "f":
        old_s = nodes[sdx]
        int_p = remove_pri(old_p, inst)
        int_s = remove_sec(old_s, inst)
        fail = check_migration(old_p, old_s)
        if fail is not None:
            return fail
        new_p = add_pri(int_s, inst, old_p.offline or force)
        if isinstance(new_p, FailMode):
            return new_p
        new_s = add_sec(int_p, inst, sdx, old_p.offline or force, ignore_disks=old_p.offline)
        if isinstance(new_s, FailMode):
            return new_s
        return [new_s, new_p], _with(inst, sdx, pdx)
    target = nodes[tdx]
    if kind == "fa":
        fail = check_migration(old_p, target)
        if fail is not None:
            return fail
        new_t = add_pri(target, inst, old_p.offline or force)
        if isinstance(new_t, FailMode):
            return new_t
        return [remove_pri(old_p, inst), new_t], _with(inst, tdx, sdx)
    old_s = nodes[sdx]
    if kind == "rp":
        int_p = remove_pri(old_p, inst)
        int_s = remove_sec(old_s, inst)
        new_inst = _with(inst, tdx, sdx, location_score(target, int_s))
        force_p = old_p.offline or force
        for src, dst in ((old_p, old_s), (old_s, target)):
            fail = check_migration(src, dst)
            if fail is not None:
                return fail
        tmp_s = add_pri(int_s, new_inst, force_p)
        if isinstance(tmp_s, FailMode):
            return tmp_s
        tmp_s2 = remove_pri(tmp_s, new_inst)
        new_p = add_pri(target, new_inst, force_p)
        if isinstance(new_p, FailMode):
            return new_p
        new_s = add_sec(tmp_s2, new_inst, tdx, force_p)
        if isinstance(new_s, FailMode):
            return new_s
        return [int_p, new_s, new_p], new_inst
    if kind == "rs":
        pnode2 = remove_pri(old_p, inst)
        int_s = remove_sec(old_s, inst)
        new_inst = _with(inst, pdx, tdx, location_score(old_p, target))
        new_s = add_sec(target, new_inst, pdx, old_s.offline or force)
        if isinstance(new_s, FailMode):
            return new_s
        pnode3 = add_pri(pnode2, new_inst, True)
        if isinstance(pnode3, FailMode):
            return pnode3
        return [pnode3, new_s, int_s], new_inst
    if kind == "raf":
        int_p = remove_pri(old_p, inst)
        int_s = remove_sec(old_s, inst)
        new_inst = _with(inst, tdx, pdx, location_score(target, int_p))
        fail = check_migration(old_p, target)
        if fail is not None:
            return fail
        new_p = add_pri(target, new_inst, force)
        if isinstance(new_p, FailMode):
            return new_p
        new_s = add_sec(int_p, new_inst, tdx, old_s.offline or force)
        if isinstance(new_s, FailMode):
            return new_s
        return [new_p, new_s, int_s], new_inst
    if kind == "far":
        int_p = remove_pri(old_p, inst)
        int_s = remove_sec(old_s, inst)
        force_p = old_p.offline or force
        new_inst = _with(inst, sdx, tdx, location_score(int_s, target))
        fail = check_migration(old_p, old_s)
        if fail is not None:
            return fail
        new_p = add_pri(int_s, new_inst, force_p)
        if isinstance(new_p, FailMode):
            return new_p
        new_s = add_sec(target, new_inst, sdx, force_p)
        if isinstance(new_s, FailMode):
            return new_s
        return [new_s, new_p, int_p], new_inst
    raise ValueError(f"unknown move kind {kind!r}")
