"""Disks qemu reaches with its own client (``access=userspace``): from the URI a node
gives for such a disk to qemu's block node options.

A disk is used through a node-local path (an absolute path: a file or a block
device) or a URI. corral's kvm knows qemu's ``rbd:`` notation, which Ceph's rbd
driver and ExtStorage providers for Ceph print (``kvm:rbd:<pool>/<image>``, the
interface's own example)::

    rbd:<pool>[/<namespace>]/<image>[@<snapshot>][:conf=<file>][:id=<user>]

(``\\`` escapes a ``:``, ``/``, ``@`` or ``\\`` in a part). It becomes the protocol
node of a raw disk: ``{"driver": "rbd", "pool", "image", ...}`` in QAPI's
``BlockdevOptionsRbd``, which ``-blockdev`` and ``blockdev-add`` both take, so a
started and a hot-plugged disk look the same to qemu, and a live migration between
nodes opens the same image on the target.
"""

from __future__ import annotations

from typing import Any

from corral.errors import HypervisorError

__all__ = ["is_uri", "protocol_node"]

#: Keys of the ``rbd:`` notation corral passes to qemu, and qemu's names for them.
_RBD_KEYS = {"conf": "conf", "id": "user"}


def is_uri(where: str) -> bool:
    """Whether ``where`` (what a node answered for a disk) is a URI, not a path."""
    return not where.startswith("/")


def _split_raw(text: str, separator: str) -> list[str]:
    """``text`` cut at each ``separator`` not escaped by ``\\``; escapes are kept."""
    parts: list[str] = []
    start = 0
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def _unescape(text: str) -> str:
    result: list[str] = []
    escaped = False
    for char in text:
        if escaped or char != "\\":
            result.append(char)
            escaped = False
        else:
            escaped = True
    return "".join(result)


def _rbd(uri: str, label: str) -> dict[str, Any]:
    location, *options = _split_raw(uri[len("rbd:"):], ":")
    segments = _split_raw(location, "/")
    image = _split_raw(segments[-1], "@")
    if len(segments) not in (2, 3) or len(image) > 2 or not all(segments) or not image[0]:
        raise HypervisorError(f"{label}: {uri!r} is not an rbd URI of the form "
                              "rbd:<pool>[/<namespace>]/<image>[@<snapshot>][:conf=<file>]")
    node: dict[str, Any] = {"driver": "rbd", "pool": _unescape(segments[0]),
                            "image": _unescape(image[0])}
    if len(segments) == 3:
        node["namespace"] = _unescape(segments[1])
    if len(image) == 2:
        node["snapshot"] = _unescape(image[1])
    for option in options:
        key, sep, value = _unescape(option).partition("=")
        if not sep or key not in _RBD_KEYS or not value:
            raise HypervisorError(
                f"{label}: option {option!r} of {uri!r} is not one corral passes to qemu "
                f"(known: {', '.join(f'{k}=...' for k in _RBD_KEYS)})")
        node[_RBD_KEYS[key]] = value
    return node


def protocol_node(where: str, label: str) -> dict[str, Any]:
    """qemu's protocol node (QAPI) for the disk URI ``where``; ``label`` names the
    disk in errors (``instance web1 disk/0``)."""
    if where.startswith("rbd:"):
        return _rbd(where, label)
    scheme = where.split(":", 1)[0]
    raise HypervisorError(
        f"{label} is reached through {where!r}, but corral's kvm opens only files, "
        f"block devices and rbd: URIs (this one is {scheme!r})")
