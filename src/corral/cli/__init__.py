"""The gnt-* command-line tools and what they share (edges layer)."""

from __future__ import annotations

__all__: list[str] = []
