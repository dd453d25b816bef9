"""A test mode that reports every callback that blocks a daemon's event loop.

A corral daemon does its blocking work (disk writes, SQLite, subprocess waits) off
its event loop; a callback that holds the loop stalls every client of the daemon.
To catch one, set ``CORRAL_LOOP_CHECK`` in a daemon's environment:

* ``CORRAL_LOOP_CHECK=1`` (or ``on``, ``yes``, ``true``): check with the default
  threshold, :data:`DEFAULT_THRESHOLD_MS` milliseconds;
* ``CORRAL_LOOP_CHECK=250``: a callback that runs longer than 250 ms is reported;
* unset, empty, ``0`` or ``off``: no check (the default; asyncio's debug mode costs).

The daemon then runs its loop in asyncio's debug mode with that slow-callback
threshold (:func:`run` replaces :func:`asyncio.run`), and each slow callback gives
one log line in the daemon's log file starting with :data:`MARKER`, naming the
callback (a task's coroutine and where it was created) and how long it held the
loop. The integration tests set the variable for every daemon they start and fail
a test whose daemons logged such a line (:func:`reports`). Debug mode also
makes asyncio complain about coroutines never awaited and calls from other threads.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "DEFAULT_THRESHOLD_MS",
    "LOOP_CHECK_ENV",
    "MARKER",
    "blocked_lines",
    "enable",
    "reports",
    "run",
    "threshold",
]

#: The environment variable that turns the check on (see the module's docstring).
LOOP_CHECK_ENV = "CORRAL_LOOP_CHECK"
#: The threshold with ``CORRAL_LOOP_CHECK=1``: generous, for slow shared test machines.
DEFAULT_THRESHOLD_MS = 100
#: What every report line of a blocked loop contains.
MARKER = "corral-loop-blocked"

T = TypeVar("T")

#: asyncio's own message for a slow callback (``Executing <handle> took N seconds``).
_SLOW_CALLBACK = "Executing %s took %.3f seconds"


def threshold(environ: dict[str, str] | None = None) -> float | None:
    """The slow-callback threshold in seconds that the environment asks for, or None."""
    value = (os.environ if environ is None else environ).get(LOOP_CHECK_ENV, "")
    value = value.strip().lower()
    if value in ("", "0", "off", "no", "false"):
        return None
    if value in ("1", "on", "yes", "true"):
        return DEFAULT_THRESHOLD_MS / 1000
    try:
        milliseconds = float(value)
    except ValueError:
        return DEFAULT_THRESHOLD_MS / 1000
    return milliseconds / 1000 if milliseconds > 0 else None


class _Reporter(logging.Filter):
    """Turns asyncio's slow-callback warning into the distinctive report line."""

    def __init__(self, limit: float) -> None:
        super().__init__()
        self.limit_ms = round(limit * 1000)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _SLOW_CALLBACK and isinstance(record.args, tuple):
            callback, seconds = record.args
            record.msg = f"{MARKER}: %s held the event loop for %.3f s (threshold %d ms)"
            record.args = (callback, seconds, self.limit_ms)
            record.levelno, record.levelname = logging.ERROR, "ERROR"
        return True


def enable(loop: asyncio.AbstractEventLoop, limit: float) -> None:
    """Put ``loop`` in debug mode with a slow-callback threshold of ``limit`` seconds and
    make its reports carry :data:`MARKER`."""
    loop.set_debug(True)
    loop.slow_callback_duration = limit
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _Reporter) for f in logger.filters):
        logger.addFilter(_Reporter(limit))


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` like :func:`asyncio.run`, with the loop check when
    ``CORRAL_LOOP_CHECK`` asks for it."""
    limit = threshold()
    if limit is None:
        return asyncio.run(main)
    with asyncio.Runner(debug=True) as runner:
        enable(runner.get_loop(), limit)
        return runner.run(main)


def reports(directory: Path) -> list[str]:
    """Every report of a blocked loop in the daemons' log files (``*.log``) under
    ``directory``, each as ``corral-<daemon> (<log file>): <line>``."""
    return [f"corral-{path.stem} ({path.relative_to(directory)}): {line}"
            for path, line in blocked_lines(sorted(directory.rglob("*.log")))]


def blocked_lines(log_files: Iterable[Path]) -> list[tuple[Path, str]]:
    """Every report of a blocked loop in ``log_files`` (missing files are skipped)."""
    found: list[tuple[Path, str]] = []
    for path in log_files:
        try:
            with path.open(encoding="utf-8", errors="replace") as handle:
                found.extend((path, line.rstrip("\n")) for line in handle if MARKER in line)
        except FileNotFoundError:
            continue
    return found
