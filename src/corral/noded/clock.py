"""Telling at start whether this node's clock can be right.

Node daemons accept only peers whose certificate is valid by their own clock. A node
whose clock runs far behind finds the master's certificate not valid yet and refuses
every call, and from the master's side this looks like a node that closes
connections; one far ahead finds certificates expired. The node's own certificate,
made by the master when the node joined, bounds the right time from below (and its
end from above), so the node daemon checks its clock against it at start and says in
its log what is wrong, where the administrator of the node looks.
"""

from __future__ import annotations

import datetime as dt

from corral.errors import CorralError
from corral.paths import Paths
from corral.x509 import load_cert_info

__all__ = ["clock_problem"]


def clock_problem(paths: Paths, now: dt.datetime | None = None) -> str | None:
    """Why this node's clock cannot be right, judged by its own certificate; None when
    it may be (or the node has not joined a cluster yet)."""
    try:
        info = load_cert_info(paths.node_cert.read_bytes())
    except (OSError, CorralError):
        return None
    moment = now if now is not None else dt.datetime.now(dt.UTC)
    shown = f"{moment:%Y-%m-%d %H:%M:%S} UTC"
    if moment < info.not_before:
        return (f"this node's clock ({shown}) is before the start of its certificate's "
                f"validity ({info.not_before:%Y-%m-%d %H:%M:%S} UTC), set by the master when "
                "the node joined: the master's certificate is not valid yet here either, "
                "so this node refuses the master's calls; set the clock right (NTP)")
    if moment > info.not_after:
        return (f"this node's clock ({shown}) is past the end of its certificate's validity "
                f"({info.not_after:%Y-%m-%d %H:%M:%S} UTC): if the clock is wrong, set it "
                "right (NTP); if not, renew the certificates (gnt-cluster renew-crypto)")
    return None
