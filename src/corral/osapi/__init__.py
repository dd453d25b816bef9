"""OS definitions (Ganeti OS API versions 10, 15 and 20), node side.

An OS definition is a directory of scripts that installs, renames, exports and imports an
instance's operating system; see ``ganeti-os-interface(7)``, whose interface corral keeps
so existing definitions work unchanged. This package finds definitions along the OS search
path (:func:`discover`, :func:`find_os`), builds the environment their scripts get
(:func:`build_env`, :func:`core_env`, :func:`osparams_env`, :func:`transfer_env`) and runs
them with logging and a timeout (:func:`run_script`, :func:`verify_params`).
"""

from __future__ import annotations

from corral.osapi.definition import (
    SUPPORTED_API_VERSIONS,
    OsDefinition,
    discover,
    find_os,
    read_os,
    split_name,
)
from corral.osapi.environment import (
    DEFAULT_PATH,
    build_env,
    core_env,
    osparams_env,
    transfer_env,
)
from corral.osapi.runner import QUOTED_LINES, run_script, verify_params

__all__ = [
    "DEFAULT_PATH",
    "QUOTED_LINES",
    "SUPPORTED_API_VERSIONS",
    "OsDefinition",
    "build_env",
    "core_env",
    "discover",
    "find_os",
    "osparams_env",
    "read_os",
    "run_script",
    "split_name",
    "transfer_env",
    "verify_params",
]
