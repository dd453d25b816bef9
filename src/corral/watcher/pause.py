"""The watcher's pause (``gnt-cluster watcher pause DURATION|continue|info``).

Every node keeps Ganeti's pause file, ``watcher.pause`` in its data directory: the
time until which the watcher does nothing, in whole seconds since the epoch, and a
newline. No file, or a time that has passed, means the watcher is not paused. The
master writes it on every node through their node daemons (luxi
``SetWatcherPause``), so each node's watcher honours the pause without asking the
master.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from corral.errors import OpPrereqError
from corral.utils.files import write_public

__all__ = ["TIMESPEC_UNITS", "parse_timespec", "paused_until", "write_pause"]

#: Ganeti's time specification suffixes (no suffix: seconds).
TIMESPEC_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_timespec(value: str) -> int:
    """Seconds in a time specification such as ``30``, ``90s``, ``5m``, ``1h``,
    ``2d``, ``1w``; a bad one is Ganeti's ``OpPrereqError`` (``wrong_input``)."""
    if not value:
        raise OpPrereqError("Empty time specification passed", ecode="wrong_input")
    multiplier = TIMESPEC_UNITS.get(value[-1])
    number = value if multiplier is None else value[:-1]
    if multiplier is not None and not number:
        raise OpPrereqError("Invalid time specification (only suffix passed)",
                            ecode="wrong_input")
    try:
        seconds = int(number)
    except ValueError:
        raise OpPrereqError(f"Invalid time specification '{number}'",
                            ecode="wrong_input") from None
    return seconds * (multiplier or 1)


def paused_until(path: Path, now: float | None = None) -> float | None:
    """Until when the pause file at ``path`` pauses the watcher; ``None`` when it does
    not (no file, an unreadable one, or a time that has passed)."""
    try:
        until = float(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return until if until > (time.time() if now is None else now) else None


def write_pause(path: Path, until: float | None) -> None:
    """Pause the watcher until ``until`` (seconds since the epoch), or end the pause
    (``None``: the file goes)."""
    if until is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_public(path, f"{int(until)}\n", 0o644)
