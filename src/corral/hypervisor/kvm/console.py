"""The consoles of a kvm instance: what Ganeti's console dict says, and the VNC password.

Ganeti's kvm answers, in this order: an ``ssh`` console when ``serial_console`` is on
(on the primary node, ``socat`` joins the terminal to the serial console's unix
socket; the master adds the node's name and ssh port), a ``vnc`` console when
``vnc_bind_address`` is an address and the instance has a network port above 5900
(its display is the port less 5900), else a ``msg`` console. corral's
``gnt-instance console`` does not use ssh: it streams the same serial socket through
the node daemon (:mod:`corral.noded.console`); the dict keeps Ganeti's keys so that
Ganeti's clients read it.

The VNC password is the first line of the ``vnc_password_file`` hypervisor
parameter's file as this node sees it (``redistribute-conf`` copies it to every
node). qemu is started with ``password=on`` (:mod:`.cmdline`) and given the password
over QMP ``set_password`` before the guest runs; a missing or empty file fails the
start, naming the file.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from corral.errors import HypervisorError
from corral.hypervisor.kvm.cmdline import VNC_BASE_PORT, hv
from corral.hypervisor.kvm.monitor import monitor
from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.objects.specs import InstanceSpec
from corral.paths import Paths

__all__ = ["SOCAT_CONSOLE_PARAMS", "console_info", "serial_socket_path", "set_vnc_password",
           "vnc_password"]

#: socat's options for the terminal side of an ssh console (Ganeti's with a socat
#: that knows ``escape``): raw, no echo, Ctrl-] ends it.
SOCAT_CONSOLE_PARAMS = "raw,echo=0,escape=0x1d"


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def console_info(spec: InstanceSpec, runtime: InstanceRuntime) -> dict[str, Any]:
    """Ganeti's console dict for ``spec`` (see the module's docstring); an ``ssh``
    console lacks ``host`` and ``port``, which the master fills in."""
    if hv(spec, "serial_console"):
        return {
            "instance": spec.name, "kind": "ssh", "user": "root",
            "command": ["socat", f"STDIO,{SOCAT_CONSOLE_PARAMS}",
                        f"UNIX-CONNECT:{runtime.serial_socket}"],
        }
    bind = str(hv(spec, "vnc_bind_address") or "")
    port = spec.network_port
    if bind and _is_address(bind) and port is not None and port > VNC_BASE_PORT:
        return {"instance": spec.name, "kind": "vnc", "host": bind, "port": port,
                "display": port - VNC_BASE_PORT}
    return {"instance": spec.name, "kind": "msg",
            "message": f"instance {spec.name} has no serial console (serial_console is off) "
                       "and no VNC display (vnc_bind_address is not an address)"}


def serial_socket_path(paths: Paths, name: str) -> Path | None:
    """The serial console socket of ``name`` when a qemu of it runs on this node with a
    serial console, else ``None``."""
    try:
        runtime = InstanceRuntime(paths, name)
    except HypervisorError:
        return None
    record = runtime.read()
    if record is None or not runtime.live_pid(record) or not hv(record.spec, "serial_console"):
        return None
    return runtime.serial_socket


def vnc_password(paths: Paths, spec: InstanceSpec) -> str | None:
    """The VNC password of ``spec``: the first line of its ``vnc_password_file`` (read
    below this node's root), or ``None`` without VNC or without a password file.

    :raises HypervisorError: the file is missing, unreadable or empty.
    """
    name = str(hv(spec, "vnc_password_file") or "")
    bind = str(hv(spec, "vnc_bind_address") or "")
    if not name or not bind or bind.startswith("/"):
        return None  # no VNC, no password, or VNC on a unix socket (no password there)
    path = paths.node_path(name)
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise HypervisorError(
            f"cannot start instance {spec.name}: cannot read the VNC password file {name} "
            f"(vnc_password_file): {err.strerror or err}; 'gnt-cluster redistribute-conf' "
            "copies it from the master to every node") from None
    password = lines[0].strip() if lines else ""
    if not password:
        raise HypervisorError(
            f"cannot start instance {spec.name}: the VNC password file {name} "
            "(vnc_password_file) is empty; its first line is the password")
    return password


async def set_vnc_password(paths: Paths, spec: InstanceSpec, runtime: InstanceRuntime
                           ) -> None:
    """Give the running qemu of ``spec`` its VNC password (QMP ``set_password``), if
    it has one."""
    password = vnc_password(paths, spec)
    if password is None:
        return
    async with monitor(runtime.qmp_socket) as qmp:
        await qmp.execute("set_password", {"protocol": "vnc", "password": password})
