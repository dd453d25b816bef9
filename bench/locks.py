"""Benchmark: corral's asyncio locks against Ganeti 3.0's threaded SharedLock.

Prints one JSON line per figure:

(a) ``uncontended``: acquire+release pairs per second on one corral SharedLock, one task;
(b) ``contended_corral``: ``--owners`` asyncio tasks over a ``--locks``-member corral
    LockSet, each one repeatedly taking 1..5 distinct random members (exclusive with
    probability 0.3, else shared) in one ``LockSet.acquire``, yielding once as the work,
    then releasing; acquisitions (and locks) per second over ``--seconds``. Each owner's
    requests are drawn before the clock starts, identically on both sides. Owners pass
    themselves as ``owner=``, as the job processor passes the job; (a) measures the
    default owner (the current task);
(c) ``contended_ganeti``: the same workload on Ganeti 3.0's own ``SharedLock`` with one
    thread per owner, taking its locks one by one in sorted name order. It runs in a
    subprocess under Debian's ``/usr/bin/python3`` (``apt-get install ganeti-3.0``); when
    that is unavailable the line says ``"ganeti": "unavailable"`` and why;
(d) ``ratio``: corral's acquisitions per second over Ganeti's, both from this run; the
    target is at least 10. The contended workloads run in ``--rounds`` alternating
    rounds, so both sides meet the same machine conditions; each figure is the median
    round and its line lists every round.

    .venv/bin/python bench/locks.py [--seconds S] [--rounds R] [--owners N] [--locks L]

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
from typing import Any

#: Where the ganeti-3.0 package puts its modules, and the python it is built for.
GANETI_PATH = "/usr/share/ganeti/3.0"
GANETI_PYTHON = "/usr/bin/python3"
#: The issue's target for figure (d): corral at least this many times faster.
TARGET_RATIO = 10
#: Each owner takes between 1 and this many locks per acquisition.
MAX_LOCKS_PER_ACQUIRE = 5
EXCLUSIVE_FRACTION = 0.3
UNCONTENDED_SECONDS = 1.5
#: Requests drawn per owner before measuring; each owner cycles through its own.
REQUESTS_PER_OWNER = 64
#: Stack per Ganeti-side thread: small enough for a thousand threads.
THREAD_STACK = 256 * 1024


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


def _params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "owners": args.owners,
        "locks": args.locks,
        "seconds": args.seconds,
        "exclusive_fraction": EXCLUSIVE_FRACTION,
        "max_locks_per_acquire": MAX_LOCKS_PER_ACQUIRE,
        "seed": args.seed,
    }


def _fail(message: str) -> None:
    print(f"bench/locks.py: {message}", file=sys.stderr)
    sys.exit(1)


# -- corral side (imports corral lazily: the Ganeti side runs without it) --------------


async def _uncontended(seconds: float) -> tuple[int, float]:
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


async def _contended_corral(
    owners: int, lock_count: int, seconds: float, seed: int
) -> tuple[int, int, float]:
    from corral.locking import LockSet

    names = _lock_names(lock_count)
    lockset = LockSet(names, "bench")
    go = asyncio.Event()
    stop = False
    acquisitions = [0] * owners
    locks_taken = [0] * owners

    async def owner(index: int) -> None:
        requests = itertools.cycle(_requests(seed, index, names))
        await go.wait()
        while not stop:
            chosen, shared = next(requests)
            await lockset.acquire(chosen, shared=shared, owner=index)
            if not stop:
                acquisitions[index] += 1
                locks_taken[index] += len(chosen)
            await asyncio.sleep(0)
            lockset.release(owner=index)

    tasks = [asyncio.create_task(owner(i), name=f"owner{i}") for i in range(owners)]
    await asyncio.sleep(0)  # every task starts and waits for the go
    go.set()
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    stop = True
    elapsed = time.perf_counter() - start
    await asyncio.gather(*tasks)

    held = [(info.name, info.mode) for info in lockset.info() if info.mode is not None]
    queued = [info.name for info in lockset.info() if info.pending]
    if held or queued:
        _fail(f"corral locks left held or queued after the run: {held or queued}")
    return sum(acquisitions), sum(locks_taken), elapsed


def _uncontended_figure() -> None:
    """Print figure (a)."""
    pairs, elapsed = asyncio.run(_uncontended(UNCONTENDED_SECONDS))
    print(json.dumps({
        "bench": "locks",
        "figure": "uncontended",
        "pairs_per_s": round(pairs / elapsed),
        "pairs": pairs,
        "seconds": round(elapsed, 3),
    }))


def _corral_round(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement of workload (b) on corral."""
    acquisitions, locks_taken, elapsed = asyncio.run(
        _contended_corral(args.owners, args.locks, args.seconds, args.seed))
    if acquisitions == 0:
        _fail("corral: no acquisition completed")
    return {"acquisitions": acquisitions, "locks_taken": locks_taken, "elapsed": elapsed}


# -- Ganeti side (runs under Debian's python in a subprocess; stdlib and ganeti only) ---


def _ganeti_side(owners: int, lock_count: int, seconds: float, seed: int) -> dict[str, Any]:
    sys.path.insert(0, GANETI_PATH)
    from ganeti import locking  # type: ignore[import-not-found]

    names = _lock_names(lock_count)
    locks = {name: locking.SharedLock(name) for name in names}
    ready = threading.Barrier(owners + 1)
    stop = threading.Event()
    acquisitions = [0] * owners
    locks_taken = [0] * owners

    def owner(index: int) -> None:
        requests = itertools.cycle(_requests(seed, index, names))
        ready.wait()
        while not stop.is_set():
            chosen, shared = next(requests)
            for name in chosen:  # already in sorted name order
                locks[name].acquire(shared=1 if shared else 0)
            if not stop.is_set():
                acquisitions[index] += 1
                locks_taken[index] += len(chosen)
            time.sleep(0)
            for name in reversed(chosen):
                locks[name].release()

    threading.stack_size(THREAD_STACK)
    threads = [threading.Thread(target=owner, args=(i,), name=f"owner{i}", daemon=True)
               for i in range(owners)]
    for thread in threads:
        thread.start()
    ready.wait()  # every thread is running and about to start
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    elapsed = time.perf_counter() - start
    join_deadline = time.monotonic() + 30
    for thread in threads:
        thread.join(max(0.0, join_deadline - time.monotonic()))
    unfinished = sum(thread.is_alive() for thread in threads)
    return {
        "acquisitions": sum(acquisitions),
        "locks_taken": sum(locks_taken),
        "elapsed": elapsed,
        "unfinished_threads": unfinished,
    }


def _ganeti_round(args: argparse.Namespace) -> dict[str, Any] | str:
    """One measurement of workload (c) in a subprocess; a reason string if unavailable."""
    command = [
        GANETI_PYTHON, os.path.abspath(__file__), "--ganeti-side",
        "--seconds", str(args.seconds), "--owners", str(args.owners),
        "--locks", str(args.locks), "--seed", str(args.seed),
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
    if result["unfinished_threads"]:
        _fail(f"ganeti: {result['unfinished_threads']} threads did not finish")
    if result["acquisitions"] == 0:
        _fail("ganeti: no acquisition completed")
    return result


def _contended_line(
    figure: str, args: argparse.Namespace, rounds: list[dict[str, Any]]
) -> tuple[dict[str, Any], float]:
    """The JSON line of a contended figure: the median round, and every round's rate."""
    rates = [r["acquisitions"] / r["elapsed"] for r in rounds]
    median = statistics.median(rates)
    line = {
        "bench": "locks",
        "figure": figure,
        **_params(args),
        "acquisitions_per_s": round(median, 1),
        "locks_per_s": round(statistics.median(
            r["locks_taken"] / r["elapsed"] for r in rounds), 1),
        "rounds_acquisitions_per_s": [round(rate, 1) for rate in rates],
    }
    return line, median


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
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--ganeti-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.owners < 1 or args.locks < 1 or args.rounds < 1 or args.seconds <= 0:
        parser.error("--owners, --locks and --rounds must be at least 1, --seconds positive")

    if args.ganeti_side:
        print(json.dumps(_ganeti_side(args.owners, args.locks, args.seconds, args.seed)))
        return 0

    _uncontended_figure()
    # Rounds alternate between the two sides so that both meet the same machine
    # conditions; each side's figure is its median round.
    corral_rounds: list[dict[str, Any]] = []
    ganeti_rounds: list[dict[str, Any]] = []
    unavailable: str | None = None
    for _ in range(args.rounds):
        corral_rounds.append(_corral_round(args))
        if unavailable is None:
            outcome = _ganeti_round(args)
            if isinstance(outcome, str):
                unavailable = outcome
            else:
                ganeti_rounds.append(outcome)
    corral_line, corral_rate = _contended_line("contended_corral", args, corral_rounds)
    print(json.dumps(corral_line))
    ratio: dict[str, Any] = {"bench": "locks", "figure": "ratio", **_params(args),
                             "target": TARGET_RATIO}
    if unavailable is not None:
        print(json.dumps({"bench": "locks", "figure": "contended_ganeti", **_params(args),
                          "ganeti": "unavailable", "reason": unavailable}))
        ratio.update(ratio="unavailable", meets_target=None, ganeti="unavailable")
    else:
        ganeti_line, ganeti_rate = _contended_line("contended_ganeti", args, ganeti_rounds)
        print(json.dumps({**ganeti_line, "ganeti": "3.0"}))
        value = corral_rate / ganeti_rate
        ratio.update(ratio=round(value, 2), meets_target=value >= TARGET_RATIO)
    print(json.dumps(ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
