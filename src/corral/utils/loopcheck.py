"""A test mode that reports every callback that blocks a daemon's event loop.

A corral daemon does its blocking work (disk writes, SQLite, subprocess waits) off
its event loop; a callback that holds the loop stalls every client of the daemon.
To catch one, set ``CORRAL_LOOP_CHECK`` in a daemon's environment:

* ``CORRAL_LOOP_CHECK=1`` (or ``on``, ``yes``, ``true``): check with the default
  threshold, :data:`DEFAULT_THRESHOLD_MS` milliseconds;
* ``CORRAL_LOOP_CHECK=250``: a callback that runs longer than 250 ms is reported;
* unset, empty, ``0`` or ``off``: no check (the default).

The daemon's loop (:func:`run` replaces :func:`asyncio.run`) then times every
callback it runs, as asyncio's debug mode does with its ``slow_callback_duration``,
and each one over the threshold gives a log line in the daemon's log file with
:data:`MARKER`, naming the callback (the task it steps: its coroutine) and how long it
held the loop. While a callback holds the loop past the threshold, a watchdog thread
also logs where the loop thread is at that moment (the innermost frames of its
stack): that names the blocking call itself, not just the task it happened in. The
integration tests set the variable for every daemon they start and fail a test whose
daemons logged such a line (:func:`reports`).

asyncio's debug mode itself is not used: it records a traceback for every callback
scheduled, which costs more than the check, and on a busy two-core machine that
recording (``linecache.checkcache``) was itself what held noded's loop past 100 ms.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterable
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


class _Watchdog:
    """Times every callback the loop thread runs (see :func:`_timed_run`); a thread
    looks every quarter threshold and, when a callback overstays, logs the loop
    thread's stack at that moment."""

    #: Innermost frames of the loop thread's stack shown in a report.
    FRAMES = 6

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: float) -> None:
        self.loop = loop
        self.thread_id = threading.get_ident()
        self.limit = limit
        self.running: tuple[float, asyncio.Handle] | None = None
        self.reported: asyncio.Handle | None = None
        self.log = logging.getLogger("corral.loopcheck")
        threading.Thread(target=self._watch, name="loopcheck", daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(self.limit / 4)
            running = self.running
            if running is None or running[1] is self.reported:
                continue
            started, handle = running
            held = time.monotonic() - started
            if held <= self.limit:
                continue
            frame = sys._current_frames().get(self.thread_id)
            if frame is None or self.running is not running:
                continue
            self.reported = handle
            stack = _inside_callback(traceback.extract_stack(frame))[-self.FRAMES:]
            where = " <- ".join(f"{f.filename}:{f.lineno} {f.name}" for f in reversed(stack))
            self.log.error("%s: %s has held the event loop for over %.3f s; the loop's "
                           "thread is at %s", MARKER, _describe(handle), held, where)

    def finished(self, handle: asyncio.Handle, held: float) -> None:
        """After each callback: report it when it held the loop past the threshold."""
        if held > self.limit:
            self.log.error("%s: %s held the event loop for %.3f s (threshold %d ms)", MARKER,
                           _describe(handle), held, round(self.limit * 1000))


def _inside_callback(stack: traceback.StackSummary) -> list[traceback.FrameSummary]:
    """The frames of ``stack`` inside the callback (below asyncio's ``Handle._run``)."""
    frames = list(stack)
    for index in range(len(frames) - 1, -1, -1):
        if frames[index].name == _timed_run.__name__ and frames[index].filename == __file__:
            return frames[index + 2:]
    return frames


def _describe(handle: asyncio.Handle) -> str:
    """The task a callback steps or wakes (its coroutine and where it waits), else the
    callback itself."""
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    try:
        return repr(owner if isinstance(owner, asyncio.Task) else handle)
    except Exception:  # the loop thread is changing it right now
        return type(handle).__name__


_watchdog: _Watchdog | None = None
_handle_run: Callable[[asyncio.Handle], None] = asyncio.Handle._run


def _timed_run(handle: asyncio.Handle) -> None:
    """``Handle._run`` with the loop check's timing, on the watched loop's thread."""
    watchdog = _watchdog
    if watchdog is None or threading.get_ident() != watchdog.thread_id:
        _handle_run(handle)
        return
    started = time.monotonic()
    watchdog.running = (started, handle)
    try:
        _handle_run(handle)
    finally:
        watchdog.running = None
        watchdog.finished(handle, time.monotonic() - started)


def enable(loop: asyncio.AbstractEventLoop, limit: float) -> None:
    """Report every callback that holds ``loop`` (run by this thread) longer than
    ``limit`` seconds; only the first loop a process enables it for is watched."""
    global _watchdog
    if _watchdog is None:
        _watchdog = _Watchdog(loop, limit)
        setattr(asyncio.Handle, "_run", _timed_run)  # noqa: B010


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` like :func:`asyncio.run`, with the loop check when
    ``CORRAL_LOOP_CHECK`` asks for it."""
    limit = threshold()
    if limit is None:
        return asyncio.run(main)
    with asyncio.Runner() as runner:
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
