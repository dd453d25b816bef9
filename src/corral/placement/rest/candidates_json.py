"""The ``GET /allocation_candidates`` answer written as JSON bytes.

An unlimited answer at 5000 computes holds some 12000 allocation requests and 9000
provider summaries (about 6 MB). Building a dict per summary and encoding it again on
every request cost more than finding the candidates, so each provider's summary is
encoded once and its bytes kept, per store, until the summary changes: the engine
hands out one :class:`~corral.placement.model.ProviderSummary` object per provider
until anything in it changes (generation, usage, parent), so a kept fragment is used
only while the engine returns the very object it was made from. The answer is those
fragments joined, after the allocation requests, which are encoded in one go from
dicts that reuse the engine's own (no copies).

The bytes are the same as encoding the whole answer as one dict would give: compact,
object keys sorted (:mod:`corral.serializer`).
"""

from __future__ import annotations

import weakref
from typing import Any

from corral import serializer
from corral.placement.candidates import AllocationCandidates
from corral.placement.model import PlacementStore, ProviderSummary
from corral.placement.names import trait_order

__all__ = ["candidates_body"]

#: What a summary's encoding depends on besides the summary: traits shown (1.17),
#: tree shown (1.29), and the classes shown (None: all of them, from 1.27).
_Shape = tuple[bool, bool, frozenset[str] | None]

#: store -> (provider uuid, shape) -> (summary it was made from, bytes)
_FRAGMENTS: weakref.WeakKeyDictionary[
    PlacementStore, dict[tuple[str, _Shape], tuple[ProviderSummary, bytes]]] = (
        weakref.WeakKeyDictionary())


def _summary_dict(summary: ProviderSummary, shape: _Shape) -> dict[str, Any]:
    traits, tree, classes = shape
    out: dict[str, Any] = {"resources": {
        rc: {"capacity": cap, "used": used} for rc, (cap, used) in summary.resources.items()
        if classes is None or rc in classes}}
    if traits:
        out["traits"] = trait_order(summary.traits)
    if tree:
        out["parent_provider_uuid"] = summary.parent_uuid
        out["root_provider_uuid"] = summary.root_uuid
    return out


def _fragments(store: PlacementStore,
               ) -> dict[tuple[str, _Shape], tuple[ProviderSummary, bytes]]:
    found = _FRAGMENTS.get(store)
    if found is None:
        found = _FRAGMENTS.setdefault(store, {})
    return found


def candidates_body(store: PlacementStore, found: AllocationCandidates,
                    version: tuple[int, int], requested: frozenset[str]) -> bytes:
    """The answer's JSON: ``allocation_requests`` in the shape of ``version``, then
    ``provider_summaries`` (the classes in ``requested`` only, before 1.27)."""
    requests: list[dict[str, Any]]
    if version >= (1, 12):
        requests = [{"allocations": {rp: {"resources": res}
                                     for rp, res in candidate.allocations.items()}}
                    for candidate in found.allocation_requests]
        if version >= (1, 34):
            for entry, candidate in zip(requests, found.allocation_requests, strict=True):
                entry["mappings"] = candidate.mappings
    else:
        requests = [{"allocations": [{"resource_provider": {"uuid": rp}, "resources": res}
                                     for rp, res in candidate.allocations.items()]}
                    for candidate in found.allocation_requests]
    shape: _Shape = (version >= (1, 17), version >= (1, 29),
                     None if version >= (1, 27) else requested)
    cache = _fragments(store)
    if len(cache) > 4 * store.size:  # fragments of deleted providers pile up otherwise
        cache.clear()
    parts = [b'{"allocation_requests":', serializer.dumps(requests),
             b',"provider_summaries":{']
    first = True
    for rp_uuid, summary in sorted(found.provider_summaries.items()):  # sorted keys
        key = (rp_uuid, shape)
        kept = cache.get(key)
        if kept is None or kept[0] is not summary:
            kept = cache[key] = (summary, serializer.dumps(_summary_dict(summary, shape)))
        if not first:
            parts.append(b",")
        first = False
        parts.append(b'"%s":%s' % (rp_uuid.encode(), kept[1]))
    parts.append(b"}}")
    return b"".join(parts)
