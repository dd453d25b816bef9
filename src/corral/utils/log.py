"""Logging set-up shared by the daemons: one file per daemon, one line per record."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

__all__ = ["setup_daemon_logging"]

_FORMAT = "%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s"


def setup_daemon_logging(log_file: Path, *, debug: bool = False, console: bool = False) -> None:
    """Log to ``log_file`` (and stderr when ``console``); debug adds DEBUG records.

    When the log file cannot be opened the records go to stderr instead, so a
    daemon never dies for lack of a log (design 2.1).
    """
    handlers: list[logging.Handler] = []
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file))
    except OSError as err:
        print(f"cannot open log file {log_file}: {err}; logging to stderr", file=sys.stderr)
        console = True
    if console:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO, format=_FORMAT, handlers=handlers,
        force=True,
    )
