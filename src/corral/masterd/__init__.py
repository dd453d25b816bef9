"""The master daemon: owns the configuration and answers luxi requests."""

from __future__ import annotations

from corral.masterd.daemon import NAME, run, serve
from corral.masterd.methods import MasterMethods

__all__ = ["NAME", "MasterMethods", "run", "serve"]
