"""The watcher (wiring layer): one pass per run of ``corral-watcher`` on every node.

It keeps the cluster as the administrator asked: daemons that died are started
again, instances that should run and are found down are restarted (a limited number
of times, with back-off), disks of instances on a rebooted node are activated,
old jobs are archived and stale state is cleaned. It runs from a timer outside the
daemons it restarts (``share/cron.d/corral-watcher``, or the systemd units in
``share/systemd``): see :mod:`corral.watcher.run` for a pass,
:mod:`corral.watcher.pause` for ``gnt-cluster watcher pause`` and
:mod:`corral.watcher.state` for what it remembers between runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from corral.watcher.pause import parse_timespec, paused_until, write_pause
    from corral.watcher.run import Options, Report, run_pass
    from corral.watcher.state import WatcherState

__all__ = ["Options", "Report", "WatcherState", "parse_timespec", "paused_until",
           "run_pass", "write_pause"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "Options": "run", "Report": "run", "run_pass": "run", "WatcherState": "state",
    "parse_timespec": "pause", "paused_until": "pause", "write_pause": "pause",
})
