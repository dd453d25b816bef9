"""The luxi methods the master daemon answers, each a small coroutine.

Method names, arguments and answers are Ganeti's (``SubmitJob``, ``WaitForJobChange``,
``Query``, ``ReplaceFilter`` ...) so existing tools read the same. Changes to job
filters and the drain flag bypass the queue (seed 000: queue control must never wait
behind the jobs it controls).
"""

from __future__ import annotations

import asyncio
import logging
import uuid as _uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from corral.cmdlib.cluster import cluster_info
from corral.cmdlib.query import FILTER_FIELDS, find_resource
from corral.cmdlib.tags import object_tags
from corral.config import ConfigStore
from corral.errors import (
    CorralError,
    NodeUnreachableError,
    NotFoundError,
    OsNotFoundError,
    ParameterError,
    ProtocolError,
    UnknownFieldError,
    did_you_mean,
)
from corral.jobs import JobQueue
from corral.jobs.fields import JOB_QUERY_FIELDS, query_jobs_by_id, requested_job_ids
from corral.jobs.filters import validate_rule
from corral.jobs.queue import SUBMIT_BATCH
from corral.luxi import Request, calls
from corral.luxi.protocol import HANDOVER_METHOD
from corral.masterd.state import MasterState
from corral.objects import Cluster, FilterRule
from corral.opcodes import OpCode, check_submitted_trail, op_from_dict
from corral.opcodes.checks import REFERENCES
from corral.opcodes.reason import CLIENT_PREFIX, RAPI_LIBRARY_PREFIX, WATCHER_SOURCE
from corral.rpc.protocol import RpcResult
from corral.utils.recent import RecentAnswers
from corral.watcher.pause import paused_until

__all__ = ["WFJC_MAX_TIMEOUT", "MasterMethods"]

log = logging.getLogger(__name__)

#: A method: takes its decoded arguments (a :mod:`corral.luxi.calls` Struct).
Method = Callable[[Any], Awaitable[Any]]

#: Config values with a name of their own; every Cluster field is available too.
_DERIVED_VALUES = ("cluster_name", "master_node", "config_serial", "default_hypervisor",
                   "drain_flag", "watcher_pause")

#: Seconds the submission check waits for a node to say whether it has an OS.
OS_CHECK_TIMEOUT = 10.0
#: Seconds a node's "I have this OS" answer is trusted for later submissions. Creating
#: many instances of one OS then asks each node once, not once per job; an OS removed
#: meanwhile is still caught by the logical unit, which asks again.
OS_SEEN_TTL = 60.0

#: Opcodes that make a node or group that later opcodes of the same job may name.
_CREATES = {"OP_NODE_ADD": ("node", "node_name"), "OP_GROUP_ADD": ("nodegroup", "group_name"),
            "OP_GROUP_RENAME": ("nodegroup", "new_name")}

#: The ``gnt:`` sources a luxi client may add for itself: the CLI tools' and RAPI's
#: (``gnt:client:``), RAPI's request library's and the watcher's.
_CLIENT_SOURCES = (CLIENT_PREFIX, RAPI_LIBRARY_PREFIX, WATCHER_SOURCE)

#: Longest a WaitForJobChange call waits before answering "nochange" (seconds).
WFJC_MAX_TIMEOUT = 30.0


def _job_id(value: int | str) -> int:
    """Job ids arrive as ints or as decimal strings (RAPI paths, old clients); the
    argument types (:data:`corral.luxi.calls.JobId`) admit nothing else."""
    return int(value)


def parse_ops(ops: Any, where: str = "job") -> list[OpCode]:
    """Validate a submitted job: a non-empty list of opcodes with acceptable reasons."""
    if not isinstance(ops, list) or not ops:
        raise ParameterError(f"{where}: expected a non-empty list of opcodes, got {ops!r}")
    result = []
    for index, data in enumerate(ops):
        try:
            op = op_from_dict(data)
            op.reason = list(check_submitted_trail(op.reason, allowed_internal=_CLIENT_SOURCES))
        except ParameterError as err:
            raise type(err)(f"{where}, opcode {index}: {err.message}") from None
        result.append(op)
    return result


class MasterMethods:
    """Dispatches luxi requests to the master daemon's state."""

    def __init__(self, state: MasterState) -> None:
        self.state = state
        #: Nodes' answers that they have an OS (see :data:`OS_SEEN_TTL`).
        self._os_found: RecentAnswers[tuple[str, str, tuple[str, ...]], RpcResult] = \
            RecentAnswers(OS_SEEN_TTL, keep=lambda answer: answer.error is None)
        self._methods: dict[str, Method] = {
            "QueryClusterInfo": self.query_cluster_info,
            "QueryConfigValues": self.query_config_values,
            "QueryTags": self.query_tags,
            "SubmitJob": self.submit_job,
            "SubmitManyJobs": self.submit_many_jobs,
            "WaitForJobChange": self.wait_for_job_change,
            "CancelJob": self.cancel_job,
            "ArchiveJob": self.archive_job,
            "AutoArchiveJobs": self.auto_archive_jobs,
            "ChangeJobPriority": self.change_job_priority,
            "QueryJobs": self.query_jobs,
            "Query": self.query,
            "QueryFields": self.query_fields,
            "QueryFilters": self.query_filters,
            "ReplaceFilter": self.replace_filter,
            "DeleteFilter": self.delete_filter,
            "SetDrainFlag": self.set_drain_flag,
            "SetWatcherPause": self.set_watcher_pause,
            HANDOVER_METHOD: self.prepare_handover,
            "Placement": self.placement,
        }
        assert self._methods.keys() == calls.CALLS.keys(), "every luxi method has its types"

    @property
    def store(self) -> ConfigStore:
        """The configuration."""
        return self.state.store

    @property
    def queue(self) -> JobQueue:
        """The job queue."""
        return self.state.queue

    async def dispatch(self, request: Request) -> Any:
        """Run the method ``request`` names."""
        method = self._methods.get(request.method)
        if method is None:
            raise ProtocolError(
                f"unknown luxi method '{request.method}'; known: {', '.join(sorted(self._methods))}"
            )
        args = calls.decode_args(request.method, calls.CALLS[request.method], request.args)
        return await method(args)

    # -- cluster --------------------------------------------------------------------

    async def query_cluster_info(self, args: calls.QueryClusterInfo) -> dict[str, Any]:
        """``QueryClusterInfo()``: the cluster's settings with Ganeti's keys."""
        return cluster_info(self.store.cluster, self.store.master_name, self.store.serial)

    async def query_config_values(self, args: calls.QueryConfigValues) -> list[Any]:
        """``QueryConfigValues(fields)``: selected values, in the order asked."""
        cluster = self.store.cluster
        values: list[Any] = []
        for field in args.fields:
            if field == "cluster_name":
                values.append(cluster.name)
            elif field == "master_node":
                values.append(self.store.master_name)
            elif field == "config_serial":
                values.append(self.store.serial)
            elif field == "default_hypervisor":
                values.append(cluster.default_hypervisor)
            elif field == "drain_flag":
                values.append(self.queue.drained)
            elif field == "watcher_pause":
                values.append(self._watcher_pause())
            elif field in Cluster.__struct_fields__:
                values.append(msgspec.to_builtins(getattr(cluster, field)))
            else:
                hint = did_you_mean(
                    field, sorted({*_DERIVED_VALUES, *Cluster.__struct_fields__}))
                raise UnknownFieldError(f"unknown configuration value {field!r}; {hint}")
        return values

    async def query_tags(self, args: calls.QueryTags) -> list[str]:
        """``QueryTags(kind, name)``: tags of the cluster, a node, a node group or an
        instance (the name may be a UUID)."""
        return object_tags(self.store, args.kind, args.name)

    # -- jobs -------------------------------------------------------------------------

    async def submit_job(self, args: calls.SubmitJob) -> int:
        """``SubmitJob(ops)``: queue one job; its id once it is durable."""
        ops = parse_ops(args.ops)
        await self.check_references(ops)
        return await self.queue.submit(ops)

    async def submit_many_jobs(self, args: calls.SubmitManyJobs
                               ) -> list[tuple[bool, int | str]]:
        """``SubmitManyJobs(jobs)``: queue several jobs; ``[success, id or message]`` each.

        Opcodes are checked for every job before any is queued, so a malformed job
        refuses the whole call (negative dependencies count positions in it).
        """
        jobs: list[list[OpCode]] = []
        for index, raw in enumerate(args.jobs):
            if index and index % SUBMIT_BATCH == 0:
                await asyncio.sleep(0)  # hundreds of jobs: let the loop serve others
            jobs.append(parse_ops(raw, f"job {index}"))
        for index, parsed in enumerate(jobs):
            await self.check_references(parsed, f"job {index}")
        return await self.queue.submit_many(jobs)

    async def check_references(self, ops: list[OpCode], where: str = "job") -> None:
        """Refuse a job whose parameters name nodes, node groups or OSes that do not
        exist (:data:`corral.opcodes.checks.REFERENCES`), before it is queued.

        Names are looked up in the configuration the master holds (a dict look-up
        each); an OS is asked of the node the opcode installs on, only when an opcode
        names one. A job that depends on other jobs is not checked (they may create
        what it names); names made by earlier opcodes of the job count as existing.
        Whatever cannot be decided here (a node that does not answer) is left to the
        logical unit.
        """
        if any(op.depends for op in ops):
            return
        created: set[tuple[str, str]] = set()
        for index, op in enumerate(ops):
            for param, what in REFERENCES.get(op.OP_ID, {}).items():
                value = getattr(op, param)
                if value is None or value == "" or value == []:
                    continue
                prefix = f"{where}, opcode {index}: {op.OP_ID}: parameter '{param}'"
                if what == "os":
                    await self._check_os(op, str(value), prefix)
                    continue
                kind = "node" if what in ("node", "nodes") else "nodegroup"
                for name in value if isinstance(value, list) else [value]:
                    if (kind, name) in created or self.store.find(kind, name) is not None:
                        continue
                    noun = "node" if kind == "node" else "node group"
                    known = sorted(obj.name for obj in self.store.all(kind))
                    hint = did_you_mean(name, known, noun=f"{noun}s",
                                        listing=f"gnt-{'node' if kind == 'node' else 'group'} list")
                    raise ParameterError(f"{prefix}: no {noun} {name!r} in the cluster (by "
                                         f"name or UUID); {hint}")
            made = _CREATES.get(op.OP_ID)
            if made is not None:
                created.add((made[0], getattr(op, made[1])))

    async def _check_os(self, op: OpCode, os_name: str, prefix: str) -> None:
        """Refuse an OS the node the opcode installs on does not have."""
        node = None
        if op.OP_ID == "OP_INSTANCE_CREATE":
            key = getattr(op, "pnode", None) or getattr(op, "pnode_uuid", None)
            node = self.store.find("node", key) if key else None
        else:
            inst = self.store.find("instance", getattr(op, "instance_name", ""))
            node = self.store.find("node", inst.primary_node) if inst is not None else None
        if node is None or node.offline:
            return  # nothing to ask; the logical unit reports what is wrong
        base = os_name.partition("+")[0]
        search_path = list(self.store.cluster.os_search_path)

        async def ask() -> RpcResult:
            results = await self.state.context.rpc.call(
                [node], "os_get", {"name": base, "search_path": search_path},
                timeout=OS_CHECK_TIMEOUT)
            return results[node.name]

        try:
            answer = await self._os_found.get((node.name, base, tuple(search_path)), ask)
        except CorralError:
            return
        if isinstance(answer.error, OsNotFoundError):
            raise ParameterError(f"{prefix}: node {node.name} has no OS {base!r}: "
                                 f"{answer.error.message}")

    async def wait_for_job_change(self, args: calls.WaitForJobChange) -> Any:
        """``WaitForJobChange(id, fields, prev_info, prev_serial, timeout)``."""
        return await self.queue.wait_for_change(
            _job_id(args.job_id), args.fields, args.prev_job_info, args.prev_log_serial,
            min(args.timeout, WFJC_MAX_TIMEOUT))

    async def cancel_job(self, args: calls.CancelJob) -> tuple[bool, str]:
        """``CancelJob(id[, kill])``: cancel a queued or waiting job."""
        if args.kill:
            raise ParameterError(
                "CancelJob: killing a running job is not supported; only queued and waiting "
                "jobs can be canceled"
            )
        return await self.queue.cancel(_job_id(args.job_id))

    async def archive_job(self, args: calls.ArchiveJob) -> bool:
        """``ArchiveJob(id)``: move a finished job to the archive."""
        return await self.queue.archive(_job_id(args.job_id))

    async def auto_archive_jobs(self, args: calls.AutoArchiveJobs) -> tuple[int, int]:
        """``AutoArchiveJobs(age, timeout)``: archive jobs finished ``age`` seconds ago."""
        return await self.queue.auto_archive(args.age, args.timeout)

    async def change_job_priority(self, args: calls.ChangeJobPriority) -> tuple[bool, str]:
        """``ChangeJobPriority(id, priority)``."""
        return await self.queue.change_priority(_job_id(args.job_id), args.priority)

    async def query_jobs(self, args: calls.QueryJobs) -> list[list[Any] | None]:
        """``QueryJobs(ids or None, fields)``: plain rows, None for unknown ids."""
        ids = [_job_id(i) for i in args.job_ids] if args.job_ids else None
        return await self.queue.query(ids, args.fields)

    # -- generic queries ---------------------------------------------------------------

    async def query(self, args: calls.Query) -> dict[str, Any]:
        """``Query(what, fields, qfilter)``: Ganeti's QueryResponse."""
        what, fields, qfilter = args.what, args.fields, args.qfilter
        if what == "job":
            ids = requested_job_ids(qfilter)
            if ids:  # by id, as asked: archived jobs too, a row even for unknown ids
                found = {job.id: job for job in await self.queue.jobs(ids, archived=True)}
                return query_jobs_by_id(ids, found, fields)
            # Like Ganeti, asking for the "archived" field includes archived jobs.
            jobs = await self.queue.jobs(archived="archived" in fields)
            return JOB_QUERY_FIELDS.query(jobs, fields, qfilter, None)
        return await find_resource(what, self.state.context.queries, also=("job",)).query(
            fields, qfilter)

    async def query_fields(self, args: calls.QueryFields) -> dict[str, Any]:
        """``QueryFields(what, fields or None)``: Ganeti's QueryFieldsResponse."""
        what, fields = args.what, args.fields
        if what == "job":
            return JOB_QUERY_FIELDS.query_fields(fields)
        return find_resource(what, self.state.context.queries, also=("job",)).query_fields(
            fields)

    # -- job filters (bypass the queue) -----------------------------------------------

    async def query_filters(self, args: calls.QueryFilters) -> list[list[Any]]:
        """``QueryFilters(uuids or None, fields)``: rows of plain values."""
        fields = args.fields
        rules = self.store.all("filter")
        if args.uuids:
            wanted = args.uuids
            by_uuid = {rule.uuid: rule for rule in rules}
            missing = [u for u in wanted if u not in by_uuid]
            if missing:
                raise NotFoundError(f"filter(s) not found: {', '.join(missing)}")
            rules = [by_uuid[u] for u in wanted]
        return FILTER_FIELDS.values(rules, fields, None, None)

    async def replace_filter(self, args: calls.ReplaceFilter) -> str:
        """``ReplaceFilter(uuid, priority, predicates, action, reason)``: add or replace.

        The rule's watermark becomes the highest job id now; the rules are compiled
        and every queued, paused and running job is re-evaluated before answering.
        """
        uuid, priority, reason = args.uuid, args.priority, args.reason
        if uuid is not None:
            try:
                uuid = str(_uuid.UUID(uuid))
            except ValueError:
                raise ParameterError(f"invalid filter uuid {uuid!r}: expected a UUID such as "
                                     f"{_uuid.uuid4()}") from None
        predicates, action = validate_rule(priority, args.predicates, args.action)
        trail = [list(e) for e in check_submitted_trail(reason or [],
                                                        allowed_internal=_CLIENT_SOURCES)]
        existing = self.store.find("filter", uuid) if uuid is not None else None
        watermark = self.state.job_store.last_id
        async with self.store.transaction() as txn:
            if existing is not None:
                rule = txn.get("filter", existing.uuid)
                rule.priority, rule.predicates, rule.action = priority, predicates, action
                rule.reason_trail, rule.watermark = trail, watermark
                txn.update(rule)
            else:
                rule = FilterRule(priority=priority, predicates=predicates, action=action,
                                  reason_trail=trail, watermark=watermark)
                if uuid is not None:
                    rule.uuid = uuid
                txn.add(rule)
        await self.state.filters_changed()
        log.info("filter %s %s: priority %d, predicates %s, action %s", rule.uuid,
                 "replaced" if existing else "added", priority, predicates, action)
        return rule.uuid

    async def delete_filter(self, args: calls.DeleteFilter) -> None:
        """``DeleteFilter(uuid)``."""
        uuid = args.uuid
        if self.store.find("filter", uuid) is None:
            raise NotFoundError(f"filter {uuid!r} not found (gnt-filter list shows the filters)")
        async with self.store.transaction() as txn:
            txn.remove("filter", uuid)
        await self.state.filters_changed()
        log.info("filter %s deleted", uuid)

    async def set_drain_flag(self, args: calls.SetDrainFlag) -> None:
        """``SetDrainFlag(flag)``: while set, no new jobs are accepted."""
        await self.queue.set_drain(args.drain_flag)
        log.info("queue drain flag %s", "set" if args.drain_flag else "cleared")


    # -- watcher ------------------------------------------------------------------------

    def _watcher_pause(self) -> float | None:
        """Until when the watcher is paused (this node's pause file), or ``None``."""
        paths = self.state.paths
        return None if paths is None else paused_until(paths.watcher_pause_file)

    async def set_watcher_pause(self, args: calls.SetWatcherPause) -> float | None:
        """``SetWatcherPause(until)``: pause every node's watcher until ``until``
        (seconds since the epoch) or end the pause (``None``); answers ``until``.

        The pause file is written on every online node through its node daemon, so
        that each node's watcher honours it on its own; a node that does not answer
        is named in the error (the others keep the new pause).
        """
        nodes = [n for n in self.store.all("node") if not n.offline]
        results = await self.state.context.rpc.call(
            nodes, "set_watcher_pause", {"until": args.until}, timeout=30.0)
        failed = [f"{name}: {result.error.message}" for name, result in sorted(results.items())
                  if result.error is not None]
        if failed:
            raise NodeUnreachableError(
                "the watcher pause could not be set on every node ("
                + "; ".join(failed) + "); run the command again once they answer")
        log.info("watcher %s", f"paused until {args.until:.0f}" if args.until else "unpaused")
        return args.until

    # -- placement ----------------------------------------------------------------------

    async def placement(self, args: calls.Placement) -> dict[str, Any]:
        """``Placement(...)``: one ``/placement/`` REST request (see
        :mod:`corral.masterd.placement`): a change to what the cluster owns (a node's
        provider, an instance's consumer) is refused with 409; never while the
        cluster's sync changes the engine (the service's lock)."""
        derived = self.state.placement_sync
        if derived is not None:
            await derived.ready()
            refused = derived.refusal(args)
            if refused is not None:
                return refused
        return await self.state.placement.call(args, encoded=True)

    # -- master failover ----------------------------------------------------------------

    async def prepare_handover(self, args: calls.PrepareMasterHandover) -> dict[str, Any]:
        """``PrepareMasterHandover(new_master, wait)``: stop taking jobs, let running
        opcodes finish for at most ``wait`` seconds and leave the rest queued for the
        new master, its final state replicated (:meth:`MasterState.hand_over`).

        Sent by this node's daemon as ``gnt-cluster master-failover`` demotes it; the
        master daemon is stopped right after.
        """
        new_master, wait = args.new_master, args.wait
        log.info("master failover to %s: handing the job queue over (waiting up to %g s "
                 "for running opcodes)", new_master, wait)
        handover, replicated = await self.state.hand_over(new_master, wait)
        log.info("handed over %d unfinished job(s), interrupted %s, replicated: %s",
                 len(handover.unfinished), handover.interrupted or "none", replicated)
        return {"unfinished": handover.unfinished, "interrupted": handover.interrupted,
                "replicated": replicated}
