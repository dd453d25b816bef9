"""Pausing Python's cyclic garbage collector around work that builds many objects.

Building tens of thousands of objects (loading the configuration, a placement answer,
the cluster's placement view) triggers collection after collection, each walking every
tracked object of the process; pausing the collector meanwhile and letting it run
afterwards halves such work. The pause counts its holders across threads: the collector
is switched back on (if it was on before the first holder) only when the last one
leaves, so one thread's end of a pause never ends another's.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
#: How many holders are inside collector_paused; whether the collector was on before.
_holders = 0
_resume = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector from the first holder in to the last one out (in any
    thread). Only for work whose garbage has no reference cycles, or little of it:
    reference counting still frees the rest at once."""
    global _holders, _resume
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()
