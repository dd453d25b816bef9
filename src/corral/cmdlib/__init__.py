"""Logical units: the cluster's operations, one module per area.

They check arguments and prerequisites against a configuration snapshot and change
private copies of objects; they never touch SQLite, sockets or subprocesses.
"""

from __future__ import annotations

__all__: list[str] = []
