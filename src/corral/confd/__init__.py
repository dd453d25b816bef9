"""confd: answers configuration queries over UDP (wiring layer).

The wire protocol is Ganeti's (``plj0`` + HMAC-SHA1-signed JSON, seed 002):
:mod:`~corral.confd.protocol` packs and checks packets, :mod:`~corral.confd.answers`
computes answers from a configuration snapshot, :mod:`~corral.confd.server` is the
UDP side of ``corral-confd`` and :mod:`~corral.confd.client` asks several master
candidates at once and keeps the answer with the highest serial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from corral.confd.client import ConfdAnswer, ConfdClient, QueryResult, query_sync
    from corral.confd.protocol import (
        DEFAULT_PORT,
        ErrorCode,
        NodeRole,
        QueryKey,
        QueryType,
        Status,
    )

__all__ = [
    "DEFAULT_PORT",
    "ConfdAnswer",
    "ConfdClient",
    "ErrorCode",
    "NodeRole",
    "QueryKey",
    "QueryResult",
    "QueryType",
    "Status",
    "query_sync",
]

# Names load on first use: the protocol and settings need no event loop.
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("ConfdAnswer", "ConfdClient", "QueryResult", "query_sync"), "client"),
    **dict.fromkeys(("DEFAULT_PORT", "ErrorCode", "NodeRole", "QueryKey", "QueryType",
                     "Status"), "protocol"),
})
