"""One watcher pass on this node (``corral-watcher``).

Every node: start the corral daemons this node should run that are not running
(the node daemon, confd, mond; masterd and RAPI on the master) and run the stale
state cleaners (:mod:`corral.watcher.cleanup`). On the master also:

- **restart** every instance whose administrator wants it up and that is found down
  (status ``ERROR_down``), as a job of ``OP_INSTANCE_STARTUP`` whose reason trail
  starts with ``("gnt:watcher", "Restarting instance NAME")``. At most
  :data:`MAX_ATTEMPTS` attempts per instance, each after a longer wait than the last
  (:func:`backoff`); the counter starts again once the instance runs. An instance
  stopped through corral (admin state ``down``) is never touched, and one whose lock a
  job holds is skipped for this pass, with a line saying so;
- **re-activate disks** of instances on a node whose boot id changed since the last
  pass (it rebooted), when their disks should be active and they were not restarted;
- **archive** finished jobs older than the cluster's ``job_archive_age`` (6 hours
  unless ``gnt-cluster modify --job-archive-age`` says otherwise; Ganeti's watcher
  option ``--job-age`` overrides it for one run).

With privilege separation (:mod:`corral.daemon_users`) the watcher starts as root
(from cron or a timer), starts the daemons and runs the cleaners, then drops to its
own user for the rest: the master's work goes through luxi as a member of the admin
group, and its memory lives in its own directory.

Two watchers never run at once on a node (the lock file), and a paused watcher
(``gnt-cluster watcher pause``) does nothing unless told to ignore the pause.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral import daemon_users, daemons
from corral.errors import CorralError, DaemonError
from corral.paths import Paths
from corral.utils.process import PidFile, drop_privileges, running_pid
from corral.watcher import cleanup
from corral.watcher.pause import paused_until
from corral.watcher.state import WatcherState

__all__ = ["DEFAULT_JOB_AGE", "MAX_ATTEMPTS", "Options", "Report", "backoff", "run_pass"]

log = logging.getLogger("corral.watcher")

#: Restart attempts per instance before the watcher gives up on it (Ganeti's).
MAX_ATTEMPTS = 5
#: The wait before the second attempt; each later one waits twice as long.
BACKOFF_BASE = 60.0
#: The longest wait between two attempts.
BACKOFF_MAX = 3600.0
#: Finished jobs older than this many seconds are archived (Ganeti's default).
DEFAULT_JOB_AGE = 6 * 3600
#: How long a pass waits for the jobs it submitted.
JOB_WAIT = 600.0


def backoff(attempts: int) -> float:
    """Seconds to wait after attempt number ``attempts`` before the next one: none
    before the first, then 60 s, 120 s, 240 s ... at most an hour."""
    if attempts <= 0:
        return 0.0
    return float(min(BACKOFF_BASE * 2 ** (attempts - 1), BACKOFF_MAX))


@dataclass(frozen=True)
class Options:
    """How a pass runs (``corral-watcher``'s options)."""

    job_age: float | None = None
    """Archive jobs finished longer ago than this (seconds); ``None``: the cluster's
    ``job_archive_age`` (``gnt-cluster modify --job-archive-age``)."""
    ignore_pause: bool = False
    wait_for_jobs: float = JOB_WAIT


@dataclass
class Report:
    """What one pass did (logged, and returned for tests and the benchmark)."""

    paused_until: float | None = None
    locked_out: bool = False
    master: bool = False
    daemons_started: dict[str, int] = field(default_factory=dict)
    cleaned: list[str] = field(default_factory=list)
    restarted: dict[str, str] = field(default_factory=dict)
    """Instance -> how its restart job ended (``success``, ``error`` ...)."""
    skipped_locked: list[str] = field(default_factory=list)
    backing_off: list[str] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)
    disks_activated: list[str] = field(default_factory=list)
    rebooted_nodes: list[str] = field(default_factory=list)
    archived: int = 0


def run_pass(paths: Paths, options: Options = Options(),
             now: Callable[[], float] = time.time) -> Report:
    """One pass of the watcher on the node ``paths`` belongs to."""
    report = Report()
    report.paused_until = paused_until(paths.watcher_pause_file, now())
    if report.paused_until is not None and not options.ignore_pause:
        log.info("the watcher is paused until %s: nothing to do",
                 time.ctime(report.paused_until))
        return report
    try:
        lock = PidFile(paths.watcher_lock_file)
    except DaemonError as err:
        log.warning("another watcher runs on this node (%s): this one stops", err.message)
        report.locked_out = True
        return report
    try:
        report.daemons_started = _ensure_daemons(paths)
        report.cleaned = cleanup.run_cleaners(paths)
        _drop_privileges(paths, lock)
        if paths.config_db.exists():
            report.master = True
            state = WatcherState.load(paths.watcher_state_file)
            _master_pass(paths, options, state, report, now)
            state.save(paths.watcher_state_file)
    finally:
        lock.remove()
    return report


def _drop_privileges(paths: Paths, lock: PidFile) -> None:
    """With privilege separation, what needs root is done (starting daemons, the
    cleaners): go on as the watcher's own user, a luxi client of the master (admin
    group) that writes only its state directory. Its lock file becomes its own, so
    that it can remove it from the sticky run directory."""
    users = daemon_users.read_daemon_users(paths)
    if users is None or os.geteuid() != 0:
        return
    cred = daemon_users.credentials(users, "watcher")
    lock.chown(cred.uid, cred.gid)
    drop_privileges(cred.user, users.group("watcher"), daemon="watcher")


def _ensure_daemons(paths: Paths) -> dict[str, int]:
    """Start, one by one, the daemons this node should run that do not run; their
    new pids. One that cannot start is logged and the others still are."""
    started: dict[str, int] = {}
    for name, pid in daemons.status(paths).items():
        if pid is not None:
            continue
        log.warning("corral-%s is not running: starting it", name)
        failed: dict[str, str] = {}
        try:
            started.update(daemons.start(paths, only={name}, failed=failed))
        except CorralError as err:
            failed[name] = err.message
        for daemon, reason in failed.items():
            log.error("cannot start corral-%s: %s", daemon, reason)
    return started


def _rows(client: Any, what: str, fields: list[str], qfilter: Any = None
          ) -> list[dict[str, Any]]:
    answer = client.call("Query", what, fields, qfilter)
    return [{name: value for name, (_status, value) in zip(fields, row, strict=True)}
            for row in answer["data"]]


def _locked_instances(client: Any) -> set[str]:
    """Instances whose lock a job holds now (they are skipped this pass)."""
    locked = set()
    for lock in _rows(client, "lock", ["name", "mode"]):
        name = str(lock["name"])
        if name.startswith("instance/") and lock["mode"]:
            locked.add(name.removeprefix("instance/"))
    return locked


def _master_pass(paths: Paths, options: Options, state: WatcherState, report: Report,
                 now: Callable[[], float]) -> None:
    from corral.luxi.client import Client  # the watcher is a client of the master

    if running_pid(paths.pid_file("masterd")) is None:
        log.error("the master daemon does not run and could not be started: no instance "
                  "is looked after in this pass")
        return
    with Client(paths.master_socket) as client:
        locked = _locked_instances(client)
        instances = _rows(client, "instance",
                          ["name", "status", "admin_state", "pnode", "disks_active"])
        nodes = _rows(client, "node", ["name", "bootid", "offline"])
        restarts = _plan_restarts(instances, locked, state, report, now())
        report.restarted = _run_jobs(client, restarts, options.wait_for_jobs)
        for name, status in report.restarted.items():
            if status == "success":
                log.info("restart of instance %s succeeded", name)
            else:
                log.warning("restart of instance %s ended %s", name, status)
        activations = _plan_disk_activations(instances, nodes, locked, state, report)
        for name, status in _run_jobs(client, activations, options.wait_for_jobs).items():
            if status == "success":
                report.disks_activated.append(name)
            else:
                log.warning("activating the disks of instance %s ended %s", name, status)
        age = options.job_age
        if age is None:
            (age,) = client.call("QueryConfigValues", ["job_archive_age"])
        archived = client.call("AutoArchiveJobs", float(age), 30.0)
        report.archived = int(archived[0]) if isinstance(archived, list) else 0
        if report.archived:
            log.info("archived %d job(s) older than %d s", report.archived, age)


def _op(op_id: str, name: str, text: str) -> dict[str, Any]:
    from corral.opcodes.reason import watcher_entry

    return {"OP_ID": op_id, "instance_name": name, "reason": [list(watcher_entry(text))]}


def _plan_restarts(instances: list[dict[str, Any]], locked: set[str], state: WatcherState,
                   report: Report, when: float) -> dict[str, dict[str, Any]]:
    """The startup opcodes to submit, by instance; counters of running ones reset."""
    ops: dict[str, dict[str, Any]] = {}
    for inst in instances:
        name, status = inst["name"], inst["status"]
        if status != "ERROR_down":
            if state.attempts(name).count and status == "running":
                log.info("instance %s runs again", name)
            if status in ("running", "ADMIN_down", "ADMIN_offline"):
                state.forget(name)
            continue
        if name in locked:
            log.info("instance %s should run but is down; it is locked by a job: "
                     "skipped in this pass", name)
            report.skipped_locked.append(name)
            continue
        attempts = state.attempts(name)
        if attempts.count >= MAX_ATTEMPTS:
            if attempts.count == MAX_ATTEMPTS:
                log.error("could not restart instance %s after %d attempts: giving up "
                          "until it runs again", name, MAX_ATTEMPTS)
                state.record_attempt(name, attempts.last)  # said once
            report.given_up.append(name)
            continue
        wait = backoff(attempts.count) - (when - attempts.last)
        if wait > 0:
            log.info("instance %s is down; next restart attempt in %.0f s", name, wait)
            report.backing_off.append(name)
            continue
        count = state.record_attempt(name, when).count
        log.info("restarting instance %s (attempt %d of %d)", name, count, MAX_ATTEMPTS)
        ops[name] = _op("OP_INSTANCE_STARTUP", name, f"Restarting instance {name}")
    return ops


def _plan_disk_activations(instances: list[dict[str, Any]], nodes: list[dict[str, Any]],
                           locked: set[str], state: WatcherState,
                           report: Report) -> dict[str, dict[str, Any]]:
    """Disk activations for instances on nodes that rebooted since the last pass."""
    rebooted: set[str] = set()
    for node in nodes:
        boot_id = node["bootid"]
        if node["offline"] or not isinstance(boot_id, str) or not boot_id:
            continue
        if state.boot_ids.get(node["name"]) != boot_id:
            rebooted.add(node["name"])
            state.boot_ids[node["name"]] = boot_id
    report.rebooted_nodes = sorted(rebooted)
    ops: dict[str, dict[str, Any]] = {}
    for inst in instances:
        name = inst["name"]
        if (inst["pnode"] not in rebooted or not inst["disks_active"]
                or inst["status"] == "running" or name in report.restarted):
            continue
        if name in locked:
            log.info("instance %s is on rebooted node %s but locked by a job: its disks "
                     "are not activated in this pass", name, inst["pnode"])
            continue
        log.info("node %s rebooted: activating the disks of instance %s", inst["pnode"], name)
        ops[name] = _op("OP_INSTANCE_ACTIVATE_DISKS", name,
                        f"Activating disks for instance {name}")
    return ops


def _run_jobs(client: Any, ops: dict[str, dict[str, Any]], wait: float) -> dict[str, str]:
    """Submit one job per opcode at once, wait for them; each one's final status."""
    if not ops:
        return {}
    names = list(ops)
    answers = client.call("SubmitManyJobs", [[ops[name]] for name in names])
    job_ids: dict[int, str] = {}
    outcome: dict[str, str] = {}
    for name, (ok, value) in zip(names, answers, strict=True):
        if ok:
            job_ids[int(value)] = name
        else:
            log.error("could not submit the job for instance %s: %s", name, value)
            outcome[name] = "refused"
    deadline = time.monotonic() + wait
    pending = dict(job_ids)
    while pending:
        rows = client.call("QueryJobs", list(pending), ["id", "status"])
        for job_id, status in (row for row in rows if row is not None):
            if status in ("success", "error", "canceled"):
                outcome[pending.pop(int(job_id))] = status
        if not pending or time.monotonic() > deadline:
            break
        first = next(iter(pending))
        # Wait for a change of one unfinished job rather than polling in a loop.
        client.call("WaitForJobChange", first, ["status"], None, None,
                    min(10.0, max(0.1, deadline - time.monotonic())))
    for name in pending.values():
        outcome[name] = "still running"
    return outcome
