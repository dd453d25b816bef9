"""Benchmark: corral's asyncio locks against Ganeti 3.0's threaded SharedLock.

**Which Ganeti lock path.** Ganeti 3.0's Python ``ganeti/locking.py`` keeps only the
``SharedLock`` primitive (and its conditions); ``LockSet`` and ``GanetiLockManager`` are
gone from it. A Ganeti 3.0 job takes its locks from the WConfD daemon instead:
``mcpu.Processor._AcquireLocks`` asks for a level's locks with ``UpdateLocksWaiting`` (one
lock per call in its last, blocking attempt), each call on a new unix-socket connection,
asks ``HasPendingRequest``, and while a request is pending waits for WConfD's SIGHUP,
looking every 50 ms; ``FreeLocksLevel`` releases a level. The contended figures compare
corral's job path (``LockSet.acquire``, which ``LockManager`` calls for every level) with
Ganeti's in-process ``locking.SharedLock`` ``acquire``/``release``, one lock after the
other in sorted name order (Ganeti's lock order). Ganeti's real job path goes through
WConfD's own lock tables instead, behind daemon round trips that cost milliseconds here,
so those Ganeti figures flatter Ganeti; figure (a') times its real path for one lock
without contention.

**The same work on both sides.** While holding its locks every owner first runs the
same function, ``work`` (a loop of a fixed count of interpreter iterations), calibrated in
each process to take ``--work-us`` microseconds when it runs alone (default 100), then
waits ``--wait-us`` microseconds (default 1000), as a job waits for node RPCs while
holding its locks: a thread with ``time.sleep``, which lets the other threads run as
blocking I/O does, a task with ``asyncio.sleep``. Either may be 0. Without the wait no
corral owner would ever find a lock held (a task that does not await while holding
releases before any other task runs), so there would be no contention to measure. Each
line reports the calibration (``work_us_alone``, best of several timed calls) and the
time each acquisition really held its locks (``hold_us``: work, wait, and any preemption
on the way). With ``--wait-us 0`` a task yields once after releasing, else the others
never run; threads need no such step, the interpreter switches them.

Prints one JSON line per figure:

(a) ``uncontended_corral`` / ``uncontended_ganeti``: acquire+release pairs per second of
    one owner on one lock (corral ``SharedLock``, Ganeti ``locking.SharedLock``), no work;
(a') ``job_path_corral`` / ``job_path_ganeti``: the same for one instance lock taken the
    way each one's jobs take it, one owner, no contention: corral's
    ``LockManager.acquire(INSTANCE, ...)`` and ``release``, and the calls Ganeti 3.0's
    ``mcpu`` makes to WConfD (``UpdateLocksWaiting``, ``HasPendingRequest``, then
    ``FreeLocksLevel``, each on a new ``wconfd.Client()``) with a livelock file of its
    own, as a job holds one. The Ganeti line needs the reference cluster's WConfD
    (``../shared/tools/ganeti-reference/``) and says ``unavailable`` and why without it.
    Both give pairs per second and the acquire latency p50/p99;
(b) ``contended_corral``: ``--owners`` asyncio tasks over a ``--locks``-member corral
    LockSet, each one repeatedly taking 1..5 distinct random members (exclusive with
    probability 0.3, else shared) in one ``LockSet.acquire``, doing the work, then
    releasing. Each owner's requests are drawn before the clock starts, identically on
    both sides. Owners pass themselves as ``owner=``, as the job processor passes the job;
(c) ``contended_ganeti``: the same workload with one thread per owner on Ganeti 3.0's
    ``SharedLock``. It runs in a subprocess under Debian's ``/usr/bin/python3``
    (``apt-get install ganeti-3.0``); when that is unavailable the line says
    ``"ganeti": "unavailable"`` and why;
(d) ``ratio``: corral over Ganeti for acquisitions per second (the earlier target: at
    least 10), and Ganeti over corral for the acquire latency percentiles, both from
    this run.

The contended lines give acquisitions and locks per second and the acquire latency (from
asking to holding every requested lock) at p50, p90 and p99 in microseconds. They also
give acquisitions per second of the process's CPU time and its CPU share (CPU time over
wall time): on a busy machine the kernel shares the processors among threads and
preempts the ones that run long, so a thousand short-running threads and one event loop
that never sleeps get different shares, and the per-second figures then compare those
shares as much as the locks. The contended
workloads run in ``--rounds`` alternating rounds, so both sides meet the same machine
conditions; each figure is the median over rounds, and the line lists every round's rate.

    .venv/bin/python bench/locks.py [--seconds S] [--rounds R] [--owners N] [--locks L]
                                    [--work-us W] [--wait-us D]

The module top level imports only the standard library, because the Ganeti side runs
this same file under Debian's python (``--ganeti-side``), where corral is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: Where the ganeti-3.0 package puts its modules, and the python it is built for.
GANETI_PATH = "/usr/share/ganeti/3.0"
GANETI_PYTHON = "/usr/bin/python3"
#: What the comparison runs against on the Ganeti side, as printed on every Ganeti line.
GANETI_LOCK_PATH = ("ganeti 3.0 locking.SharedLock acquire/release, one lock at a time in"
                    " name order (3.0 jobs lock through WConfD RPCs instead: see job_path_ganeti)")
CORRAL_LOCK_PATH = "corral.locking.LockSet.acquire/release (the job processor's path)"
#: The earlier issue's target for the ratio line: corral at least this many times the
#: acquisitions per second of Ganeti.
TARGET_RATIO = 10
#: Each owner takes between 1 and this many locks per acquisition.
MAX_LOCKS_PER_ACQUIRE = 5
EXCLUSIVE_FRACTION = 0.3
UNCONTENDED_SECONDS = 1.5
#: The instance lock figure (a') takes, on both sides.
JOB_PATH_LOCK = "bench-lock-00"
#: Requests drawn per owner before measuring; each owner cycles through its own.
REQUESTS_PER_OWNER = 64
#: Stack per Ganeti-side thread: small enough for a thousand threads.
THREAD_STACK = 256 * 1024
#: Default work per acquisition, in microseconds.
DEFAULT_WORK_US = 100.0
#: Default wait while holding, in microseconds: about one node RPC on a local network.
DEFAULT_WAIT_US = 1000.0
PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


# -- the work both sides do while holding their locks ------------------------------


def work(iterations: int) -> int:
    """The work done while holding the locks: ``iterations`` interpreter loop turns.

    Pure CPU, no system call and no yield, so that it costs the same in a thread and in
    an asyncio task; its result is returned so that nothing can skip the loop.
    """
    total = 0
    for i in range(iterations):
        total ^= i
    return total


def _time_work(iterations: int, calls: int = 5) -> float:
    """The best of ``calls`` timed runs of ``work(iterations)``, in seconds."""
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        work(iterations)
        best = min(best, time.perf_counter() - start)
    return best


def calibrate(work_us: float) -> int:
    """The iteration count for which :func:`work` takes ``work_us`` µs in this process.

    Each side calibrates in its own interpreter, so that both spend the same time even
    if the two pythons run the loop at different speeds.
    The machine may be busy: short runs, the fastest of many, are the ones nobody
    interrupted.
    """
    if work_us <= 0:
        return 0
    iterations = 1000
    while _time_work(iterations, 3) < 0.001:
        iterations *= 2
    return max(1, round(iterations * work_us / 1e6 / _time_work(iterations, 30)))


def work_us_alone(iterations: int) -> float:
    """What ``work(iterations)`` takes alone in this process, in µs (best of 20 calls)."""
    return round(_time_work(iterations, 20) * 1e6, 1) if iterations else 0.0


# -- the workload, the same on both sides ------------------------------------------


def _lock_names(count: int) -> list[str]:
    """Lock names whose string order is their numeric order."""
    width = len(str(count - 1))
    return [f"lock{i:0{width}d}" for i in range(count)]


def _owner_rng(seed: int, owner: int) -> random.Random:
    """Each owner's own random stream, so its requests do not depend on scheduling."""
    return random.Random(f"{seed}/{owner}")


def _request(rng: random.Random, names: list[str]) -> tuple[list[str], bool]:
    """One acquisition: k in 1..5 distinct names (sorted) and whether it is shared."""
    k = rng.randint(1, min(MAX_LOCKS_PER_ACQUIRE, len(names)))
    chosen = sorted(rng.sample(names, k))
    return chosen, rng.random() >= EXCLUSIVE_FRACTION


def _requests(seed: int, owner: int, names: list[str]) -> list[tuple[list[str], bool]]:
    """An owner's requests, drawn before the clock starts and then cycled through.

    Drawing them inside the measured loop would time the random number generator
    (about a quarter of corral's run) rather than the locks; both sides do the same.
    """
    rng = _owner_rng(seed, owner)
    return [_request(rng, names) for _ in range(REQUESTS_PER_OWNER)]


class _Tally:
    """What one owner counted while the clock ran."""

    __slots__ = ("acquisitions", "hold_seconds", "latencies", "locks")

    def __init__(self) -> None:
        self.acquisitions = 0
        self.locks = 0
        self.hold_seconds = 0.0
        self.latencies: list[float] = []


def _round_result(tallies: list[_Tally], elapsed: float, cpu: float, iterations: int
                  ) -> dict[str, Any]:
    """One round's figures from every owner's tally; ``cpu`` is the process's CPU time."""
    acquisitions = sum(t.acquisitions for t in tallies)
    latencies = sorted(lat for t in tallies for lat in t.latencies)
    result: dict[str, Any] = {
        "acquisitions": acquisitions,
        "locks_taken": sum(t.locks for t in tallies),
        "elapsed": elapsed,
        "cpu": cpu,
        "work_us_alone": work_us_alone(iterations),
        "hold_us": round(
            sum(t.hold_seconds for t in tallies) / max(1, acquisitions) * 1e6, 1),
    }
    for name, fraction in PERCENTILES.items():
        value = latencies[min(len(latencies) - 1, round(fraction * (len(latencies) - 1)))] \
            if latencies else 0.0
        result[f"latency_{name}_us"] = round(value * 1e6, 1)
    return result


def _pairs_result(latencies: list[float], elapsed: float) -> dict[str, Any]:
    """Pairs per second and acquire latency of a one-owner run."""
    ordered = sorted(latencies)
    return {
        "pairs": len(ordered),
        "elapsed": elapsed,
        **{f"latency_{name}_us": round(ordered[min(len(ordered) - 1, round(
            fraction * (len(ordered) - 1)))] * 1e6, 1) if ordered else 0.0
           for name, fraction in PERCENTILES.items() if name != "p90"},
    }


def _params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "owners": args.owners,
        "locks": args.locks,
        "seconds": args.seconds,
        "work_us": args.work_us,
        "wait_us": args.wait_us,
        "exclusive_fraction": EXCLUSIVE_FRACTION,
        "max_locks_per_acquire": MAX_LOCKS_PER_ACQUIRE,
        "seed": args.seed,
    }


def _fail(message: str) -> None:
    print(f"bench/locks.py: {message}", file=sys.stderr)
    sys.exit(1)


def _uncontended_pairs(acquire: Callable[[], Any], release: Callable[[], None],
                       seconds: float) -> tuple[int, float]:
    """Acquire+release pairs of one thread on one lock for ``seconds`` (sync side)."""
    pairs = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(1000):
            acquire()
            release()
        pairs += 1000
        now = time.perf_counter()
        if now >= deadline:
            return pairs, now - start


# -- corral side (imports corral lazily: the Ganeti side runs without it) --------------


async def _uncontended_corral(seconds: float) -> tuple[int, float]:
    from corral.locking import SharedLock

    lock = SharedLock("bench/uncontended")
    pairs = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(1000):
            await lock.acquire()
            lock.release()
        pairs += 1000
        now = time.perf_counter()
        if now >= deadline:
            return pairs, now - start


async def contended_corral(
    owners: int, lock_count: int, seconds: float, seed: int, iterations: int, wait: float
) -> dict[str, Any]:
    """Workload (b) on corral's LockSet: one round's figures.

    ``iterations`` is the count for :func:`work`, ``wait`` the seconds an owner waits
    while holding (``asyncio.sleep``).
    """
    from corral.locking import LockSet

    names = _lock_names(lock_count)
    lockset = LockSet(names, "bench")
    go = asyncio.Event()
    stop = False
    tallies = [_Tally() for _ in range(owners)]

    async def owner(index: int) -> None:
        requests = itertools.cycle(_requests(seed, index, names))
        tally = tallies[index]
        await go.wait()
        while not stop:
            chosen, shared = next(requests)
            asked = time.perf_counter()
            await lockset.acquire(chosen, shared=shared, owner=index)
            held = time.perf_counter()
            work(iterations)
            if wait:
                await asyncio.sleep(wait)
            if not stop:
                tally.acquisitions += 1
                tally.locks += len(chosen)
                tally.latencies.append(held - asked)
                tally.hold_seconds += time.perf_counter() - held
            lockset.release(owner=index)
            if not wait:
                await asyncio.sleep(0)  # else the other tasks never run

    tasks = [asyncio.create_task(owner(i), name=f"owner{i}") for i in range(owners)]
    await asyncio.sleep(0)  # every task starts and waits for the go
    go.set()
    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds)
    stop = True
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    await asyncio.gather(*tasks)

    held = [(info.name, info.mode) for info in lockset.info() if info.mode is not None]
    queued = [info.name for info in lockset.info() if info.pending]
    if held or queued:
        _fail(f"corral locks left held or queued after the run: {held or queued}")
    return _round_result(tallies, elapsed, cpu, iterations)


async def _job_path_corral(seconds: float) -> dict[str, Any]:
    from corral.locking import LockLevel, LockManager

    manager = LockManager(instances=[JOB_PATH_LOCK])
    owner = object()  # the job processor passes the job
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(1000):
            asked = time.perf_counter()
            await manager.acquire(LockLevel.INSTANCE, [JOB_PATH_LOCK], owner=owner)
            latencies.append(time.perf_counter() - asked)
            manager.release(LockLevel.INSTANCE, owner=owner)
    return _pairs_result(latencies, time.perf_counter() - start)


def _corral_round(args: argparse.Namespace, iterations: int) -> dict[str, Any]:
    """One measurement of workload (b) on corral."""
    result = asyncio.run(contended_corral(
        args.owners, args.locks, args.seconds, args.seed, iterations, args.wait_us / 1e6))
    if result["acquisitions"] == 0:
        _fail("corral: no acquisition completed")
    return result


# -- Ganeti side (runs under Debian's python in a subprocess; stdlib and ganeti only) ---


def _ganeti_locking() -> Any:
    sys.path.insert(0, GANETI_PATH)
    from ganeti import locking  # type: ignore[import-not-found]

    return locking


def _ganeti_uncontended(seconds: float) -> dict[str, Any]:
    lock = _ganeti_locking().SharedLock("bench/uncontended")
    pairs, elapsed = _uncontended_pairs(lock.acquire, lock.release, seconds)
    return {"pairs": pairs, "elapsed": elapsed}


def _ganeti_job_path(seconds: float) -> dict[str, Any]:
    """One instance lock through WConfD, as ``mcpu.Processor._AcquireLocks`` takes it."""
    import importlib
    import signal

    sys.path.insert(0, GANETI_PATH)
    wconfd = importlib.import_module("ganeti.wconfd")
    livelock = importlib.import_module("ganeti.utils.livelock")

    # WConfD signals a waiting owner with SIGHUP when it grants a pending request.
    signal.signal(signal.SIGHUP, lambda *_: None)
    proof = livelock.LiveLock("corral-bench")
    context = ("corral-bench", proof.GetPath(), os.getpid())
    request = [[f"instance/{JOB_PATH_LOCK}", "exclusive"]]
    latencies: list[float] = []
    try:
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            asked = time.perf_counter()
            wconfd.Client().UpdateLocksWaiting(context, 0, request)
            if wconfd.Client().HasPendingRequest(context):
                raise SystemExit(f"WConfD: {request} is held by someone else")
            latencies.append(time.perf_counter() - asked)
            wconfd.Client().FreeLocksLevel(context, "instance")
        elapsed = time.perf_counter() - start
    finally:
        wconfd.Client().FreeLocks(context)
        proof.close()
    return _pairs_result(latencies, elapsed)


def _ganeti_contended(owners: int, lock_count: int, seconds: float, seed: int,
                      work_us: float, wait: float) -> dict[str, Any]:
    locking = _ganeti_locking()
    iterations = calibrate(work_us)
    names = _lock_names(lock_count)
    locks = {name: locking.SharedLock(name) for name in names}
    ready = threading.Barrier(owners + 1)
    stop = threading.Event()
    tallies = [_Tally() for _ in range(owners)]

    def owner(index: int) -> None:
        requests = itertools.cycle(_requests(seed, index, names))
        tally = tallies[index]
        ready.wait()
        while not stop.is_set():
            chosen, shared = next(requests)
            asked = time.perf_counter()
            for name in chosen:  # already in sorted name order
                locks[name].acquire(shared=1 if shared else 0)
            held = time.perf_counter()
            work(iterations)
            if wait:
                time.sleep(wait)
            if not stop.is_set():
                tally.acquisitions += 1
                tally.locks += len(chosen)
                tally.latencies.append(held - asked)
                tally.hold_seconds += time.perf_counter() - held
            for name in reversed(chosen):
                locks[name].release()

    threading.stack_size(THREAD_STACK)
    threads = [threading.Thread(target=owner, args=(i,), name=f"owner{i}", daemon=True)
               for i in range(owners)]
    for thread in threads:
        thread.start()
    ready.wait()  # every thread is running and about to start
    start, cpu = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    stop.set()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    join_deadline = time.monotonic() + 30
    for thread in threads:
        thread.join(max(0.0, join_deadline - time.monotonic()))
    unfinished = sum(thread.is_alive() for thread in threads)
    if unfinished:
        return {"unfinished_threads": unfinished}
    return {**_round_result(tallies, elapsed, cpu, iterations), "unfinished_threads": 0}


def _run_ganeti_side(mode: str, args: argparse.Namespace) -> dict[str, Any] | str:
    """Run this file's Ganeti side in a subprocess; its answer, or why it failed."""
    command = [
        GANETI_PYTHON, os.path.abspath(__file__), "--ganeti-side", mode,
        "--seconds", str(args.seconds), "--owners", str(args.owners),
        "--locks", str(args.locks), "--seed", str(args.seed),
        "--work-us", str(args.work_us), "--wait-us", str(args.wait_us),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env,
                              timeout=args.seconds + 90, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return f"{GANETI_PYTHON} failed: {tail[0]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _ganeti_round(args: argparse.Namespace) -> dict[str, Any] | str:
    """One measurement of workload (c) in a subprocess; a reason string if unavailable."""
    result = _run_ganeti_side("contended", args)
    if isinstance(result, str):
        return result
    if result["unfinished_threads"]:
        _fail(f"ganeti: {result['unfinished_threads']} threads did not finish")
    if result["acquisitions"] == 0:
        _fail("ganeti: no acquisition completed")
    return result


# -- output ----------------------------------------------------------------------------


def _uncontended_line(side: str, pairs: int, elapsed: float) -> dict[str, Any]:
    return {
        "bench": "locks",
        "figure": f"uncontended_{side}",
        "lock_path": "corral.locking.SharedLock" if side == "corral"
        else "ganeti 3.0 locking.SharedLock",
        "pairs_per_s": round(pairs / elapsed),
        "pairs": pairs,
        "seconds": round(elapsed, 3),
    }


def _job_path_lines(args: argparse.Namespace) -> None:
    """Print figure (a'): one instance lock through each side's job path."""
    corral = asyncio.run(_job_path_corral(UNCONTENDED_SECONDS))
    ganeti = _run_ganeti_side("job-path", args)
    paths = {"corral": "corral.locking.LockManager.acquire(INSTANCE)/release",
             "ganeti": "ganeti 3.0 WConfD UpdateLocksWaiting+HasPendingRequest/"
                       "FreeLocksLevel, a new wconfd.Client() per call, as mcpu does"}
    for side, result in (("corral", corral), ("ganeti", ganeti)):
        line: dict[str, Any] = {"bench": "locks", "figure": f"job_path_{side}",
                                "lock": f"instance/{JOB_PATH_LOCK}",
                                "lock_path": paths[side]}
        if isinstance(result, str):
            line.update(ganeti="unavailable", reason=result)
        else:
            line.update(pairs_per_s=round(result["pairs"] / result["elapsed"], 1),
                        pairs=result["pairs"], seconds=round(result["elapsed"], 3),
                        **{k: v for k, v in result.items() if k.startswith("latency_")})
        print(json.dumps(line))


def _contended_line(
    figure: str, args: argparse.Namespace, rounds: list[dict[str, Any]]
) -> tuple[dict[str, Any], float]:
    """The JSON line of a contended figure: medians over rounds, and every round's rate."""
    rates = [r["acquisitions"] / r["elapsed"] for r in rounds]
    median = statistics.median(rates)
    line: dict[str, Any] = {
        "bench": "locks",
        "figure": figure,
        **_params(args),
        "acquisitions_per_s": round(median, 1),
        "acquisitions_per_cpu_s": round(statistics.median(
            r["acquisitions"] / r["cpu"] for r in rounds if r["cpu"] > 0), 1),
        "cpu_share": round(statistics.median(r["cpu"] / r["elapsed"] for r in rounds), 2),
        "locks_per_s": round(statistics.median(
            r["locks_taken"] / r["elapsed"] for r in rounds), 1),
    }
    for name in PERCENTILES:
        key = f"latency_{name}_us"
        line[key] = round(statistics.median(r[key] for r in rounds), 1)
    for key in ("work_us_alone", "hold_us"):
        line[key] = round(statistics.median(r[key] for r in rounds), 1)
    line["rounds_acquisitions_per_s"] = [round(rate, 1) for rate in rates]
    return line, median


def _ratio_line(args: argparse.Namespace, corral: dict[str, Any],
                ganeti: dict[str, Any] | None, reason: str | None) -> dict[str, Any]:
    ratio: dict[str, Any] = {"bench": "locks", "figure": "ratio", **_params(args)}
    if ganeti is None:
        return {**ratio, "ganeti": "unavailable", "reason": reason}
    value = corral["acquisitions_per_s"] / ganeti["acquisitions_per_s"]
    ratio.update(acquisitions_per_s_corral_over_ganeti=round(value, 2),
                 acquisitions_per_cpu_s_corral_over_ganeti=round(
                     corral["acquisitions_per_cpu_s"] / ganeti["acquisitions_per_cpu_s"], 2),
                 target=TARGET_RATIO, meets_target=value >= TARGET_RATIO)
    for name in PERCENTILES:
        key = f"latency_{name}_us"
        ratio[f"{key}_ganeti_over_corral"] = (
            round(ganeti[key] / corral[key], 2) if corral[key] else None)
    return ratio


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="measurement window of each contended round (default 2)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating rounds per side; figures are medians (default 5)")
    parser.add_argument("--owners", type=int, default=1000,
                        help="concurrent owners: asyncio tasks or threads (default 1000)")
    parser.add_argument("--locks", type=int, default=100,
                        help="locks in the set (default 100)")
    parser.add_argument("--work-us", type=float, default=DEFAULT_WORK_US,
                        help="CPU work per acquisition while holding, on both sides, in"
                             f" microseconds; 0 for none (default {DEFAULT_WORK_US:g})")
    parser.add_argument("--wait-us", type=float, default=DEFAULT_WAIT_US,
                        help="time each owner then waits while holding, on both sides"
                             " (time.sleep in a thread, asyncio.sleep in a task), in"
                             f" microseconds; 0 for none (default {DEFAULT_WAIT_US:g})")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--ganeti-side", choices=("contended", "uncontended", "job-path"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.owners < 1 or args.locks < 1 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--owners, --locks and --rounds must be at least 1, --seconds positive")
    if args.work_us < 0 or args.wait_us < 0:
        parser.error("--work-us and --wait-us must be 0 or more")

    if args.ganeti_side == "uncontended":
        print(json.dumps(_ganeti_uncontended(UNCONTENDED_SECONDS)))
        return 0
    if args.ganeti_side == "job-path":
        print(json.dumps(_ganeti_job_path(UNCONTENDED_SECONDS)))
        return 0
    if args.ganeti_side == "contended":
        print(json.dumps(_ganeti_contended(
            args.owners, args.locks, args.seconds, args.seed, args.work_us,
            args.wait_us / 1e6)))
        return 0

    print(json.dumps(_uncontended_line(
        "corral", *asyncio.run(_uncontended_corral(UNCONTENDED_SECONDS)))))
    uncontended = _run_ganeti_side("uncontended", args)
    if isinstance(uncontended, str):
        print(json.dumps({"bench": "locks", "figure": "uncontended_ganeti",
                          "ganeti": "unavailable", "reason": uncontended}))
    else:
        print(json.dumps(_uncontended_line(
            "ganeti", uncontended["pairs"], uncontended["elapsed"])))

    _job_path_lines(args)

    # Rounds alternate between the two sides so that both meet the same machine
    # conditions; each side's figure is its median round.
    iterations = calibrate(args.work_us)
    corral_rounds: list[dict[str, Any]] = []
    ganeti_rounds: list[dict[str, Any]] = []
    unavailable: str | None = None
    for _ in range(args.rounds):
        corral_rounds.append(_corral_round(args, iterations))
        if unavailable is None:
            outcome = _ganeti_round(args)
            if isinstance(outcome, str):
                unavailable = outcome
            else:
                ganeti_rounds.append(outcome)
    corral_line, _ = _contended_line("contended_corral", args, corral_rounds)
    corral_line["lock_path"] = CORRAL_LOCK_PATH
    print(json.dumps(corral_line))
    ganeti_line: dict[str, Any] | None = None
    if unavailable is not None:
        print(json.dumps({"bench": "locks", "figure": "contended_ganeti", **_params(args),
                          "lock_path": GANETI_LOCK_PATH,
                          "ganeti": "unavailable", "reason": unavailable}))
    else:
        ganeti_line, _ = _contended_line("contended_ganeti", args, ganeti_rounds)
        ganeti_line.update(lock_path=GANETI_LOCK_PATH, ganeti="3.0")
        print(json.dumps(ganeti_line))
    print(json.dumps(_ratio_line(args, corral_line, ganeti_line, unavailable)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
