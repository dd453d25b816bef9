"""A plain, obviously-correct reference for allocation candidates: loops over every
provider and every combination, reading the store only through its public methods.

It states the semantics of corral.placement.candidates (see that module's docstring) the
long way round, so that a Hypothesis test can hold the fast engine to them.
"""

from __future__ import annotations

import itertools
from typing import Any

from corral.placement import PlacementStore
from corral.placement.query import AllocationCandidatesRequest, RequestGroup

SHARING = "MISC_SHARES_VIA_AGGREGATE"


class _World:
    def __init__(self, store: PlacementStore) -> None:
        self.order = [p.uuid for p in store.providers()]  # creation order
        self.root = {p.uuid: p.root_uuid for p in store.providers()}
        self.parent = {p.uuid: p.parent_uuid for p in store.providers()}
        self.inv = {u: store.inventories(u) for u in self.order}
        self.used = {u: store.usages(u) for u in self.order}
        self.traits = {u: store.provider_traits(u) for u in self.order}
        self.aggs = {u: store.provider_aggregates(u) for u in self.order}

    def fits(self, p: str, rc: str, amount: int) -> bool:
        inv = self.inv[p].get(rc)
        if inv is None:
            return False
        assert inv.max_unit is not None
        return (inv.capacity - self.used[p].get(rc, 0) >= amount
                and inv.min_unit <= amount <= inv.max_unit and amount % inv.step_size == 0)

    def own_in_all(self, p: str, sets: tuple[frozenset[str], ...]) -> bool:
        return all(self.aggs[p] & s for s in sets)

    def anchors(self, s: str) -> set[str]:
        return {self.root[q] for q in self.order if self.aggs[q] & self.aggs[s]} | {self.root[s]}

    def tree_root(self, rp: str | None) -> str | None:
        return self.root.get(rp) if rp is not None else None

    def ancestors(self, p: str) -> set[str]:
        out: set[str] = set()
        current: str | None = p
        while current is not None:
            out.add(current)
            current = self.parent[current]
        return out

    def subtree(self, root: str) -> list[str]:
        return [p for p in self.order if self.root[p] == root]


Choice = tuple[tuple[str, str, int], ...]


def _unsuffixed_options(w: _World, g: RequestGroup, r: str) -> list[Choice]:
    per_rc = []
    for rc, amount in g.resources.items():
        options = []
        for p in w.order:
            if not w.fits(p, rc, amount) or w.traits[p] & g.forbidden_traits:
                continue
            if w.root[p] == r:
                if g.member_of and not (w.own_in_all(p, g.member_of)
                                        or w.own_in_all(w.root[p], g.member_of)):
                    continue
                if w.aggs[p] & g.forbidden_aggs or w.aggs[w.root[p]] & g.forbidden_aggs:
                    continue
                if g.in_tree is not None and r != w.tree_root(g.in_tree):
                    continue
            elif SHARING in w.traits[p] and r in w.anchors(p):
                if g.in_tree is not None:
                    continue
                if g.member_of and not w.own_in_all(p, g.member_of):
                    continue
                if w.aggs[p] & g.forbidden_aggs or w.aggs[r] & g.forbidden_aggs:
                    continue
            else:
                continue
            options.append((p, rc, amount))
        per_rc.append(options)
    out = []
    for combo in itertools.product(*per_rc):
        used = {part[0] for part in combo}
        if all(any(w.traits[p] & any_of for p in used) for any_of in g.required_traits):
            out.append(combo)
    return out


def _suffixed_options(w: _World, g: RequestGroup, r: str) -> list[Choice]:
    out = []
    for p in w.order:
        if not all(w.traits[p] & any_of for any_of in g.required_traits):
            continue
        if w.traits[p] & g.forbidden_traits or w.aggs[p] & g.forbidden_aggs:
            continue
        if not w.own_in_all(p, g.member_of):
            continue
        if g.in_tree is not None and w.root[p] != w.tree_root(g.in_tree):
            continue
        if not all(w.fits(p, rc, n) for rc, n in g.resources.items()):
            continue
        if not g.resources and not g.member_of and not g.required_traits:
            continue
        anchors = w.anchors(p) if SHARING in w.traits[p] else {w.root[p]}
        if r in anchors:
            out.append(tuple((p, rc, n) for rc, n in g.resources.items()) or ((p, "", 0),))
    return out


def reference_candidates(store: PlacementStore, request: AllocationCandidatesRequest,
                         ) -> tuple[list[dict[str, Any]], list[str]]:
    """The candidates (allocations and mappings, in order) and the summarised providers."""
    w = _World(store)
    groups = list(request.groups.values())
    found: list[dict[str, Any]] = []
    keys: set[Any] = set()
    trees: set[str] = set()
    roots = [p for p in w.order if w.root[p] == p]
    blind = request.version < (1, 29) and any(w.parent[p] for p in w.order)
    blind_used: set[str] = set()
    for r in roots:
        if not request.root_required <= w.traits[r] or request.root_forbidden & w.traits[r]:
            continue
        options = [(_suffixed_options if g.suffix else _unsuffixed_options)(w, g, r)
                   for g in groups]
        for combo in itertools.product(*options):
            if request.group_policy == "isolate":
                used = [choice[0][0] for g, choice in zip(groups, combo, strict=True) if g.suffix]
                if len(set(used)) != len(used):
                    continue
            ok = True
            for names in request.same_subtrees:
                used_set = {part[0] for g, choice in zip(groups, combo, strict=True)
                            if g.suffix in names for part in choice}
                if not any(all(q in w.ancestors(u) for u in used_set) for q in used_set):
                    ok = False
            amounts: dict[tuple[str, str], int] = {}
            for choice in combo:
                for p, rc, n in choice:
                    if rc:
                        amounts[p, rc] = amounts.get((p, rc), 0) + n
            for (p, rc), n in amounts.items():
                inv = w.inv[p][rc]
                assert inv.max_unit is not None
                if w.used[p].get(rc, 0) + n > inv.capacity or n > inv.max_unit:
                    ok = False
            if not ok:
                continue
            if blind and len({w.root[p] for p, _ in amounts}) != len({p for p, _ in amounts}):
                continue
            key = (tuple(sorted(amounts.items())),
                   tuple(tuple(sorted({part[0] for part in c})) for c in combo))
            if key in keys:
                continue
            keys.add(key)
            allocations: dict[str, dict[str, int]] = {}
            for (p, rc), n in sorted(amounts.items()):
                allocations.setdefault(p, {})[rc] = n
            mappings = {g.suffix: sorted({part[0] for part in c})
                        for g, c in zip(groups, combo, strict=True)}
            found.append({"allocations": allocations, "mappings": mappings})
            trees.update(w.root[p] for p in allocations)
            blind_used.update(allocations)
            if request.limit is not None and len(found) >= request.limit:
                break
        else:
            continue
        break
    if blind:
        return found, sorted(blind_used)
    return found, sorted(p for t in trees for p in w.subtree(t))
