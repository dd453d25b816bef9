"""Compression tools for disk transfers, as Ganeti's cluster ``compression_tools``.

A transfer names one tool (Ganeti's ``--compress`` / ``--transport-compression``) or
``none``. The known tools are the ones Ganeti 3.0 offers (``gzip``, ``gzip-fast``,
``gzip-slow``) and ``zstd``; another name of the accepted form is run as Ganeti
runs one, ``<tool> -c`` to compress and ``<tool> -d -c`` to decompress. The tools run
as separate processes reading and writing pipes, so compression uses another core and
never the node daemon's event loop. The ``zstd`` command line tool (Debian package
``zstd``) is used rather than the ``zstandard`` wheel for that reason, and because
it is what an administrator would run by hand to check an export.
"""

from __future__ import annotations

import re
import shutil

from corral.errors import ParameterError

__all__ = [
    "DEFAULT_COMPRESSION_TOOLS",
    "NO_COMPRESSION",
    "check_tool_name",
    "compress_argv",
    "decompress_argv",
    "require_allowed",
]

#: The value meaning "send the data as it is".
NO_COMPRESSION = "none"

#: The cluster's ``compression_tools`` of a new cluster: Ganeti 3.0's list (as
#: ``gnt-cluster info`` shows it) and zstd, much faster than gzip at a similar ratio.
DEFAULT_COMPRESSION_TOOLS: tuple[str, ...] = ("gzip", "gzip-fast", "gzip-slow", "zstd")

_KNOWN: dict[str, tuple[list[str], list[str]]] = {
    "gzip": (["gzip", "-c"], ["gzip", "-d", "-c"]),
    "gzip-fast": (["gzip", "-1", "-c"], ["gzip", "-d", "-c"]),
    "gzip-slow": (["gzip", "-9", "-c"], ["gzip", "-d", "-c"]),
    "zstd": (["zstd", "-q", "-c", "-T0"], ["zstd", "-q", "-d", "-c"]),
}

_TOOL_NAME = re.compile(r"[-_a-zA-Z0-9]+")


def check_tool_name(name: str) -> str:
    """``name`` if it is a usable tool name (letters, digits, ``-``, ``_``), else a
    :class:`~corral.errors.ParameterError`."""
    if not _TOOL_NAME.fullmatch(name):
        raise ParameterError(f"invalid compression tool name {name!r}: only letters, digits, "
                             "'-' and '_' are accepted")
    return name


def require_allowed(name: str, allowed: tuple[str, ...] | list[str]) -> str:
    """``name`` if it is ``none`` or one of the cluster's ``allowed`` tools; otherwise a
    :class:`~corral.errors.ParameterError` listing the allowed ones."""
    if name == NO_COMPRESSION or name in allowed:
        return name
    raise ParameterError(f"compression tool {name!r} is not allowed on this cluster; "
                         f"allowed: {', '.join([NO_COMPRESSION, *allowed])} (see "
                         "gnt-cluster modify --compression-tools)")


def _argv(name: str, index: int) -> list[str]:
    check_tool_name(name)
    argv = list(_KNOWN[name][index]) if name in _KNOWN else \
        [name, "-c"] if index == 0 else [name, "-d", "-c"]
    if shutil.which(argv[0]) is None:
        raise ParameterError(f"compression tool {name!r} needs the command {argv[0]!r}, "
                             "which this node does not have")
    return argv


def compress_argv(name: str) -> list[str]:
    """The command that compresses stdin to stdout with tool ``name``."""
    return _argv(name, 0)


def decompress_argv(name: str) -> list[str]:
    """The command that decompresses stdin to stdout for tool ``name``."""
    return _argv(name, 1)
