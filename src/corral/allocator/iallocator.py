"""The allocator behind the iallocator protocol: a request in, an answer out.

:func:`answer` takes a decoded request (Ganeti's JSON shape, see
:mod:`corral.allocator.request`) and returns Ganeti's answer shape::

    {"success": bool, "info": str, "result": ...}

``info`` starts with ``Request successful:`` or ``Request failed:`` as hail's does;
``result`` is, for ``allocate``, the chosen node names (primary first), for
``relocate`` the new node, for ``node-evacuate`` and ``change-group`` the moved
instances, the failed ones and the jobs (lists of opcodes) that move them, and for
``multi-allocate`` the allocated and the failed instances. A request that cannot be
read or satisfied is an answer with ``success`` false, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corral.allocator.alloc import (
    AllocError,
    AllocOptions,
    alloc_list,
    allocate,
    allocate_secondary,
)
from corral.allocator.dedicated import alloc_list_dedicated, allocate_dedicated, is_dedicated
from corral.allocator.evacuate import EvacError, change_group, node_evacuate, relocate
from corral.allocator.model import LoadError
from corral.allocator.request import (
    AllocateRequest,
    ChangeGroupRequest,
    MultiAllocateRequest,
    NodeEvacuateRequest,
    Parsed,
    RelocateRequest,
    SecondaryRequest,
    parse,
)

__all__ = ["AnswerOptions", "answer", "answer_parsed"]


@dataclass
class AnswerOptions:
    """hail's options that change answers."""

    #: skip global N+1 checks (``--no-capacity-checks``)
    capacity: bool = True
    #: ignore soft limits (``--ignore-soft-errors``)
    force: bool = False
    #: only these nodes may receive instances (``--restrict-allocation-to``)
    restrict_to: list[str] | None = None
    #: reserved memory of kvm nodes (``--static-kvm-node-memory``; 0: as reported)
    static_kvm_memory: int = 4096


def _failed(message: str) -> dict[str, Any]:
    return {"success": False, "info": f"Request failed: {message}", "result": []}


def _succeeded(message: str, result: Any) -> dict[str, Any]:
    return {"success": True, "info": f"Request successful: {message}", "result": result}


def answer(request: Mapping[str, Any], options: AnswerOptions | None = None) -> dict[str, Any]:
    """Answer an iallocator request (see the module text)."""
    opts = options if options is not None else AnswerOptions()
    try:
        parsed = parse(request, opts.static_kvm_memory)
    except LoadError as err:
        return _failed(str(err))
    return answer_parsed(parsed, opts)


def answer_parsed(parsed: Parsed, opts: AnswerOptions) -> dict[str, Any]:
    """Answer a request already read by :func:`corral.allocator.request.parse`."""
    req = parsed.request
    cluster = parsed.cluster
    alloc_opts = AllocOptions(force=opts.force, capacity=opts.capacity,
                              restrict_to=opts.restrict_to)
    try:
        if isinstance(req, AllocateRequest):
            restrict = opts.restrict_to if opts.restrict_to is not None else req.restrict_to
            if opts.restrict_to is not None and req.restrict_to is not None:
                # both the allocator's option and the request (placement constraints)
                # restrict: a node must pass both
                restrict = [n for n in opts.restrict_to if n in set(req.restrict_to)]
            alloc_opts.restrict_to = restrict
            inst = req.inst
            inst.idx = len(cluster.instances)
            place = allocate_dedicated if is_dedicated(cluster, req.group_name) else allocate
            sol = place(cluster, inst, req.required_nodes, alloc_opts, req.group_name)
            info = ", ".join(sol.log)
            if sol.best is None:
                return _failed(info)
            return _succeeded(info, [cluster.nodes[i].name for i in sol.best.nodes])
        if isinstance(req, RelocateRequest):
            nodes = relocate(cluster, req.inst, req.required_nodes, req.relocate_from,
                             opts.force)
            return _succeeded("success", [cluster.nodes[i].name for i in nodes])
        if isinstance(req, NodeEvacuateRequest):
            outcome = node_evacuate(cluster, req.instances, req.mode, opts.force)
            return _succeeded(outcome.info(), outcome.result(cluster))
        if isinstance(req, ChangeGroupRequest):
            outcome = change_group(cluster, req.instances, req.target_groups, alloc_opts)
            return _succeeded(outcome.info(), outcome.result(cluster))
        if isinstance(req, MultiAllocateRequest):
            place_all = (alloc_list_dedicated if is_dedicated(cluster, req.group_name)
                         else alloc_list)
            results = place_all(cluster, req.instances, req.group_name, alloc_opts)
            done = [[inst.name, [cluster.nodes[i].name for i in sol.best.nodes]]
                    for inst, sol in results if sol.best is not None]
            failed = [[inst.name, ", ".join(sol.log)] for inst, sol in results
                      if sol.best is None]
            return _succeeded(f"{len(failed)} instances failed to allocate and {len(done)} "
                              "were allocated successfully", [done, failed])
        if isinstance(req, SecondaryRequest):
            sol = allocate_secondary(cluster, req.inst, alloc_opts)
            info = ", ".join(sol.log)
            if sol.best is None:
                return _failed(info)
            return _succeeded(info, cluster.nodes[sol.best.nodes[1]].name)
        raise AssertionError(f"unhandled request {req!r}")   # pragma: no cover
    except (AllocError, EvacError, LoadError) as err:
        return _failed(str(err))
