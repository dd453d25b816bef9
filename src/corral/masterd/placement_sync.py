"""The cluster in the ``/placement/`` store: every node a root provider, every instance
a consumer (:func:`corral.placement.cluster.sync`), derived in memory from the
configuration and the nodes' last live figures, never written as configuration rows.

What is derived and what is saved: node providers and instance consumers live only
in the master daemon's engine; they are rebuilt from the configuration (and the last
figures) when the engine is built, and kept in step after that. Only what REST
clients make (their providers, consumers, custom classes and traits) is saved as rows
(:mod:`corral.masterd.placement`); an outside consumer's allocations on a node
provider are part of that consumer's row. So following the cluster never commits:
no configuration serial moves because a node's free memory did.

When: at start (the engine is built with the cluster first, then the saved rows on
top), after every durable commit of a watched kind (the cluster, node groups, nodes,
instances, disks), and after a gather brings figures that differ from the last
(:func:`same_figures`). Commits only wake one task; a burst of commits costs one sync
after the one under way.

How: the task takes a view of the configuration on the event loop, then runs
``sync`` in a worker thread while it holds :attr:`PlacementService.lock` exclusively
(REST requests wait for it without blocking the loop; ``sync`` walks every node and
instance, about 0.5 s at 5000 nodes). What the sync changed of saved data (an
outside consumer losing its allocations on a removed node) is committed.

Live figures: the master asks every online VM-capable node for ``node_info`` (the
cluster's default hypervisor and first enabled disk template) at start and every
:attr:`ClusterSync.interval` seconds; nodes without figures yet are asked again
after every commit of a node and every :attr:`ClusterSync.retry` seconds. A node keeps
its last figures while it does not answer and loses them when it is marked offline or
removed; until its first figures it has no inventories.

``CORRAL_PLACEMENT_CLUSTER=off`` in the master daemon's environment leaves the
cluster out of ``/placement/`` (a store of outside data only, as Placement's own API
tests expect); the allocator's own per-query store is not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from corral.cmdlib import NodeRpc
from corral.cmdlib.aggregates import node_resources
from corral.cmdlib.allocation import LIVE_TIMEOUT
from corral.config import ConfigStore
from corral.config.storage import Row
from corral.iallocator import ClusterView
from corral.iallocator.request import NodeLive, reported_storage
from corral.luxi import calls
from corral.masterd.placement import PlacementService
from corral.placement.cluster import NodeResources, Synced, sync
from corral.placement.model import PlacementStore
from corral.placement.rest import Changes, PlacementRequest
from corral.placement.rest.guard import cluster_refusal
from corral.utils.gcpause import collector_paused

__all__ = ["ENABLE_ENV", "WATCHED_KINDS", "ClusterSync", "commit_matters", "enabled",
           "same_figures"]

log = logging.getLogger(__name__)

#: Configuration kinds whose changes can change the cluster's placement data.
WATCHED_KINDS: Final = frozenset({"cluster", "nodegroup", "node", "instance", "disk"})
#: The master daemon's environment variable that turns the cluster's view off.
ENABLE_ENV: Final = "CORRAL_PLACEMENT_CLUSTER"


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``/placement/`` shows the cluster (unless :data:`ENABLE_ENV` says
    ``off``, ``no``, ``0`` or ``false``)."""
    return environ.get(ENABLE_ENV, "").strip().lower() not in ("off", "no", "0", "false")


def commit_matters(known: dict[str, str], rows: Sequence[Row], deletes: Sequence[str],
                   still_there: Callable[[str, str], bool]) -> bool:
    """Whether a commit changed something :func:`sync` reads; keeps ``known`` (UUID →
    kind of the watched objects) up to date. A deleted UUID counts only when it was a
    watched object that is gone. ``still_there(kind, uuid)`` says whether the
    configuration still holds an object."""
    matters = False
    for row in rows:
        if row.kind in WATCHED_KINDS:
            known[row.uuid] = row.kind
            matters = True
    for uuid in deletes:
        kind = known.get(uuid)
        if kind is not None and not still_there(kind, uuid):
            del known[uuid]
            matters = True
    return matters


def same_figures(old: NodeResources | None, new: NodeResources) -> bool:
    """Whether ``new`` is no news after ``old``: the same CPUs, memory and storage
    size in GiB (as the inventories have it), and memory the node uses itself within
    2% of its memory (at least 64 MiB) of the last. What a node uses moves all the
    time; a new generation of its provider for every wobble would make every client's
    generation stale for nothing."""
    if old is None:
        return False
    slack = max(64, new.memory_mb // 50)
    return ((old.cpus, old.memory_mb, old.disk_mb // 1024)
            == (new.cpus, new.memory_mb, new.disk_mb // 1024)
            and abs(old.memory_reserved_mb - new.memory_reserved_mb) < slack)


def _sync_quietly(engine: PlacementStore, view: ClusterView,
                  live: Mapping[str, NodeResources]) -> Synced:
    """:func:`sync` with the cyclic collector paused: a full collection of a big
    cluster's objects (0.7 s at 5000 nodes and 20000 instances) holds the GIL, so the
    event loop would stand still while this thread runs it. A sync makes no cycles."""
    with collector_paused():
        return sync(engine, view, live)


class ClusterSync:
    """Derives the cluster's nodes and instances into the placement service's engine
    and keeps them in step with the configuration and the nodes' figures."""

    #: Seconds between two gathers of the nodes' figures.
    interval: float = 60.0
    #: Seconds before asking again while a node has given no figures yet.
    retry: float = 5.0
    #: Seconds a REST request waits at start for the first figures to be in.
    ready_wait: float = 10.0

    def __init__(self, store: ConfigStore, rpc: NodeRpc | None = None) -> None:
        self.store = store
        self.rpc = rpc
        #: The last figures of each node, by node name.
        self.live: dict[str, NodeResources] = {}
        self._known = {obj.uuid: kind for kind in WATCHED_KINDS
                       for obj in store.all(kind)}
        self._wake = asyncio.Event()
        #: Set by a commit of a node: ask the nodes without figures now.
        self._new_node = asyncio.Event()
        #: Set once the first gather's figures are in the engine (or failed).
        self._ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._service: PlacementService | None = None
        #: What the last sync could not do, by node UUID (logged when it changes).
        self._refused: dict[str, str] = {}
        store.add_listener(self._committed)

    # -- the hooks of PlacementService (corral.masterd.placement.Derived) -------------
    def build(self, engine: PlacementStore) -> None:
        """Put the cluster (with the last figures) into a fresh engine."""
        sync(engine, ClusterView.of(self.store), self.live)

    def saved(self, changes: Changes) -> Changes:
        """``changes`` without the node providers and instance consumers (derived)."""
        return Changes(
            providers={uuid for uuid in changes.providers
                       if self.store.find("node", uuid) is None},
            consumers={uuid for uuid in changes.consumers
                       if self.store.find("instance", uuid) is None},
            resource_classes=set(changes.resource_classes), traits=set(changes.traits))

    @property
    def service(self) -> PlacementService:
        """The placement service this sync feeds (:meth:`attach`)."""
        if self._service is None:
            raise RuntimeError("ClusterSync used before attach()")
        return self._service

    def attach(self, service: PlacementService) -> None:
        """Feed ``service``'s engine (built with :meth:`build` as its derived data)."""
        self._service = service

    # -- REST requests --------------------------------------------------------------
    async def ready(self) -> None:
        """Wait (a little, at most :attr:`ready_wait`) until the first figures are in,
        so that a request right after the master's start sees the nodes' inventories."""
        if self._loop is not None and not self._ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), self.ready_wait)

    def refusal(self, args: calls.Placement) -> dict[str, object] | None:
        """The 409 answer (wire form) to a request that would change a node's provider
        or an instance's consumer; None for any other request."""
        req = PlacementRequest(args.method, args.path, args.query, args.version_header,
                               args.body, args.content_type, args.user, args.read_only,
                               args.prefix, args.accept)
        refused = cluster_refusal(req, self._node_name, self._instance_name)
        return refused.to_wire() if refused is not None else None

    def _node_name(self, uuid: str) -> str | None:
        node = self.store.find("node", uuid)
        return node.name if node is not None else None

    def _instance_name(self, uuid: str) -> str | None:
        inst = self.store.find("instance", uuid)
        return inst.name if inst is not None else None

    # -- following the cluster ------------------------------------------------------
    def start(self) -> None:
        """Sync now, then after every commit that matters; gather figures (with a
        node RPC only)."""
        self._loop = asyncio.get_running_loop()
        self._wake.set()
        self._tasks.append(asyncio.create_task(self._follow(), name="placement-sync"))
        if self.rpc is not None:
            self._tasks.append(asyncio.create_task(self._gather_loop(),
                                                   name="placement-gather"))
        else:
            self._ready.set()

    async def stop(self) -> None:
        """Stop following (a sync under way is cancelled: nothing of it is saved but
        what it had committed, and the next master derives the cluster again)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._loop = None

    def _committed(self, _serial: int, rows: Sequence[Row], deletes: Sequence[str]) -> None:
        matters = commit_matters(self._known, rows, deletes,
                                 lambda kind, uuid: self.store.find(kind, uuid) is not None)
        if matters and self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)
            if any(row.kind == "node" for row in rows):
                self._loop.call_soon_threadsafe(self._new_node.set)

    async def _follow(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.sync_now()
            except asyncio.CancelledError:
                raise
            except Exception:  # the next commit or gather tries again
                log.exception("placement: bringing the cluster into /placement/ failed")

    async def sync_now(self) -> Changes:
        """Bring the engine in step with the cluster now; what changed. Saved data it
        changed (outside consumers' allocations on removed nodes) is committed."""
        service = self.service
        async with service.lock:
            view = ClusterView.of(self.store)
            live = dict(self.live)
            synced = await asyncio.to_thread(_sync_quietly, service.engine, view, live)
            service.restore_left()
            if synced.refused != self._refused:
                for node_uuid, why in synced.refused.items():
                    log.warning("placement: node %s cannot be shown as it is: %s",
                                self._node_name(node_uuid) or node_uuid, why)
                self._refused = synced.refused
            changes = Changes(providers=synced.providers, consumers=synced.consumers,
                              traits=synced.traits)
            if changes:
                await service.save(changes)
        if changes:
            log.debug("placement: cluster synced (%d provider(s), %d consumer(s) changed)",
                      len(changes.providers), len(changes.consumers))
        return changes

    async def _gather_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time()
        while True:
            self._new_node.clear()
            full = loop.time() >= next_full
            if full:
                next_full = loop.time() + self.interval
            try:
                complete = await self.gather(missing_only=not full)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("placement: gathering the nodes' figures failed")
                complete = False
            if not self._ready.is_set():
                # the first figures are in the engine before a waiting request goes on
                try:
                    await self.sync_now()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("placement: bringing the cluster into /placement/ "
                                  "failed")
                self._ready.set()
            delay = next_full - loop.time()
            if not complete:
                delay = min(delay, self.retry)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_node.wait(), max(0.0, delay))

    async def gather(self, *, missing_only: bool = False) -> bool:
        """Ask the nodes (or only those without figures yet) for their figures once;
        wakes a sync when they changed. Whether every online VM-capable node has
        figures now."""
        assert self.rpc is not None
        cluster = self.store.cluster
        nodes = [n for n in self.store.all("node") if n.vm_capable and not n.offline]
        wanted = {n.name for n in nodes}
        if missing_only:
            nodes = [n for n in nodes if n.name not in self.live]
        template = cluster.enabled_disk_templates[0] if cluster.enabled_disk_templates \
            else ""
        storage = reported_storage(cluster, template)
        asked = storage.node_info_args() if storage is not None else {}
        results = await self.rpc.call(
            nodes, "node_info", {**asked, "hypervisors": [cluster.default_hypervisor]},
            timeout=LIVE_TIMEOUT) if nodes else {}
        answers = {name: NodeLive(info=result.payload) for name, result in results.items()
                   if not result.failed and isinstance(result.payload, Mapping)}
        live = {name: res for name, res in self.live.items() if name in wanted}
        for name, res in node_resources(cluster, answers, template).items():
            if not same_figures(live.get(name), res):
                live[name] = res
        if live != self.live:
            self.live = live
            self._wake.set()
        return wanted <= live.keys()
