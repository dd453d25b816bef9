"""Everything the master daemon holds: configuration, locks, job queue, processor,
configuration replication.

:class:`MasterState` builds them in order and keeps them in step: the job queue's
``max_running_jobs`` follows the cluster parameter, and the job filters are compiled
once per change of the stored rules.
"""

from __future__ import annotations

import logging
from typing import Any

from corral.cmdlib import AREAS, LOGICAL_UNITS, MasterContext, NodeRpc, Processor
from corral.cmdlib.query import FILTER_FIELDS, LOCK_FIELDS, resource
from corral.config import ConfigStore
from corral.jobs import Decider, Handover, JobQueue, JobStore
from corral.jobs.filters import FilterChain
from corral.locking import LockManager
from corral.masterd.placement import PlacementService
from corral.masterd.placement_sync import ClusterSync, enabled
from corral.masterd.replication import ConfigReplicator, JobReplicator, Replicator
from corral.objects import Cluster
from corral.paths import Paths

__all__ = ["MasterState"]

log = logging.getLogger(__name__)


class MasterState:
    """The master daemon's engines, wired together."""

    #: Seconds a stopping master waits for the candidates to have its last changes.
    REPLICATION_GRACE = 5.0

    def __init__(self, store: ConfigStore, jobs: JobStore, rpc: NodeRpc | None = None) -> None:
        self.store = store
        self.job_store = jobs
        #: This node's paths (set by the daemon; ``None`` in tests without a node).
        self.paths: Paths | None = None
        self.locks = LockManager(
            nodes=[n.name for n in store.all("node")],
            nodegroups=[g.name for g in store.all("nodegroup")],
            instances=[i.name for i in store.all("instance")],
            networks=[n.name for n in store.all("network")],
        )
        self.context = MasterContext(store=store, locks=self.locks,
                                     cluster_changed=self._cluster_changed)
        #: Push every commit and every job queue batch to the master candidates
        #: (with a node RPC only).
        self.replicators: list[Replicator[Any]] = []
        if rpc is not None:
            self.context.rpc = rpc
            config = ConfigReplicator(store, rpc)
            self.replicators = [config, JobReplicator(store, jobs, rpc)]
            self.context.wait_replicated = config.wait_replicated
        for area in AREAS:
            self.context.queries.update(area.query_resources(self.context))
        self.context.queries["filter"] = resource(FILTER_FIELDS, lambda: store.all("filter"))
        self.context.queries["lock"] = resource(LOCK_FIELDS, self.locks.info)
        self.processor = Processor(self.context, LOGICAL_UNITS)
        self.queue = JobQueue(
            jobs, self.processor.execute,
            max_running=store.cluster.max_running_jobs,
            decider=self._decider(),
        )
        self.context.submit_jobs = self.queue.submit_many
        #: Derives the cluster's nodes and instances into the ``/placement/`` engine
        #: (None when the master's environment turns that off).
        self.placement_sync = ClusterSync(store, rpc) if enabled() else None
        #: The ``/placement/`` API's engine: the cluster, then its configuration rows.
        self.placement = PlacementService(store, self.placement_sync)
        if self.placement_sync is not None:
            self.placement_sync.attach(self.placement)

    @classmethod
    def open(cls, paths: Paths, store: ConfigStore) -> MasterState:
        """Open the job store next to the configuration."""
        return cls(store, JobStore.open(paths.jobs_db))

    async def start(self) -> None:
        """Load the queue (recovering from a crash), start running jobs and
        replicating the configuration."""
        await self.queue.start()
        for replicator in self.replicators:
            replicator.start()
        if self.placement_sync is not None:
            self.placement_sync.start()

    async def stop(self) -> None:
        """Stop replicating and running jobs; close the job store."""
        if self.placement_sync is not None:
            await self.placement_sync.stop()
        await self.queue.stop()
        for replicator in self.replicators:
            # The candidates get what was committed last (a master failover takes
            # over from them), unless one of them does not answer for long.
            await replicator.wait_replicated(self.REPLICATION_GRACE)
            await replicator.stop()

    async def hand_over(self, new_master: str, wait: float) -> tuple[Handover, bool]:
        """Prepare a planned master failover (:meth:`JobQueue.hand_over`), then wait
        for the candidates to hold the final state of every job and of the
        configuration; returns what was handed over and whether they all do.

        The new master's queue is its replica, so this is what makes the handover
        lose no job; a candidate that does not answer is no reason to wait longer
        (the failover takes the newest state any node holds, this one included).
        """
        handover = await self.queue.hand_over(new_master, wait)
        replicated = True
        for replicator in self.replicators:
            replicated &= await replicator.wait_replicated(self.REPLICATION_GRACE)
        return handover, replicated

    def _cluster_changed(self, cluster: Cluster) -> None:
        if cluster.max_running_jobs != self.queue.max_running:
            log.info("max_running_jobs is now %d", cluster.max_running_jobs)
            self.queue.set_max_running(cluster.max_running_jobs)

    def _decider(self) -> Decider:
        """The stored rules compiled into one filter chain."""
        return FilterChain.from_rules(self.store.all("filter")).decide

    async def filters_changed(self) -> None:
        """Compile the stored rules and re-evaluate every unfinished job."""
        self.queue.set_decider(self._decider())
        await self.queue.reevaluate()
