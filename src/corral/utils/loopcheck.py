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
loop. While a callback holds the loop past the threshold, a watchdog thread also logs
where the loop thread is at that moment (the innermost frames of its stack), which
names the blocking call itself rather than the task it happened in. The
integration tests set the variable for every daemon they start and fail
a test whose daemons logged such a line (:func:`reports`). Debug mode also
makes asyncio complain about coroutines never awaited and calls from other threads.
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


class _Watchdog:
    """Notes which callback the loop thread runs since when; a thread looks every
    quarter threshold and logs the loop thread's stack when one overstays."""

    #: Innermost frames of the loop thread's stack shown in a report.
    FRAMES = 6

    def __init__(self, thread_id: int, limit: float) -> None:
        self.thread_id = thread_id
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
            self.log.error("%s: the event loop is held for over %.3f s by %s; its thread is "
                           "at %s", MARKER, held, _describe(handle), where)


def _inside_callback(stack: traceback.StackSummary) -> list[traceback.FrameSummary]:
    """The frames of ``stack`` inside the callback (below asyncio's ``Handle._run``)."""
    frames = list(stack)
    for index in range(len(frames) - 1, -1, -1):
        if frames[index].name == _timed_run.__name__ and frames[index].filename == __file__:
            return frames[index + 2:]
    return frames


def _describe(handle: asyncio.Handle) -> str:
    try:
        return repr(handle)
    except Exception:  # the loop thread is changing it right now
        return type(handle).__name__


_watchdog: _Watchdog | None = None
_handle_run: Callable[[asyncio.Handle], None] = asyncio.Handle._run


def _timed_run(handle: asyncio.Handle) -> None:
    watchdog = _watchdog
    if watchdog is None or threading.get_ident() != watchdog.thread_id:
        _handle_run(handle)
        return
    watchdog.running = (time.monotonic(), handle)
    try:
        _handle_run(handle)
    finally:
        watchdog.running = None


def enable(loop: asyncio.AbstractEventLoop, limit: float) -> None:
    """Put ``loop`` (run by this thread) in debug mode with a slow-callback threshold of
    ``limit`` seconds, make its reports carry :data:`MARKER` and watch it."""
    global _watchdog
    loop.set_debug(True)
    loop.slow_callback_duration = limit
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _Reporter) for f in logger.filters):
        logger.addFilter(_Reporter(limit))
    if _watchdog is None:
        _watchdog = _Watchdog(threading.get_ident(), limit)
        setattr(asyncio.Handle, "_run", _timed_run)  # noqa: B010


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
