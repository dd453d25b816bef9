"""Disk data transport between node daemons (Ganeti's import/export daemons).

An *importer* listens (TLS) on a port of a range and feeds what it receives,
decompressed, to a file, a device or an OS ``import`` script; an *exporter* reads a
file, a device or an OS ``export`` script's output, compresses it and sends it to the
importer. A per-transfer random magic, checked before any data flows, keeps a stream
from reaching the wrong importer. See docs/backup.md for the wire protocol.
"""

from __future__ import annotations

from corral.impexp.compression import (
    DEFAULT_COMPRESSION_TOOLS,
    NO_COMPRESSION,
    check_tool_name,
    compress_argv,
    decompress_argv,
    require_allowed,
)
from corral.impexp.pipeline import Endpoint
from corral.impexp.transfer import FINAL_STATES, Transfer, start_export, start_import
from corral.impexp.wire import PROTOCOL, TransferRefused, new_magic

__all__ = [
    "DEFAULT_COMPRESSION_TOOLS",
    "FINAL_STATES",
    "NO_COMPRESSION",
    "PROTOCOL",
    "Endpoint",
    "Transfer",
    "TransferRefused",
    "check_tool_name",
    "compress_argv",
    "decompress_argv",
    "new_magic",
    "require_allowed",
    "start_export",
    "start_import",
]
