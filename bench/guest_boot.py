"""Benchmark: the tiny guest under a bare ``qemu-system-x86_64``, from qemu's start to the
marker on its serial console.

This is the baseline of issue 13's benchmark (a), which compares a guest started through
corral against exactly this command line (:func:`corral.testbed.bareqemu.qemu_command`):
TCG, ``-machine pc``, 128 MiB, no NIC, the console on a unix socket that logs to a file,
which is polled every 20 ms. The guest is built (or found in its cache) before the clock
starts; each run starts one qemu, waits for the marker, then kills it. Runs are one
after another, so the machine runs one qemu at a time.

Prints one JSON line (seconds): the median, the fastest and the slowest run. Run:
``.venv/bin/python bench/guest_boot.py [--runs 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from corral.testbed import guest as tiny_guest
from corral.testbed.bareqemu import BareQemu


async def _boot_once(guest: tiny_guest.TinyGuest, workdir: Path) -> float:
    async with BareQemu(guest, workdir, tiny_guest.kernel_args()) as vm:
        await vm.wait_for(re.escape(tiny_guest.MARKER), 120)
        return time.monotonic() - vm.started


async def _main(runs: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="corral-bench-", dir="/tmp") as tmp:
        guest = tiny_guest.build(Path(tmp) / "guest")
        times = [await _boot_once(guest, Path(tmp) / f"vm{i}") for i in range(runs)]
    return {"bench": "guest_boot", "accel": "tcg", "runs": runs,
            "marker_median_s": round(statistics.median(times), 3),
            "marker_min_s": round(min(times), 3), "marker_max_s": round(max(times), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_main(args.runs))))


if __name__ == "__main__":
    main()
