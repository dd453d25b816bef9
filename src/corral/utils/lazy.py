"""Packages whose public names load on first use.

A package's ``__init__`` names its public surface (DESIGN: "each package has a small
public surface"), but importing every submodule to do so makes anything that needs
one name pay for all of them: a gnt-* tool that wants the blocking luxi client would
load the luxi server and asyncio with it. A package lists its names instead:

    if TYPE_CHECKING:                                   # what type checkers see
        from corral.luxi.client import Client
    __getattr__, __dir__ = lazy_exports(__name__, {"Client": "client"})

``from corral.luxi import Client`` then imports ``corral.luxi.client`` at that moment,
and only it (PEP 562). A name's module is imported once; the value is kept on the
package, so later lookups cost a dictionary access.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` for ``exports``: each
    public name and the submodule (relative to the package) that defines it; a name
    mapped to itself is that submodule."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__ with a fromlist returns the submodule itself; importlib would be
        # one more module for every tool to load
        loaded = __import__(f"{package}.{module}", fromlist=[name])
        value = loaded if name == module else getattr(loaded, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
