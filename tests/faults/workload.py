"""A mixed workload for the fault suite, recording in a :class:`Ledger` what its
clients were told.

Threads, each its own luxi or RAPI client, run until stopped:

* instance workers: each owns two instances (fake hypervisor, diskless) and adds,
  starts, stops, modifies (``maxmem``) and removes them at random, one job at a time,
  waiting for each job's end;
* a delay worker: short ``gnt-debug delay`` jobs on the master;
* a RAPI reader: ``/2/info``, ``/2/instances?bulk=1``, ``/2/jobs``.

A change whose job a client saw succeed is acknowledged in the ledger; one whose
outcome it could not see (the job failed, its submission or its wait broke off) is
recorded as unsure, and that instance is left alone until :meth:`Workload.resync`
(after the round's checks), since its job may still run later. While the master is
down the workers wait and retry; they never fail the test themselves (the checks do).
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.request
from dataclasses import dataclass, field
from random import Random
from typing import Any

from corral.errors import CorralError
from tests.faults.invariants import ABSENT, FaultCluster, Ledger

__all__ = ["Workload"]

_FINAL = ("success", "error", "canceled")
_MAXMEM = (128, 160, 192)


@dataclass
class _Counts:
    submitted: int = 0
    succeeded: int = 0
    unsure: int = 0
    rapi_calls: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class Workload:
    """The workload's threads; :meth:`start`, :meth:`stop`, :meth:`resync` between
    rounds."""

    def __init__(self, cluster: FaultCluster, ledger: Ledger, rng: Random, *,
                 instance_workers: int = 2, rapi: dict[str, Any] | None = None) -> None:
        self.cluster = cluster
        self.ledger = ledger
        self.counts = _Counts()
        self._rng = Random(rng.random())
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._nodes = [node.name for node in cluster.nodes]
        #: instance -> (admin state or ABSENT, maxmem or ABSENT); None: left alone
        #: (read from the cluster at the first start)
        self._view: dict[str, tuple[str, Any] | None] = {
            f"fault{worker}{letter}": None
            for worker in range(instance_workers) for letter in "ab"}
        self._synced = False
        self._workers = instance_workers
        #: (instance, opcode, job id, status, state after) of every instance job, in order
        self.history: list[tuple[str, str, int | None, str, tuple[str, Any]]] = []
        self._rapi = rapi

    # -- life cycle --------------------------------------------------------------------
    def start(self) -> None:
        """Start the threads (the first time after reading the instances' states, so
        that the ledger knows what they were before any change)."""
        if not self._synced:
            self.resync()
        self._stop.clear()
        targets: list[tuple[str, Any, tuple[Any, ...]]] = [
            (f"instances{w}", self._instances, (w,)) for w in range(self._workers)]
        targets.append(("delays", self._delays, ()))
        if self._rapi is not None:
            targets.append(("rapi", self._rapi_reader, ()))
        for name, target, args in targets:
            rng = Random(self._rng.random())  # one generator per thread, from the seed
            thread = threading.Thread(target=target, name=f"workload-{name}", daemon=True,
                                      args=(rng, *args))
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the threads once their current job ended (or ``timeout`` passed)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def resync(self) -> None:
        """After the round's checks passed: read every instance's state back and
        acknowledge it, so that the next round starts from what is."""
        with self.cluster.client() as client:
            answer = client.call("Query", "instance", ["name", "admin_state", "be/maxmem"],
                                 None)
        real = {row[0][1]: (row[1][1], row[2][1]) for row in answer["data"]}
        self._synced = True
        with self._lock:
            for name in self._view:
                state = real.get(name, (ABSENT, ABSENT))
                self._view[name] = state
                self.ledger.acknowledge(("instance", name, "admin_state"), state[0])
                self.ledger.acknowledge(("instance", name, "be/maxmem"), state[1])

    def summary(self) -> str:
        """What the workload did so far."""
        c = self.counts
        return (f"workload: {c.submitted} jobs submitted, {c.succeeded} seen succeed, "
                f"{c.unsure} of unknown outcome, {c.rapi_calls} RAPI reads")

    # -- the workers -------------------------------------------------------------------
    def _pause(self, seconds: float) -> bool:
        """Sleep; True when the workload is stopping."""
        return self._stop.wait(seconds)

    def _run_job(self, ops: list[dict[str, Any]]) -> tuple[int | None, str]:
        """Submit a job and follow it: (id or None, final status or 'lost')."""
        try:
            with self.cluster.client(timeout=30) as client:
                job_id = int(client.call("SubmitJob", ops))
        except (CorralError, OSError):
            return None, "lost"
        self.ledger.submitted(job_id)
        with self._lock:
            self.counts.submitted += 1
        try:
            with self.cluster.client(timeout=30) as client:
                status = "queued"
                while status not in _FINAL:
                    answer = client.call("WaitForJobChange", job_id, ["status"], None,
                                         None, 5)
                    if answer != "nochange":
                        status = answer[0][0]
        except (CorralError, OSError):
            return job_id, "lost"
        if status == "success":
            self.ledger.succeeded(job_id)
            with self._lock:
                self.counts.succeeded += 1
        return job_id, status

    def _instances(self, rng: Random, worker: int) -> None:
        names = [f"fault{worker}a", f"fault{worker}b"]
        while not self._stop.is_set():
            name = rng.choice(names)
            with self._lock:
                state = self._view[name]
            if state is None:
                if self._pause(0.05):
                    return
                continue
            admin, maxmem = state
            ops, after = self._instance_op(rng, name, admin, maxmem)
            job_id, status = self._run_job(ops)
            keys = (("instance", name, "admin_state"), ("instance", name, "be/maxmem"))
            with self._lock:
                self.history.append((name, ops[0]["OP_ID"], job_id, status, after))
                if status == "success":
                    for key, value in zip(keys, after, strict=True):
                        self.ledger.acknowledge(key, value)
                    self._view[name] = after
                else:  # failed, or its submission or wait broke off: it may yet run
                    self._unsure(name, keys, after)
            if status == "lost" and not self._wait_for_master():
                return

    def _wait_for_master(self) -> bool:
        """Wait until the master daemon answers again (a worker whose client lost it
        leaves its other instance alone meanwhile); False when the workload stops."""
        while not self._pause(0.1):
            try:
                with self.cluster.client(timeout=5) as client:
                    client.call("QueryClusterInfo")
                return True
            except (CorralError, OSError):
                continue
        return False

    def _unsure(self, name: str, keys: tuple[Any, Any], after: tuple[str, Any]) -> None:
        for key, value in zip(keys, after, strict=True):
            self.ledger.unsure(key, value)
        self._view[name] = None
        self.counts.unsure += 1

    def _instance_op(self, rng: Random, name: str, admin: str, maxmem: Any
                     ) -> tuple[list[dict[str, Any]], tuple[str, Any]]:
        """A random operation valid in the instance's state, and the state after it."""
        if admin == ABSENT:
            # without an OS install an instance is created stopped (Ganeti's rule)
            return [{"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "create",
                     "disk_template": "diskless", "disks": [], "nics": [{}],
                     "os_type": "corral-tiny", "no_install": True, "start": False,
                     "name_check": False, "ip_check": False,
                     "pnode": rng.choice(self._nodes)}], ("down", 128)
        choice = rng.choice(["modify", "stop" if admin == "up" else "start",
                             "remove" if admin == "down" else "modify"])
        if choice == "modify":
            new = rng.choice([m for m in _MAXMEM if m != maxmem])
            return [{"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": name,
                     "beparams": {"maxmem": new, "minmem": new}}], (admin, new)
        if choice == "start":
            return [{"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": name}], ("up", maxmem)
        if choice == "stop":
            return [{"OP_ID": "OP_INSTANCE_SHUTDOWN", "instance_name": name,
                     "timeout": 0}], ("down", maxmem)
        return [{"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": name,
                 "ignore_failures": False, "shutdown_timeout": 0}], (ABSENT, ABSENT)

    def _delays(self, rng: Random) -> None:
        while not self._stop.is_set():
            duration = round(rng.uniform(0.0, 0.1), 3)
            _, status = self._run_job([{"OP_ID": "OP_TEST_DELAY", "duration": duration,
                                        "on_master": True, "on_nodes": [], "repeat": 0,
                                        "no_locks": False}])
            if status == "lost" and self._pause(0.2):
                return

    def _rapi_reader(self, rng: Random) -> None:
        assert self._rapi is not None
        rapi = self._rapi
        context = ssl.create_default_context(cafile=rapi["ca"])
        context.check_hostname = False
        token = base64.b64encode(f"{rapi['user']}:{rapi['password']}".encode()).decode()
        while not self._stop.is_set():
            path = rng.choice(["/2/info", "/2/instances?bulk=1", "/2/jobs"])
            request = urllib.request.Request(rapi["url"] + path,
                                             headers={"Authorization": f"Basic {token}"})
            try:
                with urllib.request.urlopen(request, context=context, timeout=10) as answer:
                    json.loads(answer.read())
                with self._lock:
                    self.counts.rapi_calls += 1
            except (OSError, ValueError) as err:
                with self._lock:
                    kind = type(err).__name__
                    self.counts.errors[kind] = self.counts.errors.get(kind, 0) + 1
                if self._pause(0.2):
                    return
            if self._pause(0.05):
                return
