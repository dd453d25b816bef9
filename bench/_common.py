"""What the benchmark scripts share: running the testbed and taking percentiles.

Not a benchmark itself (``make bench`` runs ``bench/[!_]*.py``); the scripts import it
from their own directory.
"""

from __future__ import annotations

import subprocess
import sys

__all__ = ["percentile", "testbed"]


def testbed(*args: str, timeout: float = 300) -> None:
    """Run ``python -m corral.testbed ARGS`` (``up``, ``down``...); raise if it fails."""
    subprocess.run([sys.executable, "-m", "corral.testbed", *args], check=True,
                   capture_output=True, timeout=timeout)


def percentile(values: list[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of the sorted ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]
