"""What a cluster must hold after any fault, and the record of what clients were told.

The fault tests drive a testbed, break something, let the operator's repair happen
(restart a daemon, fail over) and then call :func:`check_cluster`, which checks:

* **replicas**: every master candidate's configuration replica and job queue replica
  reach the master's serial and hold the same rows (replication is asynchronous, so
  this is waited for, up to a deadline);
* **jobs**: every job whose id a client got back is in the queue (live or archived),
  every job settles (none stays queued, waiting or running), and every job whose
  success a client saw is still ``success``;
* **changes**: every value recorded in the :class:`Ledger` reads back as one of the
  values it may have (an acknowledged change exactly; a change whose outcome the client
  never saw, the value before or after);
* **instances**: no instance runs on two nodes, none runs unknown to the
  configuration or away from its primary node, one that should run does (after the
  operator's repair: a watcher pass, and ``gnt-instance startup`` of one whose start
  or stop the fault hit), and one stopped by an acknowledged change does not run (the
  fake hypervisor's state files on every node against the configuration);
* **locks**: once no job is left, no lock is held or waited for (``gnt-debug locks``).

A violation raises :class:`InvariantViolation` listing every problem found; a pass
returns the list of what was checked, one line each, for the test to print.

Public API (small on purpose, helper suites reuse it): :class:`FaultCluster` (and
its :class:`FaultNode`), :class:`Ledger`, :class:`InvariantViolation`,
:func:`check_cluster`, and the single checks it runs (:func:`settle_jobs`,
:func:`check_replicas`, :func:`check_jobs`, :func:`check_changes`,
:func:`check_instances`, :func:`check_locks`).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.luxi import Client
from corral.paths import Paths

__all__ = [
    "ABSENT",
    "FaultCluster",
    "FaultNode",
    "InvariantViolation",
    "Key",
    "Ledger",
    "check_changes",
    "check_cluster",
    "check_instances",
    "check_jobs",
    "check_locks",
    "check_replicas",
    "describe",
    "run_watcher",
    "settle_jobs",
]

#: The value of a :data:`Key` whose object does not exist.
ABSENT = "<absent>"

#: ``(resource, name, field)``: a value read back with luxi ``Query(resource,
#: ["name", field])`` (e.g. ``("instance", "web1", "admin_state")``); a missing object
#: reads as :data:`ABSENT`.
Key = tuple[str, str, str]

_FINAL = ("success", "error", "canceled")


class InvariantViolation(AssertionError):
    """The cluster broke an invariant; ``problems`` names each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invariants violated:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class FaultNode:
    """One node of the testbed: its name and paths."""

    name: str
    paths: Paths


@dataclass(frozen=True)
class FaultCluster:
    """A testbed's nodes as the checks see them (read from its ``testbed.json``)."""

    directory: Path
    nodes: tuple[FaultNode, ...]
    env: dict[str, str]

    @classmethod
    def from_testbed(cls, directory: Path) -> FaultCluster:
        """The testbed in ``directory``; the master is found anew at each call of
        :meth:`master` (a failover moves it)."""
        state = json.loads((directory / "testbed.json").read_text())
        nodes = tuple(FaultNode(n["name"], Paths(Path(n["root"]))) for n in state["nodes"])
        return cls(directory, nodes, dict(state["env"]))

    def master(self) -> FaultNode:
        """The node holding the newest configuration store (the master)."""
        best: tuple[int, FaultNode] | None = None
        for node in self.nodes:
            if node.paths.config_db.exists():
                serial = _config_serial(node.paths.config_db)
                if best is None or serial > best[0]:
                    best = (serial, node)
        if best is None:
            raise InvariantViolation(["no node holds a configuration store (no master)"])
        return best[1]

    def client(self, timeout: float = 30.0) -> Client:
        """A luxi client of the master daemon."""
        return Client(self.master().paths.master_socket, timeout=timeout)

    def tool_env(self, node: FaultNode | None = None) -> dict[str, str]:
        """The environment to run a corral tool as on ``node`` (the master by default)."""
        import os

        chosen = node or self.master()
        return {**os.environ, **self.env, "CORRAL_ROOT": str(chosen.paths.root)}

    def candidates(self) -> list[FaultNode]:
        """The nodes other than the master that hold a configuration replica."""
        master = self.master()
        return [n for n in self.nodes if n != master and n.paths.config_replica.exists()]


class Ledger:
    """What clients were told; thread-safe (workload threads record into one).

    * :meth:`submitted`: a submit call returned this job id;
    * :meth:`succeeded`: a client saw this job end in ``success``;
    * :meth:`acknowledge`: a change a client saw succeed: ``key`` now reads ``value``;
    * :meth:`unsure`: a change whose outcome the client did not see (its job failed
      or the connection died): ``key`` may read ``value`` as well as what it could
      read before (so record what a key reads before its first change, with
      :meth:`acknowledge`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.jobs: set[int] = set()
        self.successes: set[int] = set()
        self.allowed: dict[Key, set[Any]] = {}

    def submitted(self, job_id: int) -> None:
        """A client got ``job_id`` back from a submission."""
        with self._lock:
            self.jobs.add(job_id)

    def succeeded(self, job_id: int) -> None:
        """A client saw job ``job_id`` succeed."""
        with self._lock:
            self.jobs.add(job_id)
            self.successes.add(job_id)

    def acknowledge(self, key: Key, value: Any) -> None:
        """An acknowledged change: ``key`` reads exactly ``value`` from now on."""
        with self._lock:
            self.allowed[key] = {value}

    def unsure(self, key: Key, value: Any) -> None:
        """A change of unknown outcome: ``key`` may also read ``value``."""
        with self._lock:
            self.allowed.setdefault(key, set()).add(value)

    def is_unsure(self, key: Key) -> bool:
        """Whether ``key`` may read more than one value."""
        with self._lock:
            return len(self.allowed.get(key, ())) > 1

    def snapshot(self) -> tuple[set[int], set[int], dict[Key, set[Any]]]:
        """Copies of the jobs, the successes and the allowed values."""
        with self._lock:
            return (set(self.jobs), set(self.successes),
                    {key: set(values) for key, values in self.allowed.items()})


# -- the checks ------------------------------------------------------------------------


def settle_jobs(cluster: FaultCluster, timeout: float = 60.0) -> dict[int, str]:
    """Wait until no live job is unfinished; the status of every live job by id."""
    deadline = time.monotonic() + timeout
    statuses: dict[int, str] = {}
    while True:
        with cluster.client() as client:
            rows = client.call("QueryJobs", None, ["id", "status"])
        statuses = {row[0]: row[1] for row in rows if row is not None}
        pending = {job: s for job, s in statuses.items() if s not in _FINAL}
        if not pending:
            return statuses
        if time.monotonic() > deadline:
            raise InvariantViolation([f"jobs still unfinished after {timeout:g} s: "
                                      f"{dict(sorted(pending.items()))}"])
        time.sleep(0.1)


def check_jobs(cluster: FaultCluster, ledger: Ledger) -> list[str]:
    """Every acknowledged job is in the queue and finished; every success seen stays one."""
    jobs, successes, _ = ledger.snapshot()
    if not jobs:
        return ["jobs: none acknowledged"]
    ids = sorted(jobs)
    with cluster.client() as client:
        rows = client.call("QueryJobs", ids, ["id", "status"])
    found = {row[0]: row[1] for row in rows if row is not None}
    problems = [f"job {job} was acknowledged but is not in the queue"
                for job in ids if job not in found]
    problems += [f"job {job} is {found[job]}, not finished" for job in ids
                 if job in found and found[job] not in _FINAL]
    problems += [f"job {job}'s success was seen by its client, now it is {found[job]}"
                 for job in sorted(successes) if job in found and found[job] != "success"]
    if problems:
        raise InvariantViolation(problems)
    return [f"jobs: {len(ids)} acknowledged jobs present and finished, "
            f"{len(successes)} seen successes still success"]


def check_changes(cluster: FaultCluster, ledger: Ledger) -> list[str]:
    """Every value the ledger knows reads back as one it may have."""
    _, _, allowed = ledger.snapshot()
    by_resource: dict[tuple[str, str], list[Key]] = {}
    for key in allowed:
        by_resource.setdefault((key[0], key[2]), []).append(key)
    problems: list[str] = []
    with cluster.client() as client:
        for (resource, fieldname), keys in sorted(by_resource.items()):
            # every object (a name filter would refuse the names of absent ones)
            answer = client.call("Query", resource, ["name", fieldname], None)
            values = {row[0][1]: _hashable(row[1][1]) for row in answer["data"]}
            for key in keys:
                value = values.get(key[1], ABSENT)
                if value not in allowed[key]:
                    problems.append(f"{key[0]} {key[1]}: {key[2]} is {value!r}, acknowledged "
                                    f"{sorted(map(repr, allowed[key]))}")
    if problems:
        raise InvariantViolation(problems)
    unsure = sum(1 for values in allowed.values() if len(values) > 1)
    return [f"changes: {len(allowed)} recorded values read back as acknowledged "
            f"({unsure} after a change of unknown outcome)"]


def _hashable(value: Any) -> Any:
    """Lists (tags, say) as tuples, so that they compare with the ledger's values."""
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _config_serial(path: Path) -> int:
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key='serial'").fetchone()
        return int(row[0]) if row else 0
    finally:
        conn.close()


def _config_rows(path: Path) -> tuple[int, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("BEGIN")
        row = conn.execute("SELECT value FROM meta WHERE key='serial'").fetchone()
        rows = conn.execute("SELECT kind, uuid, serial, json FROM objects ORDER BY uuid")
        return (int(row[0]) if row else 0), rows.fetchall()
    finally:
        conn.close()


def _job_rows(path: Path) -> tuple[int, list[tuple[Any, ...]], list[int]]:
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("BEGIN")
        row = conn.execute("SELECT value FROM meta WHERE key='serial'").fetchone()
        live = conn.execute("SELECT id, data FROM jobs ORDER BY id").fetchall()
        archived = [r[0] for r in conn.execute("SELECT id FROM archive ORDER BY id")]
        return (int(row[0]) if row else 0), live, archived
    finally:
        conn.close()


def check_replicas(cluster: FaultCluster, timeout: float = 30.0) -> list[str]:
    """Every candidate's configuration and job queue replicas reach the master's serial
    and hold the master's rows."""
    master = cluster.master()
    candidates = cluster.candidates()
    if not candidates:
        raise InvariantViolation(["no master candidate holds a replica"])
    deadline = time.monotonic() + timeout
    while True:
        problems: list[str] = []
        config = _config_rows(master.paths.config_db)
        jobs = _job_rows(master.paths.jobs_db)
        for node in candidates:
            replica = _config_rows(node.paths.config_replica)
            if replica != config:
                problems.append(f"{node.name}: configuration replica at serial {replica[0]}"
                                f" differs from the master's (serial {config[0]})")
            queue = _job_rows(node.paths.jobs_replica)
            if queue != jobs:
                problems.append(f"{node.name}: job queue replica at serial {queue[0]} "
                                f"differs from the master's (serial {jobs[0]})")
        if not problems:
            return [f"replicas: {len(candidates)} candidates equal the master "
                    f"{master.name} (config serial {config[0]}, queue serial {jobs[0]})"]
        if time.monotonic() > deadline:
            raise InvariantViolation(problems)
        time.sleep(0.1)


def _running(cluster: FaultCluster) -> dict[str, list[str]]:
    """Instance name -> the nodes whose fake hypervisor holds it."""
    found: dict[str, list[str]] = {}
    for node in cluster.nodes:
        directory = node.paths.hypervisor_state_dir / "fake"
        for state in sorted(directory.glob("*.json")) if directory.is_dir() else ():
            found.setdefault(state.name[: -len(".json")], []).append(node.name)
    return found


def run_watcher(cluster: FaultCluster) -> None:
    """One watcher pass on the master, as its timer would run it (it restarts instances
    that should run)."""
    env = cluster.tool_env()
    proc = subprocess.run([str(Path(sys.executable).parent / "corral-watcher")], env=env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise InvariantViolation([f"corral-watcher exited {proc.returncode}: "
                                  f"{proc.stderr.strip()}"])


def _start_instance(cluster: FaultCluster, name: str) -> str:
    """``gnt-instance startup NAME`` as the operator runs it; the job's final status."""
    with cluster.client() as client:
        job_id = client.call("SubmitJob", [{"OP_ID": "OP_INSTANCE_STARTUP",
                                            "instance_name": name}])
        status = "queued"
        while status not in _FINAL:
            answer = client.call("WaitForJobChange", job_id, ["status"], None, None, 5)
            if answer != "nochange":
                status = answer[0][0]
    return str(status)


def check_instances(cluster: FaultCluster, ledger: Ledger | None = None, *,
                    watcher: bool = True) -> list[str]:
    """No instance runs twice, unknown or off its primary; one that should run does;
    one that should not does not, unless the ledger says its last stop's outcome is
    unknown.

    The operator's repair comes first: a watcher pass (unless ``watcher`` is false),
    which restarts instances that should run but may back off from one it restarted
    a short while ago; then ``gnt-instance startup`` of any instance that still should
    run and does not, when its start or stop was of unknown outcome (the fault hit
    it): that start must work. An instance acknowledged up that does not run is lost.
    """
    if watcher:
        run_watcher(cluster)
    with cluster.client() as client:
        answer = client.call("Query", "instance", ["name", "pnode", "admin_state"], None)
    config = {row[0][1]: (row[1][1], row[2][1]) for row in answer["data"]}
    running = _running(cluster)
    repaired: list[str] = []
    for name, (pnode, admin) in sorted(config.items()):
        unsure = ledger is None or ledger.is_unsure(("instance", name, "admin_state"))
        if admin == "up" and pnode not in running.get(name, []) and unsure:
            repaired.append(f"{name} ({_start_instance(cluster, name)})")
    if repaired:
        running = _running(cluster)
    problems: list[str] = []
    for name, nodes in sorted(running.items()):
        if len(nodes) > 1:
            problems.append(f"instance {name} runs on {len(nodes)} nodes: {', '.join(nodes)}")
        if name not in config:
            problems.append(f"instance {name} runs on {', '.join(nodes)} but the "
                            "configuration does not know it")
        elif config[name][0] not in nodes or len(nodes) > 1:
            problems.append(f"instance {name} runs on {', '.join(nodes)}, its primary "
                            f"node is {config[name][0]}")
    for name, (pnode, admin) in sorted(config.items()):
        where = running.get(name, [])
        if admin == "up" and pnode not in where:
            problems.append(f"instance {name} should run on {pnode} but does not run")
        elif admin == "down" and where and not (
                ledger is not None and ledger.is_unsure(("instance", name, "admin_state"))):
            problems.append(f"instance {name} was stopped but runs on {', '.join(where)}")
    if problems:
        raise InvariantViolation(problems)
    up = sum(1 for _pnode, admin in config.values() if admin == "up")
    started = f"; started by hand: {', '.join(repaired)}" if repaired else ""
    return [f"instances: {len(config)} in the configuration, {up} up and running once on "
            f"their primary node, none running unknown or twice{started}"]


def check_locks(cluster: FaultCluster) -> list[str]:
    """No lock is held or waited for (call once no job is left)."""
    with cluster.client() as client:
        answer = client.call("Query", "lock", ["name", "mode", "owner", "pending"], None)
    problems = [f"lock {row[0][1]} is held ({row[1][1]} by {row[2][1]}) or waited for "
                f"({row[3][1]}) with no job left"
                for row in answer["data"] if row[1][1] or row[2][1] or row[3][1]]
    if problems:
        raise InvariantViolation(problems)
    return [f"locks: all {len(answer['data'])} free"]


def check_cluster(cluster: FaultCluster, ledger: Ledger, *, watcher: bool = True,
                  timeout: float = 60.0) -> list[str]:
    """Run every check (jobs settle first); returns what was checked, raises
    :class:`InvariantViolation` with every problem of the first check that fails."""
    settle_jobs(cluster, timeout)
    done = check_jobs(cluster, ledger)
    done += check_changes(cluster, ledger)
    done += check_instances(cluster, ledger, watcher=watcher)
    settle_jobs(cluster, timeout)  # the watcher's own jobs
    done += check_locks(cluster)
    done += check_replicas(cluster)
    return done


def describe(lines: Iterable[str]) -> str:
    """Checked lines as the suite prints them."""
    return "\n".join(f"  checked {line}" for line in lines)
