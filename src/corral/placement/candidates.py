"""Allocation candidates: which providers can satisfy a request, and how.

:func:`allocation_candidates` answers a parsed :class:`AllocationCandidatesRequest`
against a :class:`PlacementStore` with OpenStack Placement's semantics:

* The unsuffixed group may be spread over one provider tree: each resource class comes
  from any provider of the tree, or from a *sharing provider* (trait
  ``MISC_SHARES_VIA_AGGREGATE``) associated with an aggregate that some provider of the
  tree is in. Its ``member_of`` keeps a provider when it **or its root** is in the
  aggregates (a root's aggregates span its tree); a sharing provider must itself be in
  them. Its forbidden aggregates drop a provider when it or its root is in one, and drop a
  sharing provider for an anchor tree when either is in one. Its required traits may be
  met by any of the providers used for it together; a forbidden trait on any of them
  rules that choice out.
* A suffixed group (``resources1``, ``resources_NET``) is supplied by one provider, judged
  by its **own** traits and aggregates only. A suffixed group without resources (1.36,
  listed in ``same_subtree``) picks one provider by its traits and aggregates; as in
  Placement 16, one constrained only by forbidden aggregates or traits picks none.
* The groups of one candidate all hang on one *anchor* tree (sharing providers serve the
  trees they share an aggregate with). ``group_policy=isolate`` makes suffixed groups use
  different providers; amounts that land on the same provider must fit together;
  ``same_subtree`` needs the providers of the named groups to lie under one of them;
  ``root_required`` judges the anchor root's traits; ``in_tree`` keeps the group in one
  tree.

Order (deterministic, as Placement's with randomisation off): anchor roots in creation
order; within a root, the groups in request order, each group's choices in provider
creation order (the first group varies slowest). A candidate met twice (a request served by
sharing providers only, through several anchors) is listed once. ``limit`` takes the first
ones and stops the search there.

Speed: every filter that concerns single providers (capacity per resource class,
aggregates, traits, tree) is a vectorised operation over all slots (see
:mod:`corral.placement.model`); Python loops run only over the providers that passed, and
over the candidates produced.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from corral.errors import PlacementError
from corral.placement.model import PlacementStore, ProviderSummary, bits_to_mask
from corral.placement.names import SHARING_TRAIT
from corral.placement.query import AllocationCandidatesRequest, RequestGroup
from corral.utils.gcpause import collector_paused

__all__ = ["AllocationCandidates", "AllocationRequest", "ProviderSummary",
           "allocation_candidates"]

Mask = npt.NDArray[np.bool_]
#: One way to satisfy one group: (slot, resource class, amount) parts; a resourceless
#: group's single part has resource class "" and amount 0.
_Choice = tuple[tuple[int, str, int], ...]


@dataclass(frozen=True)
class AllocationRequest:
    """One candidate: what to allocate where, and which providers serve which group."""

    #: provider uuid -> resource class -> amount
    allocations: dict[str, dict[str, int]]
    #: group suffix ("" for the unsuffixed group) -> provider uuids (1.34 ``mappings``)
    mappings: dict[str, list[str]]


@dataclass(frozen=True)
class AllocationCandidates:
    """The answer: allocation requests and a summary of every provider of the trees
    they allocate from."""

    allocation_requests: list[AllocationRequest]
    provider_summaries: dict[str, ProviderSummary]


class ProviderMasks:
    """Boolean arrays over provider slots for one query (alive, root of each slot,
    sharing providers, aggregate and trait memberships, capacity for an amount), built
    from the store's indexes; shared by the groups of a request and by provider
    listings."""

    def __init__(self, store: PlacementStore) -> None:
        self.store = store
        self.n = n = store.size
        self.alive = bits_to_mask(store.alive_bits, n)
        roots = store.root_of[:n]
        self.root = np.where(roots >= 0, roots, 0)
        self.sharing = bits_to_mask(store.trait_bits(SHARING_TRAIT), n) & self.alive
        self._anchors: dict[int, list[int]] = {}

    def has_trees(self) -> bool:
        """Whether any provider has a parent (Placement's ``has_trees``)."""
        slots = np.arange(self.n)
        return bool((self.alive & (self.root != slots)).any())

    def mask(self, bits: int) -> Mask:
        return bits_to_mask(bits, self.n)

    def in_all(self, any_of_sets: Sequence[frozenset[str]], bits_of: str) -> Mask | None:
        """Providers that are (``bits_of`` "agg") in / have (``"trait"``) at least one
        of every set; None when there are no sets."""
        if not any_of_sets:
            return None
        lookup = self.store.aggregate_bits if bits_of == "agg" else self.store.trait_bits
        bits = self.store.alive_bits
        for any_of in any_of_sets:
            union = 0
            for name in any_of:
                union |= lookup(name)
            bits &= union
        return self.mask(bits)

    def in_any(self, names: frozenset[str], bits_of: str) -> Mask | None:
        """Providers in / with any of ``names``; None when there are none."""
        if not names:
            return None
        lookup = self.store.aggregate_bits if bits_of == "agg" else self.store.trait_bits
        union = 0
        for name in names:
            union |= lookup(name)
        return self.mask(union)

    def fits(self, rc: str, amount: int) -> Mask:
        column = self.store.column(rc)
        if column is None:
            return np.zeros(self.n, dtype=bool)
        return column.fits(amount)[: self.n] & self.alive

    def anchors(self, slot: int) -> list[int]:
        """The roots a sharing provider serves: its own, and those of every provider
        sharing an aggregate with it, in slot order."""
        found = self._anchors.get(slot)
        if found is None:
            bits = 0
            for agg in self.store.at(slot).aggregates:
                bits |= self.store.aggregate_bits(agg)
            roots = set(self.root[self.mask(bits)].tolist()) if bits else set()
            roots.add(int(self.root[slot]))
            found = self._anchors[slot] = sorted(roots)
        return found

    def tree_of(self, rp_uuid: str | None) -> int | None:
        """The root slot of ``rp_uuid``'s tree; -1 when there is no such provider."""
        if rp_uuid is None:
            return None
        slot = self.store.slot_of(rp_uuid)
        return -1 if slot is None else int(self.root[slot])


class _ByRoot:
    """Provider slots grouped by root: ascending slots, with each root's range."""

    def __init__(self, q: ProviderMasks, mask: Mask) -> None:
        slots = np.nonzero(mask)[0]
        roots = q.root[slots]
        order = np.argsort(roots, kind="stable")  # by root, then slot
        self.slots: list[int] = slots[order].tolist()
        uniq, starts = np.unique(roots[order], return_index=True)
        ends = [*starts[1:].tolist(), len(self.slots)] if len(starts) else []
        self.ranges: dict[int, tuple[int, int]] = dict(
            zip(uniq.tolist(), zip(starts.tolist(), ends, strict=True), strict=True))

    def get(self, root: int) -> list[int]:
        start, end = self.ranges.get(root, (0, 0))
        return self.slots[start:end]


class _GroupChoices:
    """The ways one group can be satisfied, per anchor root, worked out on demand."""

    def __init__(self, roots: set[int]) -> None:
        self.roots = roots
        self._cache: dict[int, list[_Choice]] = {}

    def choices(self, root: int) -> list[_Choice]:
        found = self._cache.get(root)
        if found is None:
            found = self._cache[root] = self._compute(root)
        return found

    def _compute(self, root: int) -> list[_Choice]:
        raise NotImplementedError


class _Unsuffixed(_GroupChoices):
    """The unsuffixed group: each resource class from the anchor's tree or a sharing
    provider serving it."""

    def __init__(self, q: ProviderMasks, group: RequestGroup) -> None:
        local = q.alive.copy()
        shared = q.sharing.copy()
        forbidden_traits = q.in_any(group.forbidden_traits, "trait")
        if forbidden_traits is not None:
            local &= ~forbidden_traits
            shared &= ~forbidden_traits
        in_aggs = q.in_all(group.member_of, "agg")
        if in_aggs is not None:
            local &= in_aggs | in_aggs[q.root]
            shared &= in_aggs
        in_forbidden = q.in_any(group.forbidden_aggs, "agg")
        if in_forbidden is not None:
            local &= ~(in_forbidden | in_forbidden[q.root])
            shared &= ~in_forbidden
        tree = q.tree_of(group.in_tree)
        if tree is not None:
            local &= q.root == tree
            shared[:] = False  # a sharing provider of another tree is outside in_tree
        self.rcs = list(group.resources.items())
        self.local: list[_ByRoot] = []
        self.shared: list[dict[int, list[int]]] = []
        roots: set[int] | None = None
        for rc, amount in self.rcs:
            fits = q.fits(rc, amount)
            by_root = _ByRoot(q, fits & local)
            foreign: dict[int, list[int]] = {}
            for slot in np.nonzero(fits & shared)[0].tolist():
                anchored = np.asarray(q.anchors(slot), dtype=np.int64)
                keep = anchored != q.root[slot]
                if in_forbidden is not None:
                    keep &= ~in_forbidden[anchored]
                for root in anchored[keep].tolist():
                    foreign.setdefault(root, []).append(slot)
            self.local.append(by_root)
            self.shared.append(foreign)
            served = set(by_root.ranges) | set(foreign)
            roots = served if roots is None else roots & served
        self.needed = [_bits_of_any(q.store, any_of) for any_of in group.required_traits]
        super().__init__(roots or set())

    def _compute(self, root: int) -> list[_Choice]:
        lists = []
        for by_root, foreign, (rc, amount) in zip(self.local, self.shared, self.rcs,
                                                  strict=True):
            slots = by_root.get(root)
            extra = foreign.get(root)
            if extra:
                slots = sorted({*slots, *extra})
            lists.append([(s, rc, amount) for s in slots])
        choices: list[_Choice] = list(itertools.product(*lists))
        if self.needed:
            choices = [c for c in choices
                       if all(any(bits >> p[0] & 1 for p in c) for bits in self.needed)]
        return choices


class _Suffixed(_GroupChoices):
    """A suffixed group: one provider, judged by its own traits and aggregates."""

    def __init__(self, q: ProviderMasks, group: RequestGroup) -> None:
        ok = q.alive.copy()
        for extra in (q.in_all(group.required_traits, "trait"),
                      q.in_all(group.member_of, "agg")):
            if extra is not None:
                ok &= extra
        for excluded in (q.in_any(group.forbidden_traits, "trait"),
                         q.in_any(group.forbidden_aggs, "agg")):
            if excluded is not None:
                ok &= ~excluded
        tree = q.tree_of(group.in_tree)
        if tree is not None:
            ok &= q.root == tree
        for rc, amount in group.resources.items():
            ok &= q.fits(rc, amount)
        if not group.resources and not group.member_of and not group.required_traits:
            ok[:] = False  # Placement 16 finds nothing for such a group (spec §5d)
        self.parts = list(group.resources.items()) or [("", 0)]
        self.local = _ByRoot(q, ok)
        self.foreign: dict[int, list[int]] = {}
        # a sharing provider also serves the trees it shares an aggregate with (even
        # with in_tree, which only says where the provider itself must be)
        for slot in np.nonzero(ok & q.sharing)[0].tolist():
            own = int(q.root[slot])
            for root in q.anchors(slot):
                if root != own:
                    self.foreign.setdefault(root, []).append(slot)
        super().__init__(set(self.local.ranges) | set(self.foreign))

    def _compute(self, root: int) -> list[_Choice]:
        slots = self.local.get(root)
        extra = self.foreign.get(root)
        if extra:
            slots = sorted({*slots, *extra})
        return [tuple((s, rc, amount) for rc, amount in self.parts) for s in slots]


def _bits_of_any(store: PlacementStore, names: frozenset[str]) -> int:
    bits = 0
    for name in names:
        bits |= store.trait_bits(name)
    return bits


def _check_names(store: PlacementStore, request: AllocationCandidatesRequest) -> None:
    for group in request.groups.values():
        for rc in group.resources:
            if not store.has_resource_class(rc):
                raise PlacementError("Invalid resource class in resources parameter: "
                                     f"No such resource class {rc}.")
    traits: set[str] = set(request.root_required | request.root_forbidden)
    for group in request.groups.values():
        traits |= group.forbidden_traits
        for any_of in group.required_traits:
            traits |= any_of
    unknown = sorted(t for t in traits if not store.has_trait(t))
    if unknown:
        raise PlacementError(f"No such trait(s): {', '.join(unknown)}.")


class _Combiner:
    """Checks that concern several groups of one candidate."""

    def __init__(self, q: ProviderMasks, request: AllocationCandidatesRequest) -> None:
        self.q = q
        self.suffixes = list(request.groups)
        self.isolate = request.group_policy == "isolate"
        self.granular = [i for i, s in enumerate(self.suffixes) if s]
        self.subtrees = [[self.suffixes.index(s) for s in names]
                         for names in request.same_subtrees]
        self._ancestors: dict[int, set[int]] = {}

    def ancestors(self, slot: int) -> set[int]:
        found = self._ancestors.get(slot)
        if found is None:
            found, current = set(), slot
            while True:
                found.add(current)
                parent = self.q.store.at(current).parent
                if parent is None:
                    break
                current = parent
            self._ancestors[slot] = found
        return found

    def accepts(self, combo: Sequence[_Choice]) -> dict[tuple[int, str], int] | None:
        """The summed amounts per (slot, class) if the combination is acceptable."""
        if self.isolate:
            used = [combo[i][0][0] for i in self.granular]
            if len(set(used)) != len(used):
                return None
        for indexes in self.subtrees:
            slots = {part[0] for i in indexes for part in combo[i]}
            common = set(slots)
            for slot in slots:
                common &= self.ancestors(slot)
            if not common:
                return None
        amounts: dict[tuple[int, str], int] = {}
        summed = False
        for choice in combo:
            for slot, rc, amount in choice:
                if rc:
                    key = (slot, rc)
                    summed = summed or key in amounts
                    amounts[key] = amounts.get(key, 0) + amount
        if summed:
            for (slot, rc), amount in amounts.items():
                column = self.q.store.column(rc)
                assert column is not None
                if (column.used[slot] + amount > column.capacity[slot]
                        or amount > column.max_unit[slot]):
                    return None
        return amounts


def _anchor_roots(q: ProviderMasks, request: AllocationCandidatesRequest,
                  per_group: list[_GroupChoices]) -> list[int]:
    """The roots every group can hang on that ``root_required`` accepts, in order."""
    roots = set(per_group[0].roots).intersection(*(g.roots for g in per_group[1:]))
    if request.root_required or request.root_forbidden:
        has = q.in_all([frozenset({t}) for t in request.root_required], "trait")
        hasnt = q.in_any(request.root_forbidden, "trait")
        roots = {r for r in roots if (has is None or has[r]) and (hasnt is None or not hasnt[r])}
    return sorted(roots)


def _enumerate(q: ProviderMasks, request: AllocationCandidatesRequest,
               per_group: list[_GroupChoices],
               ) -> Iterator[tuple[int, tuple[_Choice, ...]]]:
    for root in _anchor_roots(q, request, per_group):
        for combo in itertools.product(*(g.choices(root) for g in per_group)):
            yield root, combo


def _one_group(q: ProviderMasks, request: AllocationCandidatesRequest,
               group: _GroupChoices, suffix: str, trees: set[int],
               ) -> list[AllocationRequest]:
    """The candidates of a request of one group (Nova's usual query): each choice of
    the group is a candidate, so the loop of :func:`_candidates` is done here with
    nothing it does not need (no combining of groups)."""
    uuids = q.store.uuid_at
    is_sharing: list[bool] = q.sharing.tolist()
    root_of: list[int] = q.root.tolist()
    limit = request.limit
    seen: set[tuple[object, ...]] = set()
    requests: list[AllocationRequest] = []
    add_tree = trees.add
    for root in _anchor_roots(q, request, [group]):
        for choice in group.choices(root):
            allocations: dict[str, dict[str, int]] = {}
            only_sharing = True
            for slot, rc, amount in choice:
                if not is_sharing[slot]:
                    only_sharing = False
                if rc:
                    rp_uuid = uuids[slot]
                    found = allocations.get(rp_uuid)
                    if found is None:
                        allocations[rp_uuid] = {rc: amount}
                    else:
                        found[rc] = amount
                    add_tree(root_of[slot])
            if only_sharing:  # other anchors may give the same candidate again
                key = (tuple(sorted(choice)), (tuple(sorted({p[0] for p in choice})),))
                if key in seen:
                    continue
                seen.add(key)
            requests.append(AllocationRequest(allocations, {suffix: list(allocations)}))
            if limit is not None and len(requests) >= limit:
                return requests
    return requests


def allocation_candidates(store: PlacementStore,
                          request: AllocationCandidatesRequest) -> AllocationCandidates:
    """Every way to satisfy ``request`` on ``store`` (up to ``request.limit``), with a
    summary of every provider of the trees they allocate from.

    Raises :class:`~corral.errors.PlacementError` for an unknown resource class or
    trait, as Placement does (400)."""
    _check_names(store, request)
    with collector_paused():
        return _candidates(store, request)


def _candidates(store: PlacementStore,
                request: AllocationCandidatesRequest) -> AllocationCandidates:
    q = ProviderMasks(store)
    per_group: list[_GroupChoices] = [
        (_Suffixed if group.use_same_provider else _Unsuffixed)(q, group)
        for group in request.groups.values()]
    combiner = _Combiner(q, request)
    single = len(per_group) == 1
    seen: set[tuple[object, ...]] = set()
    uuids = store.uuid_at
    is_sharing: list[bool] = q.sharing.tolist()
    root_of: list[int] = q.root.tolist()
    suffixes = combiner.suffixes
    requests: list[AllocationRequest] = []
    trees: set[int] = set()
    # Before 1.29 a client is blind to nested providers: a candidate taking from two
    # providers of one tree is left out, and only the providers used are summarised.
    blind = request.version < (1, 29) and q.has_trees()
    if single and not blind:
        requests = _one_group(q, request, per_group[0], suffixes[0], trees)
        return AllocationCandidates(requests, _summaries(store, q, trees))
    blind_slots: set[int] = set()
    for _root, combo in _enumerate(q, request, per_group) if per_group else iter(()):
        if single:
            parts = combo[0]
        else:
            amounts = combiner.accepts(combo)
            if amounts is None:
                continue
            parts = tuple((slot, rc, amount) for (slot, rc), amount in amounts.items())
        if blind:
            used_slots = {part[0] for part in parts}
            if len({root_of[s] for s in used_slots}) != len(used_slots):
                continue
        only_sharing = True
        for choice in combo:
            for part in choice:
                if not is_sharing[part[0]]:
                    only_sharing = False
                    break
        if only_sharing:  # other anchors may give the same candidate again
            key = (tuple(sorted(parts)),
                   tuple(tuple(sorted({p[0] for p in choice})) for choice in combo))
            if key in seen:
                continue
            seen.add(key)
        allocations: dict[str, dict[str, int]] = {}
        for slot, rc, amount in parts:
            if rc:
                allocations.setdefault(uuids[slot], {})[rc] = amount
                trees.add(root_of[slot])
        if single:  # every part has resources: the providers are the allocation's
            mappings = {suffixes[0]: list(allocations)}
        else:
            mappings = {suffix: list(dict.fromkeys([uuids[part[0]] for part in choice]))
                        for suffix, choice in zip(suffixes, combo, strict=True)}
        requests.append(AllocationRequest(allocations, mappings))
        if blind:
            blind_slots.update(part[0] for part in parts)
        if request.limit is not None and len(requests) >= request.limit:
            break
    if blind:
        return AllocationCandidates(requests, {store.uuid_at[s]: store.summary(s)
                                               for s in sorted(blind_slots)})
    return AllocationCandidates(requests, _summaries(store, q, trees))


def _summaries(store: PlacementStore, q: ProviderMasks,
               trees: set[int]) -> dict[str, ProviderSummary]:
    if not trees:
        return {}
    wanted = np.zeros(q.n, dtype=bool)
    wanted[np.fromiter(trees, dtype=np.int64)] = True
    in_trees = wanted[q.root] & q.alive
    return {store.uuid_at[slot]: store.summary(slot)
            for slot in np.nonzero(in_trees)[0].tolist()}
