"""What transfers leave behind on a node, and cleaning it (the watcher's pass).

The node daemon keeps a status file per transfer in :attr:`Paths.impexp_dir` (with
its own pid and the pids and start times of the transfer's processes). A transfer
whose node daemon is gone (killed, restarted) is *stale*: its processes may still
run and the file it was importing is half-written. :func:`clean_stale` kills those
processes (only when a pid still names the same process: same start time), removes
the half-written file and the status and log files; finished transfers are forgotten
after :data:`KEEP_FINISHED` seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from corral.paths import Paths

__all__ = ["KEEP_FINISHED", "clean_stale", "kill_leftovers", "process_start", "read_statuses"]

#: How long the status of a finished transfer is kept (seconds).
KEEP_FINISHED = 3600.0

_FINAL = frozenset({"done", "failed", "aborted"})


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (``/proc/<pid>/stat``), None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if len(fields) > 19 else None


def read_statuses(paths: Paths) -> list[dict[str, Any]]:
    """Every status file of this node (a broken one as ``{"name"}`` alone)."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(paths.impexp_dir.glob("*.json")):
            try:
                status = json.loads(path.read_text())
            except (OSError, ValueError):
                status = {}
            status["name"] = path.name[:-5]
            found.append(status)
    return found


def kill_leftovers(status: dict[str, Any]) -> None:
    """Kill the processes of a dead transfer and remove the file it was importing."""
    for pid_text, started in (status.get("pid_starts") or {}).items():
        pid = int(pid_text)
        if started is not None and process_start(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    destination = status.get("destination")
    if destination and status.get("direction") == "import" and status.get("state") != "done":
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            Path(destination).unlink()


def forget(paths: Paths, name: str) -> None:
    """Remove a transfer's status and log files."""
    for path in (paths.impexp_dir / f"{name}.json", paths.impexp_dir / f"{name}.log"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _daemon_alive(status: dict[str, Any]) -> bool:
    pid = status.get("daemon_pid")
    start = status.get("daemon_start")
    return isinstance(pid, int) and start is not None and process_start(pid) == start


def clean_stale(paths: Paths) -> list[str]:
    """Clean the transfers whose node daemon is gone, and finished ones older than
    :data:`KEEP_FINISHED`; one line per transfer cleaned."""
    now = time.time()
    cleaned = []
    for status in read_statuses(paths):
        name = status["name"]
        if status.get("state") in _FINAL:
            if now - float(status.get("finished") or 0) < KEEP_FINISHED:
                continue
            forget(paths, name)
            cleaned.append(f"finished transfer {name}")
        elif not _daemon_alive(status):
            kill_leftovers(status)
            forget(paths, name)
            cleaned.append(f"stale transfer {name} (its node daemon is gone)")
    return cleaned
