"""Crash safety: a writer killed with SIGKILL at random moments never leaves a mix
of an old and a new configuration."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from corral.config import ConfigStore
from tests.unit.config_helpers import check_invariants, new_store
from tests.unit.crash_writer import MARKER

WRITER = Path(__file__).with_name("crash_writer.py")
ROUNDS = 6
TIME_BUDGET = 8.0


def _check(path: Path, base_serial: int) -> int:
    """Open the store, check it is consistent; the number of committed instances."""
    with ConfigStore.open(path) as store:
        check_invariants(store)
        count = store.count("instance")
        recorded = store.cluster.osparams.get(MARKER, {"instances": 0})["instances"]
        assert count == recorded, f"{count} instances but the cluster recorded {recorded}"
        assert store.serial - base_serial == count, (
            f"serial {store.serial} does not match {count} commits after {base_serial}"
        )
        assert sorted(i.name for i in store.all("instance")) == sorted(
            f"crash{n}" for n in range(1, count + 1)
        )
        return count


def test_sigkill_during_commits_leaves_old_or_new(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    with new_store(path) as store:
        base_serial = store.serial
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    deadline = time.monotonic() + TIME_BUDGET
    counts = [0]
    for _round in range(ROUNDS):
        proc = subprocess.Popen([sys.executable, str(WRITER), str(path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            assert ready == "ready\n", f"writer did not start: {ready!r} {proc.stderr.read()!r}"
            time.sleep(rng.uniform(0.0, 0.4))
            assert proc.poll() is None, f"writer died: {proc.stderr.read()!r}"  # type: ignore[union-attr]
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        counts.append(_check(path, base_serial))
        assert counts[-1] >= counts[-2], f"seed {seed}: committed instances vanished {counts}"
        if time.monotonic() > deadline:
            break
    assert counts[-1] > 0, f"seed {seed}: the writer never committed anything"
    print(f"seed {seed}: committed instances after each kill: {counts[1:]}")
