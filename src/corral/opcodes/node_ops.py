"""Node and node-group opcodes, with Ganeti's OP_ID and parameter names."""

from __future__ import annotations

__all__: list[str] = []
