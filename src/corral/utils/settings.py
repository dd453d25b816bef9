"""Daemon settings: the command line over a JSON file over the defaults, checked once.

Each daemon that listens somewhere (noded, confd, rapi) reads an optional JSON
object from its file in the data directory (``noded.json``, ``confd.json``,
``rapi.json``), so ``corral-daemons`` and the testbed can start it without
arguments. The daemon describes its settings as a :class:`msgspec.Struct` with
defaults; :func:`read_settings` merges and checks them the same way for all, and
its errors name where a bad value came from (the file or the command line).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from corral import serializer
from corral.errors import ParameterError

__all__ = ["check_bind", "check_port", "read_settings"]

S = TypeVar("S", bound=msgspec.Struct)

_AT_FIELD = re.compile(r" - at `\$\.(?P<field>\w+)`$")


def check_bind(value: str) -> str:
    """``value`` as an IP address in its canonical form; a :class:`ValueError` naming
    it otherwise (meant for a settings Struct's ``__post_init__``)."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"bind address {value!r} is not an IP address") from None


def check_port(value: int, *, allow_zero: bool = False) -> int:
    """``value`` if it is a TCP/UDP port (0, any free port, only with ``allow_zero``)."""
    if not (0 if allow_zero else 1) <= value <= 65535:
        lowest = 0 if allow_zero else 1
        raise ValueError(f"port {value!r} is not a port number ({lowest}-65535)")
    return value


def _load(path: Path, known: tuple[str, ...]) -> dict[str, Any]:
    try:
        data = serializer.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ParameterError(f"cannot read the settings file {path}: {err}") from None
    if not isinstance(data, dict):
        raise ParameterError(f"{path} must hold a JSON object with keys among "
                             f"{', '.join(known)}")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ParameterError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: "
                             f"{', '.join(known)}")
    return data


def read_settings(path: Path, kind: type[S], given: Mapping[str, Any] | None = None, *,
                  defaults: Mapping[str, Any] | None = None) -> S:
    """The settings ``kind`` from the command line (``given``: values left None were
    not given) over the JSON file ``path`` (optional) over ``defaults`` and the
    Struct's own defaults.

    :raises ParameterError: the file is unreadable, not an object, has unknown keys,
        or a value is invalid; the message says whether it came from the file or
        the command line (``--<name>``).
    """
    known = kind.__struct_fields__
    from_file = _load(path, known)
    from_command_line = {key: value for key, value in (given or {}).items()
                         if value is not None and key in known}
    merged = {**(defaults or {}), **from_file, **from_command_line}
    try:
        return msgspec.convert(merged, kind)
    except msgspec.ValidationError as err:
        message = str(err)
        match = _AT_FIELD.search(message)
        field = match["field"] if match else None
        if match:
            message = f"{field}: {message[:match.start()]}"
        if field is not None and field in from_command_line:
            where = f"--{field.replace('_', '-')}"
        elif field is None and from_command_line:
            where = f"{path} or the command line"
        else:
            where = str(path)
        raise ParameterError(f"{where}: {message}") from None
