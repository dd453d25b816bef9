"""``node_verify``: everything ``gnt-cluster verify`` needs of one node, in one call.

The master asks each node once, all nodes at once, with
:class:`~corral.rpc.args.NodeVerifyArgs` naming the parts it wants; the node looks at
every part concurrently and answers one JSON object. A part that fails answers
``{"error": message}`` in its place, so one broken part (an unreadable storage
directory) hides nothing else. The node only reports what it sees; judging it against
the configuration (and the master's clock) is the master's business
(:mod:`corral.cmdlib.verify_group`).

The answer's keys: ``version`` (RPC and software version), ``time`` (this node's clock,
read first), ``hypervisors`` (per hypervisor: ``problem`` and the ``instances``
running), ``memory`` (the node's memory as ``memory_hypervisor`` reports it),
``files`` (per requested file: its SHA-256 in hex, or None when missing; user files
this node's own list does not name are in ``unlisted``), ``storage`` (per template:
its problem or None), ``volumes`` (per template: the volumes there), ``certificates``
(per name: the file's ``path`` and its validity, ``missing`` or an ``error``),
``bridges`` (the missing ones), ``confd`` (on a candidate: None when it answers,
else why not), ``os`` (the OS definitions, as ``os_diagnose`` describes them) and
``config_serial`` (on a candidate: the serial of the configuration it holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any

from corral import __version__, hypervisor
from corral.errors import CorralError
from corral.noded.files import CONFIG_FILES, KNOWN_FILES, read_user_list
from corral.noded.master_role import held_config_serial
from corral.paths import Paths
from corral.rpc.args import NodeVerifyArgs
from corral.rpc.protocol import RPC_VERSION
from corral.storage.verify import check_storage, list_volumes
from corral.utils.process import running_pid

__all__ = ["CERTIFICATES", "CONFD_PING_TIMEOUT", "SYS_CLASS_NET", "missing_bridges", "node_verify"]

#: Certificate files a node can be asked about: name -> ``Paths`` attribute.
CERTIFICATES: dict[str, str] = {
    "ca_cert": "ca_cert",
    "node_cert": "node_cert",
    "master_client_cert": "master_client_cert",
    "rapi_cert": "rapi_cert",
}

#: How long a candidate waits for its own confd to answer a ping (seconds).
CONFD_PING_TIMEOUT = 0.5

#: Where the kernel lists network interfaces (a bridge has a ``bridge`` subdirectory).
SYS_CLASS_NET = Path("/sys/class/net")


async def _part(work: Awaitable[Any]) -> Any:
    """``work``'s result, or ``{"error": message}`` when it fails."""
    try:
        return await work
    except CorralError as err:
        return {"error": err.message}
    except OSError as err:
        return {"error": f"{err.strerror or err}"}


async def _hypervisor(paths: Paths, name: str, hvparams: dict[str, Any]) -> dict[str, Any]:
    hv = hypervisor.get_hypervisor(name, paths)
    problem, instances = await asyncio.gather(_part(hv.verify(hvparams)),
                                              _part(hv.list_instances()))
    if isinstance(problem, dict):
        problem = problem["error"]
    return {"problem": problem, "instances": instances}


def _file_path(paths: Paths, entry: str, listed: set[str]) -> Path | None:
    """Where this node keeps the file ``entry`` names; None for a user file its own
    list does not name."""
    if entry in KNOWN_FILES:
        return Path(getattr(paths, KNOWN_FILES[entry][0]))
    if entry in CONFIG_FILES:
        return Path(getattr(paths, CONFIG_FILES[entry][0]))
    kind, _, where = entry.partition(":")
    if kind == "vnc_password_file" and where.startswith("/"):
        return paths.node_path(where)
    if kind == "user" and where.startswith("/"):
        return paths.node_path(where) if where in listed else None
    raise CorralError(f"unknown file {entry!r}")


def _checksums(paths: Paths, entries: list[str]) -> dict[str, Any]:
    listed: set[str] = set()
    if any(e.startswith("user:") for e in entries) and paths.user_file_list.exists():
        listed.update(read_user_list(paths.user_file_list.read_text()))
    sums: dict[str, str | None] = {}
    unlisted: list[str] = []
    for entry in entries:
        path = _file_path(paths, entry, listed)
        if path is None:
            unlisted.append(entry)
            continue
        try:
            sums[entry] = hashlib.sha256(path.read_bytes()).hexdigest()
        except FileNotFoundError:
            sums[entry] = None
    return {"sums": sums, "unlisted": unlisted}


def _certificate(path: Path) -> dict[str, Any]:
    from corral import x509  # cryptography: only when a certificate is asked about

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {"path": str(path), "missing": True}
    try:
        info = x509.load_cert_info(data)
    except CorralError as err:
        return {"path": str(path), "error": err.message}
    return {"path": str(path), "not_before": info.not_before.timestamp(),
            "not_after": info.not_after.timestamp()}


def _certificates(paths: Paths, names: list[str]) -> dict[str, Any]:
    unknown = [n for n in names if n not in CERTIFICATES]
    if unknown:
        raise CorralError(f"unknown certificate {unknown[0]!r}; known: "
                          f"{', '.join(CERTIFICATES)}")
    return {name: _certificate(Path(getattr(paths, CERTIFICATES[name]))) for name in names}


def missing_bridges(links: Iterable[str]) -> list[str]:
    """The bridges among ``links`` this node does not have, sorted (a bridge is an
    interface with a ``bridge`` subdirectory, the test Ganeti makes)."""
    return sorted(link for link in set(links) if not (SYS_CLASS_NET / link / "bridge").is_dir())


async def _confd(paths: Paths) -> str | None:
    """None when this node's confd answers a ping, else why not."""
    if running_pid(paths.pid_file("confd")) is None:
        return "corral-confd is not running"
    from corral.confd.client import ConfdClient
    from corral.confd.settings import read_settings

    settings = read_settings(paths)
    host = "127.0.0.1" if settings.bind in ("0.0.0.0", "") else settings.bind
    key = await asyncio.to_thread(paths.confd_hmac_key.read_bytes)
    client = ConfdClient(key, [host], port=settings.port, timeout=CONFD_PING_TIMEOUT)
    result = await client.query(0, answers=1)
    if not result.answers:
        return (f"corral-confd (pid {running_pid(paths.pid_file('confd'))}) does not "
                f"answer on {host}:{settings.port}")
    return None


def _os_list(paths: Paths, search_path: list[str]) -> list[dict[str, Any]]:
    """The OS definitions along ``search_path``, their paths cluster-wide."""
    from corral import osapi

    found = []
    for definition in osapi.discover([paths.node_path(d) for d in search_path]):
        info = definition.to_dict()
        with contextlib.suppress(ValueError):
            info["path"] = "/" + str(definition.path.relative_to(paths.root))
        found.append(info)
    return found


async def _memory(paths: Paths, name: str) -> dict[str, Any]:
    return await hypervisor.get_hypervisor(name, paths).node_info()


async def node_verify(paths: Paths, args: NodeVerifyArgs) -> dict[str, Any]:
    """What the master asked to know of this node (see the module doc)."""
    now = time.time()
    parts: dict[str, Awaitable[Any]] = {}
    for name, hvparams in args.hypervisors.items():
        parts[f"hv:{name}"] = _hypervisor(paths, name, hvparams)
    if args.memory_hypervisor:
        parts["memory"] = _memory(paths, args.memory_hypervisor)
    if args.files:
        parts["files"] = asyncio.to_thread(_checksums, paths, args.files)
    for template, location in args.storage.items():
        parts[f"storage:{template}"] = check_storage(paths, template, location)
    for template in args.volumes:
        parts[f"volumes:{template}"] = list_volumes(paths, template,
                                                    args.storage.get(template, ""))
    if args.certificates:
        parts["certificates"] = asyncio.to_thread(_certificates, paths, args.certificates)
    if args.bridges:
        parts["bridges"] = asyncio.to_thread(missing_bridges, args.bridges)
    if args.os_search_path is not None:
        parts["os"] = asyncio.to_thread(_os_list, paths, args.os_search_path)
    if args.candidate:
        parts["confd"] = _confd(paths)
        parts["config_serial"] = asyncio.to_thread(held_config_serial, paths)
    keys = list(parts)
    values = await asyncio.gather(*(_part(parts[key]) for key in keys))
    found = dict(zip(keys, values, strict=True))
    answer: dict[str, Any] = {
        "version": {"rpc_version": RPC_VERSION, "version": __version__},
        "time": now,
        "hypervisors": {key[3:]: value for key, value in found.items()
                        if key.startswith("hv:")},
        "storage": {key[8:]: value for key, value in found.items()
                    if key.startswith("storage:")},
        "volumes": {key[8:]: value for key, value in found.items()
                    if key.startswith("volumes:")},
    }
    for key in ("memory", "files", "certificates", "bridges", "confd", "config_serial", "os"):
        if key in found:
            answer[key] = found[key]
    return answer
