"""Ganeti's daemon start: a daemon goes into the background unless ``-f`` is given.

A daemon started by hand without ``-f/--foreground`` starts a copy of itself with
``--foreground`` in a new session, detached from the terminal, its output going to
its log file; the command waits until that copy serves (or says why it cannot) and
then exits: 0 once the daemon serves, 1 with the daemon's own reason otherwise, as
Ganeti's daemons do. A daemon started by a supervisor that waits for it
(``corral-daemons``, the testbed: :func:`corral.utils.process.start_daemon`) or
given ``-f`` stays in the foreground.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from corral.errors import DaemonError
from corral.utils.process import READY_FD_ENV, start_daemon

__all__ = ["FOREGROUND_FLAG", "background_unless_foreground"]

#: The option the background copy is started with.
FOREGROUND_FLAG = "--foreground"


def background_unless_foreground(foreground: bool, daemon: str, module: str,
                                 log_file: Path) -> None:
    """Return when the daemon should run in this process; otherwise start it in the
    background (``python -m module --foreground`` and this command's arguments) and
    exit with whether it started."""
    if foreground or os.environ.get(READY_FD_ENV):
        return
    argv = [sys.executable, "-m", module, FOREGROUND_FLAG, *sys.argv[1:]]
    try:
        start_daemon(daemon, argv, log_file=log_file)
    except DaemonError as err:
        print(err.message, file=sys.stderr)
        sys.exit(1)
    sys.exit(0)
