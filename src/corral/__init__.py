"""corral: a cluster manager for virtual machines that speaks Ganeti's interfaces."""

from __future__ import annotations

__all__ = ["CONFIG_SCHEMA_VERSION", "LUXI_VERSION", "__version__"]

#: The software release.
__version__ = "0.1.0"

#: Version of the luxi protocol between clients and the master daemon.
LUXI_VERSION = 1

#: Version of the configuration store's schema; a store with a higher one is refused.
CONFIG_SCHEMA_VERSION = 1
