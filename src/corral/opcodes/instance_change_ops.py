"""Instance opcodes that change an instance besides its life cycle: modify, disks,
migration, failover, move and console; with Ganeti's OP_ID and parameter names."""

from __future__ import annotations

__all__: list[str] = []
