"""Where confd listens and whom it runs as: ``confd.json`` and the command line.

Apart from the daemon so that ``corral-confd-query`` can learn confd's port without
loading the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from corral.confd.protocol import DEFAULT_PORT
from corral.paths import Paths
from corral.utils import settings as daemon_settings
from corral.utils.settings import check_bind, check_port

__all__ = ["NAME", "SETTING_KEYS", "Settings", "read_settings", "settings_file"]

#: The daemon's name, used for its pid, log and stats files.
NAME = "confd"


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where confd listens and whom it runs as (``confd.json`` holds these keys)."""

    bind: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    user: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        self.bind = check_bind(self.bind)
        check_port(self.port, allow_zero=True)


#: Keys of ``confd.json``.
SETTING_KEYS = Settings.__struct_fields__


def settings_file(paths: Paths) -> Path:
    """Optional per-node settings (JSON object with keys :data:`SETTING_KEYS`), so
    that ``corral-daemons`` and the testbed can start confd without arguments."""
    return paths.data_dir / f"{NAME}.json"


def read_settings(paths: Paths, **given: Any) -> Settings:
    """Command-line values (``given``; None when not given) over ``confd.json`` over
    the defaults (all addresses, port 1814, no privilege change)."""
    return daemon_settings.read_settings(settings_file(paths), Settings, given)
