"""The htools (edges layer): ``hbal``, ``hspace``, ``hail``, ``hinfo``, ``hcheck`` and
``hscan``, with Ganeti's options, output and exit codes, backed by
:mod:`corral.allocator`.

A tool imports at start only its option parser; the engine (and NumPy) load when it
runs, so ``--help`` and bad command lines answer at once.
"""

from __future__ import annotations
