"""The allocator (engines layer): htools' cluster model, score and algorithms.

Pure logic and reading files, no daemons or sockets: the master daemon runs it as
the built-in iallocator ``corral`` (:func:`answer`), the ``hail`` plugin speaks the
iallocator protocol with it, and ``hbal``/``hspace``/``hinfo``/``hcheck``/``hscan``
use it on a cluster read from a text file, luxi or RAPI.
"""

from __future__ import annotations
