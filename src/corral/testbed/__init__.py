"""A local multi-node corral cluster for tests and the demo (``python -m corral.testbed``)."""

from __future__ import annotations

from corral.testbed.core import STATE_FILE, Testbed, TestbedNode, down, failover, load, up

__all__ = ["STATE_FILE", "Testbed", "TestbedNode", "down", "failover", "load", "up"]
