"""Master failover: make this master candidate the master (``gnt-cluster master-failover``).

Run on the candidate that is to take over, with no master daemon involved (the old
master may be dead). The steps, all through the node daemons (mutual TLS with this
node's certificate):

1. From this node's configuration replica, find the master candidates and ask each
   for its role and the serials of the configuration and job queue it holds.
   Unless ``no_voting``, a majority of the candidates (this one included) must
   answer, so that two halves of a split cluster cannot both elect a master.
2. If the old master answers, demote it. Its master daemon first hands the job
   queue over: it refuses new jobs, lets the running opcodes finish (for at most
   ``handover_wait`` seconds; an opcode still running then is interrupted and
   ends in error saying so) and leaves every unfinished job queued, with its
   finished opcodes recorded. Then its master daemon and RAPI stop (pushing their
   last changes to the candidates) and its files become replicas. No job is lost:
   the new master continues every one that is not finished.
3. Take the newest state: if another node holds a newer configuration or job queue
   than this one (the old master killed before it could push its last commit, say),
   copy its replicas here first.
4. Turn this node's replicas into the store and the queue, record it as the master
   and start the master daemon and RAPI here. The new master then brings every
   other candidate, the old master included, up to date by replication.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral import serializer
from corral.config import ConfigStore
from corral.errors import OpPrereqError, ParameterError
from corral.noded.master_role import DEFAULT_HANDOVER_WAIT
from corral.objects import Node
from corral.paths import Paths
from corral.rpc.chunks import call_in_parts
from corral.rpc.client import RpcClient, Target
from corral.rpc.protocol import RpcResult

__all__ = ["DEFAULT_HANDOVER_WAIT", "FailoverResult", "master_failover"]

Feedback = Callable[[str], None]


@dataclass
class FailoverResult:
    """What a failover did."""

    old_master: str
    new_master: str
    voters: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    copied_from: str | None = None
    #: The jobs the old master left unfinished (the new master continues them).
    handed_over: list[int] = field(default_factory=list)
    #: The jobs whose running opcode the handover had to interrupt.
    interrupted: list[int] = field(default_factory=list)


def _my_name(paths: Paths) -> str:
    try:
        return str(serializer.loads(paths.node_membership.read_bytes())["node_name"])
    except (OSError, ValueError, KeyError) as err:
        raise OpPrereqError(f"this node belongs to no cluster ({paths.node_membership}: "
                            f"{err})") from None


def _read_replica(paths: Paths) -> tuple[list[Node], str, int]:
    """The nodes, the recorded master's name and the noded port from the replica."""
    if paths.config_db.exists():
        raise OpPrereqError("this node is the master already")
    if not paths.config_replica.exists():
        raise OpPrereqError(f"this node has no configuration replica "
                            f"({paths.config_replica}): only a master candidate can take "
                            "over")
    store = ConfigStore.open(paths.config_replica)
    try:
        nodes = list(store.all("node"))
        return nodes, store.master_name, store.cluster.noded_port
    finally:
        store.close()


#: Seconds a demotion may take beyond the handover wait (storing, replicating, stopping).
_DEMOTE_MARGIN = 90.0


def _report_handover(demoted: Any, result: FailoverResult, feedback: Feedback) -> None:
    handover = demoted.get("handover") if isinstance(demoted, dict) else None
    if not isinstance(handover, dict):
        return
    if "error" in handover:
        feedback(f"The old master could not hand its jobs over ({handover['error']}): "
                 "jobs it was running end in error on the new master")
        return
    result.handed_over = [int(job) for job in handover.get("unfinished", [])]
    result.interrupted = [int(job) for job in handover.get("interrupted", [])]
    feedback(f"{len(result.handed_over)} unfinished job(s) handed over; they continue on "
             f"{result.new_master}")
    if result.interrupted:
        feedback(f"Interrupted after the wait, ended in error: job(s) "
                 f"{', '.join(map(str, result.interrupted))}")


def _serials(info: Any) -> tuple[int, int]:
    if not isinstance(info, dict):
        return (0, 0)
    return (int(info.get("config_serial", 0)), int(info.get("jobs_serial", 0)))


async def master_failover(paths: Paths, *, no_voting: bool = False,
                          handover_wait: float = DEFAULT_HANDOVER_WAIT,
                          feedback: Feedback = lambda _text: None) -> FailoverResult:
    """Make this node the master (see the module doc); raises a
    :class:`~corral.errors.CorralError` saying why when it cannot.

    ``handover_wait`` bounds how long the old master lets running opcodes finish.
    """
    if handover_wait < 0:
        raise ParameterError(f"the handover wait must be seconds >= 0, got {handover_wait}")
    me = _my_name(paths)
    nodes, old_master, port = _read_replica(paths)
    by_name = {node.name: node for node in nodes}
    if me not in by_name or not by_name[me].master_candidate:
        raise OpPrereqError(f"node {me} is not a master candidate; promote it first "
                            "(gnt-node modify -C yes) while the master runs")
    if not paths.master_client_cert.exists():
        raise OpPrereqError(
            f"node {me} lacks the master's client certificate ({paths.master_client_cert}): "
            "node daemons take changes only from it, so this node could not act as the "
            "master. While the master runs, 'gnt-cluster redistribute-conf' gives it to "
            "every master candidate")
    candidates = [n for n in nodes if n.master_candidate and not n.offline]
    if by_name.get(old_master) and by_name[old_master] not in candidates:
        candidates.append(by_name[old_master])
    targets: dict[str, Target] = {n.name: (n.name, n.primary_ip, port) for n in candidates}
    client = RpcClient(paths)
    try:
        answers = await client.call(list(targets.values()), "master_info", {}, timeout=10)
        infos = {name: r.payload for name, r in answers.items() if r.error is None}
        result = FailoverResult(old_master=old_master, new_master=me,
                                voters=sorted(infos),
                                unreachable=sorted(set(targets) - set(infos)))
        if me not in infos:
            raise OpPrereqError(f"this node's own node daemon does not answer: "
                                f"{answers[me].error}")
        feedback(f"{len(infos)} of {len(targets)} master candidates answered"
                 + (f" (not: {', '.join(result.unreachable)})" if result.unreachable else ""))
        if not no_voting and len(infos) * 2 <= len(targets):
            raise OpPrereqError(
                f"only {len(infos)} of {len(targets)} master candidates answered; a majority "
                "is needed so that a split cluster cannot elect two masters. If the others "
                "are really down, use --no-voting")
        if old_master != me and old_master in infos:
            feedback(f"Demoting the old master {old_master}: it takes no new jobs and "
                     f"lets running opcodes finish (waiting up to {handover_wait:g} s)")
            demoted = await client.call(
                [targets[old_master]], "master_demote",
                {"new_master": me, "handover_wait": handover_wait},
                timeout=handover_wait + _DEMOTE_MARGIN)
            infos[old_master] = demoted[old_master].get(f"demoting {old_master}")
            _report_handover(infos[old_master], result, feedback)
            # The handover replicated the jobs' final states: ask again what the
            # others hold now, so that a copy is made only when one is missing.
            others = [targets[name] for name in infos if name != old_master]
            for name, answer in (await client.call(others, "master_info", {}, timeout=10)
                                 ).items():
                if answer.error is None:
                    infos[name] = answer.payload
        elif old_master != me:
            feedback(f"The old master {old_master} does not answer; it will not know it "
                     "was replaced: keep it down or run master-failover there later")
        newest = max(infos, key=lambda name: (_serials(infos[name]), name == me))
        if _serials(infos[newest]) > _serials(infos[me]):
            feedback(f"Copying the newer configuration and job queue of {newest}")
            dump = (await client.call([targets[newest]], "replica_dump", {}, timeout=120)
                    )[newest].get(f"reading the replicas of {newest}")
            for procedure, payload in (("config_replicate", dump["config"]),
                                       ("jobs_replicate", dump["jobs"])):
                async def call(args: dict[str, Any], procedure: str = procedure) -> RpcResult:
                    return (await client.call([targets[me]], procedure, args, timeout=120)
                            )[me]
                (await call_in_parts(call, payload)).get("storing the newest state here")
            result.copied_from = newest
        feedback(f"Starting the master daemon on {me}")
        (await client.call([targets[me]], "master_takeover", {}, timeout=120)
         )[me].get(f"taking over the master role on {me}")
        return result
    finally:
        await client.close()
