"""Asking an allocator from a logical unit: which allocators to try, the nodes' live
data, the request, and the answer or a job error that names each allocator and
quotes what it said.

Without ``-I``, or with ``-I .`` (Ganeti's shortcut), the cluster's default
allocators are tried in their order until one answers with a solution (design 2.1);
each one that fails is reported in the job log. The allocators themselves run in the
engine (:class:`corral.iallocator.PluginRunner`), never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from corral.cmdlib.aggregates import (
    describe_constraints,
    instance_constraints,
    unsuitable_nodes,
)
from corral.errors import CorralError, OpExecError, OpPrereqError
from corral.iallocator import (
    Answer,
    ClusterView,
    NodeLive,
    build_input,
    parse_answer,
    relocate_request,
    reported_storage,
)
from corral.locking import LockLevel

if TYPE_CHECKING:
    from corral.cmdlib.base import LogicalUnit, MasterContext
    from corral.objects import Instance, Node

__all__ = ["DEFAULT_SHORTCUT", "LIVE_TIMEOUT", "allocator_names", "gather_live",
           "release_other_nodes", "relocation_target", "run_allocators", "shown_drained"]

#: ``-I .`` names the cluster's default allocators (Ganeti's shortcut).
DEFAULT_SHORTCUT: Final = "."
#: Seconds the nodes have to tell their memory, disk and CPUs for a request.
LIVE_TIMEOUT: Final = 30.0
#: How much of an answer that could not be read an error quotes.
_SHOWN: Final = 300


def allocator_names(master: MasterContext, requested: str | None) -> list[str]:
    """The allocators to try, in order: the one named, else the cluster's defaults.

    :raises OpPrereqError: none named and the cluster has no default (Ganeti's words).
    """
    if requested and requested != DEFAULT_SHORTCUT:
        return [requested]
    names = list(master.store.cluster.default_iallocators)
    if not names:
        raise OpPrereqError("No iallocator was specified, neither in the opcode nor as a "
                            "cluster-wide default\nname one with -I (iallocator) or set the "
                            "cluster's default allocators with 'gnt-cluster modify -I'",
                            ecode="wrong_input")
    return names


async def gather_live(master: MasterContext, *, hypervisor: str, disk_template: str
                      ) -> dict[str, NodeLive]:
    """Memory, CPUs, storage and running instances of every online VM-capable node.

    :raises OpExecError: a node that is not marked offline did not answer (Ganeti's
        ``Can't get data for node``): an allocation on stale data could overcommit it.
    """
    store = master.store
    cluster = store.cluster
    nodes = [n for n in store.all("node") if n.vm_capable and not n.offline]
    if not nodes:
        return {}
    storage = reported_storage(cluster, disk_template)
    asked = storage.node_info_args() if storage is not None else {}
    info, instances = await asyncio.gather(
        master.rpc.call(nodes, "node_info", {**asked, "hypervisors": [hypervisor]},
                        timeout=LIVE_TIMEOUT),
        master.rpc.call(nodes, "all_instances_info",
                        {"hypervisors": list(cluster.enabled_hypervisors)},
                        timeout=LIVE_TIMEOUT))
    live: dict[str, NodeLive] = {}
    for node in nodes:
        answer = info.get(node.name)
        running = instances.get(node.name)
        for result, what in ((answer, "data"), (running, "node instance info")):
            if result is None or result.failed or not isinstance(result.payload, dict):
                why = result.error.message if result is not None and result.error else \
                    "no answer"
                raise OpExecError(f"Can't get {what} for node {node.name}: {why}\nmark the "
                                  "node offline if it is down")
        assert answer is not None and running is not None
        live[node.name] = NodeLive(info=answer.payload, instances=running.payload)
    return live


def release_other_nodes(lu: LogicalUnit[Any], keep: Sequence[str]) -> None:
    """Once an allocator has chosen, give up the node locks of every other node (the
    unit took them all so that the choice was free)."""
    locks = lu.master.locks
    for level in (LockLevel.NODE_RES, LockLevel.NODE):
        others = sorted(locks.owned_locks(level, owner=lu.owner) - set(keep))
        if others:
            locks.release(level, others, owner=lu.owner)


async def run_allocators(lu: LogicalUnit[Any], names: Sequence[str],
                         request: Mapping[str, Any], *, hypervisor: str | None = None,
                         disk_template: str | None = None,
                         extra_params: Mapping[str, Any] | None = None,
                         failure: Callable[[str, str], str],
                         node_filter: Callable[[Mapping[str, NodeLive]], list[str]] | None
                         = None, unsuitable: Collection[str] = ()) -> tuple[str, Answer]:
    """Ask the allocators ``names`` in turn; the first that answers with a solution
    wins: its name and answer.

    ``failure(name, info)`` words an answer without a solution for the operation
    (Ganeti's ``Can't compute nodes using iallocator 'NAME': INFO``); a plugin gets the
    cluster's default allocator parameters and ``extra_params`` as arguments.
    ``node_filter`` (placement constraints) gets the nodes' live data and names the
    nodes the instance may go to (or raises when none may); the request then carries
    them as Ganeti's ``restrict-to-nodes``, which the built-in allocator and hail
    honour. ``unsuitable`` names nodes the moved instances must not go to (their
    placement constraints): the allocator sees them drained, which every allocator
    of Ganeti's protocol reads as "takes no instance", for requests (relocate,
    node-evacuate, change-group) that have no node list of their own.

    :raises OpPrereqError: every allocator answered that nothing fits (error type
        ``insufficient_resources``), quoting each one's ``info``;
    :raises OpExecError: an allocator could not be run or answered garbage (when it
        was the first to fail), naming it.
    """
    master = lu.master
    store = master.store
    cluster = store.cluster
    template = disk_template or request.get("disk_template") or \
        (cluster.enabled_disk_templates or ["diskless"])[0]
    live = await gather_live(master, hypervisor=hypervisor or cluster.default_hypervisor,
                             disk_template=template)
    if node_filter is not None:
        allowed = await asyncio.to_thread(node_filter, live)
        request = {**request, "restrict-to-nodes": allowed}
    # 10,000 instances take a few tenths of a second to describe: not on the event loop
    data = await asyncio.to_thread(build_input, ClusterView.of(store), live, request,
                                   disk_template=template)
    if unsuitable:
        data = shown_drained(data, unsuitable)
    params = {**cluster.default_iallocator_params, **(extra_params or {})}
    failures: list[CorralError] = []
    for position, name in enumerate(names):
        try:
            text = await master.iallocators.run(
                name, data, search_path=cluster.iallocator_search_path, params=params,
                timeout=cluster.iallocator_timeout)
            try:
                answer = parse_answer(text, data)
            except OpExecError as err:
                # Ganeti's line, then which plugin answered what
                shown = text.strip()
                shown = shown if len(shown) <= _SHOWN else shown[:_SHOWN] + "..."
                raise OpExecError(f"{err.message}\niallocator '{name}' answered: {shown!r}"
                                  ) from None
            if not answer.success:
                raise OpPrereqError(failure(name, answer.info), ecode="insufficient_resources")
        except CorralError as err:
            failures.append(err)
            if position + 1 < len(names):
                first_line = err.message.splitlines()[0] if err.message else ""
                lu.feedback(f" - WARNING: iallocator '{name}' gave no solution: {first_line}; "
                            f"trying '{names[position + 1]}'")
            continue
        return name, answer
    first = failures[0]
    if len(failures) == 1:
        raise first
    message = "\n".join(err.message for err in failures)
    raise type(first)(message, ecode=first.ecode)


def shown_drained(data: Mapping[str, Any], names: Collection[str]) -> dict[str, Any]:
    """The allocator input ``data`` with the nodes ``names`` marked drained (a copy:
    the input shares its entries with the next one built)."""
    nodes = dict(data["nodes"])
    for name in names:
        if name in nodes:
            nodes[name] = {**nodes[name], "drained": True}
    return {**data, "nodes": nodes}


async def relocation_target(lu: LogicalUnit[Any], names: Sequence[str], instance: Instance,
                            source: Node) -> Node:
    """A new node for ``instance`` away from ``source`` (Ganeti's ``relocate``
    request), announced in the job log; the other nodes' locks are released. Nodes
    that break the instance's placement constraints are not chosen."""
    store = lu.master.store
    constraints = instance_constraints(instance)
    avoid = [n for n in unsuitable_nodes(store, constraints) if n != source.name]
    why = (f" (nodes {', '.join(avoid)} break the placement constraints of instance "
           f"{instance.name}: {describe_constraints(store, constraints)})" if avoid else "")
    name, answer = await run_allocators(
        lu, names, relocate_request(store, instance, [source.name]),
        hypervisor=instance.hypervisor, disk_template=instance.disk_template,
        unsuitable=avoid,
        failure=lambda name, info: f"Can't compute nodes using iallocator '{name}': {info}"
                                   f"{why}")
    chosen = answer.result[:1]
    target = store.find("node", chosen[0]) if chosen else None
    if target is None:
        raise OpPrereqError(f"iallocator '{name}' chose no known node for instance "
                            f"{instance.name}: {answer.result!r}", ecode="unknown_entity")
    lu.feedback(f" - INFO: Selected nodes for instance {instance.name} via iallocator {name}: "
                f"{', '.join(answer.result)}")
    release_other_nodes(lu, [source.name, target.name])
    return target
