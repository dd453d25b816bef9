"""Small helpers shared by every layer: processes and pid files, atomic file writes, logging."""

from __future__ import annotations

__all__: list[str] = []
