"""The node side of a master failover: report, hand over and take over the master role.

A node is the master when it holds the configuration store (:attr:`Paths.config_db`)
and the job queue (:attr:`Paths.jobs_db`); a master candidate holds their replicas
instead (:attr:`Paths.config_replica`, :attr:`Paths.jobs_replica`, same schemas).
Changing roles is renaming those files, with their SQLite side files, while no
daemon has them open:

* ``master_info``: the role and the serials of the configuration and job queue this
  node holds, whichever role it has;
* ``replica_dump``: a snapshot of both replicas, in the arguments form of
  ``config_replicate``/``jobs_replicate`` (a node taking over fetches the newest
  state from the node that has it);
* ``master_demote``: stop the master-only daemons (masterd, rapi), which push their
  last changes to the candidates as they stop, and keep the files as replicas. In a
  planned failover (``new_master`` given) the master daemon first hands its job
  queue over: it refuses new jobs, lets running opcodes finish for at most
  ``handover_wait`` seconds and leaves every unfinished job queued, replicated, for
  the new master (:meth:`corral.masterd.state.MasterState.hand_over`);
* ``master_takeover``: turn this candidate's replicas into the store and the queue,
  record this node as the master and start the master-only daemons.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path
from typing import Any

from corral import daemons, serializer, x509
from corral.config import ConfigStore
from corral.config.replica import snapshot_args
from corral.config.storage import sidecar_files
from corral.errors import ConfigStoreError, CorralError, OpPrereqError
from corral.jobs.store import JobReplica, job_snapshot_args
from corral.luxi.async_client import AsyncClient
from corral.luxi.protocol import HANDOVER_METHOD
from corral.noded import replication
from corral.paths import Paths
from corral.rpc.args import DEFAULT_HANDOVER_WAIT, MasterDemoteArgs, NoArgs
from corral.utils.process import running_pid, stop_daemon

__all__ = [
    "DEFAULT_HANDOVER_WAIT", "held_config_serial", "master_demote", "master_info",
    "master_takeover", "replica_dump",
]

#: Seconds allowed for a handover beyond that wait (storing, replicating).
_HANDOVER_MARGIN = 30.0

log = logging.getLogger(__name__)


def _serial(db: Path) -> int:
    """The ``serial`` meta value of a store, queue or replica file (0 if none)."""
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True, timeout=10.0)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'serial'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise ConfigStoreError(f"{db}: cannot read its serial: {err}") from None
    return int(row[0]) if row else 0


def _is_master(paths: Paths) -> bool:
    return paths.config_db.exists()


def _move(source: Path, target: Path) -> None:
    """Rename a SQLite file with its side files (nothing may have it open)."""
    for stale in (target, *sidecar_files(target)):
        stale.unlink(missing_ok=True)
    for src, dst in zip((source, *sidecar_files(source)), (target, *sidecar_files(target)),
                        strict=True):
        if src.exists():
            src.rename(dst)


def held_config_serial(paths: Paths) -> int:
    """The serial of the configuration this node holds: the store on the master, the
    replica on a master candidate (0: none). Blocking: it reads SQLite."""
    return _serial(paths.config_db if _is_master(paths) else paths.config_replica)


async def master_info(paths: Paths, args: NoArgs) -> dict[str, Any]:
    """This node's role and the serials of what it holds."""
    master = _is_master(paths)
    config = paths.config_db if master else paths.config_replica
    jobs = paths.jobs_db if master else paths.jobs_replica
    return {"master": master, "config_serial": _serial(config), "jobs_serial": _serial(jobs)}


async def replica_dump(paths: Paths, args: NoArgs) -> dict[str, Any]:
    """Snapshots of this node's configuration and job queue replicas."""
    if _is_master(paths):
        raise OpPrereqError("this node is the master: its state reaches the candidates by "
                            "replication, not by a dump")
    if not paths.config_replica.exists():
        raise OpPrereqError("this node has no configuration replica (not a master "
                            "candidate?)")
    replication.close_replicas()
    store = ConfigStore.open(paths.config_replica)
    try:
        config = snapshot_args(store)
    finally:
        store.close()
    jobs = JobReplica.open(paths.jobs_replica)
    try:
        serial, rows = jobs.dump()
    finally:
        jobs.close()
    return {"config": config, "jobs": job_snapshot_args(serial, rows)}


async def master_demote(paths: Paths, args: MasterDemoteArgs) -> dict[str, Any]:
    """Stop being the master: hand the job queue over to ``new_master`` if given, stop
    the master-only daemons, keep the files as replicas (confd restarts on the
    replica)."""
    handover: dict[str, Any] | None = None
    if args.new_master is not None:
        handover = await _hand_over(paths, args.new_master, args.handover_wait)
    stopped = await _stop(paths, ("master", "candidate"))
    if _is_master(paths):
        replication.close_replicas()
        _move(paths.jobs_db, paths.jobs_replica)
        _move(paths.config_db, paths.config_replica)
    await _start_confd(paths)
    return {"stopped": stopped, "handover": handover, **await master_info(paths, NoArgs())}


async def _hand_over(paths: Paths, new_master: str, wait: float) -> dict[str, Any]:
    """Ask this node's master daemon to hand its job queue over (see the module doc);
    its answer, or ``{"error": ...}`` when it cannot (then stopping it leaves its
    running jobs to the new master's crash recovery, as before)."""
    if running_pid(paths.pid_file("masterd")) is None:
        return {"error": "the master daemon is not running"}
    client = AsyncClient(paths.master_socket)
    try:
        async with asyncio.timeout(wait + _HANDOVER_MARGIN):
            answer = await client.call(HANDOVER_METHOD, new_master, wait)
    except TimeoutError:
        return {"error": f"the master daemon did not hand over within "
                         f"{wait + _HANDOVER_MARGIN:g} s"}
    except CorralError as err:
        log.warning("master daemon handover failed: %s", err.message)
        return {"error": err.message}
    finally:
        await client.close()
    return dict(answer) if isinstance(answer, dict) else {"error": f"odd answer {answer!r}"}


async def _stop(paths: Paths, roles: tuple[str, ...]) -> list[str]:
    """Stop this node's daemons that run on ``roles``; the names of those stopped."""
    stopped = []
    for daemon in reversed(daemons.DAEMONS):
        if daemon.runs_on in roles:
            pid = await asyncio.to_thread(stop_daemon, paths.pid_file(daemon.name))
            if pid is not None:
                stopped.append(daemon.name)
    return stopped


async def _start_confd(paths: Paths) -> None:
    try:
        await asyncio.to_thread(daemons.start, paths, {"confd"})
    except CorralError as err:
        log.warning("cannot start confd: %s", err.message)


async def master_takeover(paths: Paths, args: NoArgs) -> dict[str, Any]:
    """Become the master with the replicas this node holds."""
    if _is_master(paths):
        raise OpPrereqError("this node is the master already")
    if not paths.config_replica.exists():
        raise OpPrereqError("this node has no configuration replica: only a master "
                            "candidate can become the master")
    try:
        membership = serializer.loads(paths.node_membership.read_bytes())
        node_name = str(membership["node_name"])
    except (OSError, ValueError, KeyError) as err:
        raise OpPrereqError(f"cannot tell which node this is from "
                            f"{paths.node_membership}: {err}") from None
    await _stop(paths, ("candidate",))  # confd opens the store once it is there
    replication.close_replicas()
    _move(paths.config_replica, paths.config_db)
    _move(paths.jobs_replica, paths.jobs_db)
    try:
        store = ConfigStore.open(paths.config_db)
        try:
            node = store.get("node", node_name)
            async with store.transaction() as txn:
                cluster = txn.cluster()
                old_master = cluster.master_node
                cluster.master_node = node.uuid
                txn.update(cluster)
                if old_master != node.uuid:
                    # The old master stays a candidate; this node is one already.
                    me = txn.get("node", node.uuid)
                    me.master_candidate = True
                    txn.update(me)
            # corral-rapi starts here: its certificate must name this node.
            x509.ensure_self_signed(
                paths.rapi_cert, paths.rapi_key, cluster.name, [cluster.name, node.name],
                [ip for ip in (node.primary_ip, node.secondary_ip) if ip], x509.CERT_DAYS)
        finally:
            store.close()
    except BaseException:
        _move(paths.config_db, paths.config_replica)
        _move(paths.jobs_db, paths.jobs_replica)
        raise
    pids = await asyncio.to_thread(daemons.start, paths)
    membership["master_name"] = node_name
    paths.node_membership.write_text(serializer.dumps_pretty(membership) + "\n")
    return {"started": sorted(name for name in pids if name != "noded")}
