"""``gnt-instance info`` and ``list`` (and ``list-fields``): what the cluster knows about
its instances, read-only.

``info`` submits ``OP_INSTANCE_QUERY_DATA`` as a job and prints Ganeti's layout;
``list`` asks the master's query resource ``instance`` directly (Ganeti's
``--no-headers``, ``--separator``, ``-o``, ``--filter``). :mod:`corral.cli.gnt_instance`
adds these commands (and the alias ``show``) to the tool.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import click

from corral.cli.common import get_client, reason_trail
from corral.cli.jobs import (
    exit_with,
    format_time,
    generic_list,
    list_fields_command,
    make_op,
    submit_and_wait,
)
from corral.cli.lookup import selection_filter
from corral.cli.options import (
    FieldSelection,
    common_list_options,
    priority_option,
    resolve_fields,
)
from corral.cli.output import format_info, format_unit

__all__ = ["LIST_DEFAULT_FIELDS", "VNC_BASE_PORT", "info", "instance_info_layout", "list_",
           "list_fields", "vnc_console_info"]

TOOL = "gnt-instance"

#: ``gnt-instance list`` columns without ``-o`` (Ganeti's default).
LIST_DEFAULT_FIELDS = ("name", "hypervisor", "os", "pnode", "status", "oper_ram")

#: List fields whose values are lists, shown comma-separated (as Ganeti does).
_LIST_JOINED = ("tags", "disk.sizes", "nic.macs", "nic.ips", "nic.modes", "nic.links",
                "nic.bridges", "nic.networks", "snodes", "snodes.group", "snodes.group.uuid",
                "disk.names", "disk.uuids", "nic.names", "nic.uuids", "required_traits",
                "forbidden_traits")


# -- info -----------------------------------------------------------------------------------


def _params_info(own: dict[str, Any], actual: dict[str, Any]) -> dict[str, Any]:
    """Each parameter: its own value, or ``default (value)`` (Ganeti's layout)."""
    shown: dict[str, Any] = {}
    for key, value in actual.items():
        if isinstance(value, dict) and value:
            shown[key] = _params_info(own.get(key) or {}, value)
        elif key in own:
            shown[key] = str(own[key])
        else:
            shown[key] = f"default ({value})"
    return shown


def _reason_info(trail: Any) -> list[str]:
    lines = []
    for entry in trail or []:
        try:
            source, text, stamp = entry
            when = format_time(int(stamp) / 1e9)
        except (TypeError, ValueError):
            lines.append(str(entry))
            continue
        lines.append(f"{source}: {text} ({when})")
    return lines


def _disk_info(index: int, disk: dict[str, Any]) -> list[tuple[str, Any]]:
    size = disk.get("size")
    nice = format_unit(size, "h") if isinstance(size, int | float) else str(size)
    data: list[tuple[str, Any]] = [
        (str(disk.get("iv_name") or f"disk {index}"), f"{disk.get('dev_type')}, size {nice}"),
    ]
    if disk.get("spindles") is not None:
        data.append(("spindles", disk["spindles"]))
    data.append(("access mode", disk.get("mode")))
    logical_id = disk.get("logical_id")
    if logical_id is not None:
        if disk.get("dev_type") == "plain" and len(logical_id) == 2:
            data.append(("logical_id", f"{logical_id[0]}/{logical_id[1]}"))
        else:
            data.append(("logical_id", str(logical_id)))
    if disk.get("pstatus"):
        data.append(("on primary", _dev_status(disk.get("dev_type"), disk["pstatus"])))
    if disk.get("sstatus"):
        data.append(("on secondary", _dev_status(disk.get("dev_type"), disk["sstatus"])))
    data.append(("name", disk.get("name")))
    data.append(("UUID", disk.get("uuid")))
    return data


#: Ganeti's number of a faulty local disk (``constants.LDS_FAULTY``).
_LDS_FAULTY = 4


def _dev_status(dev_type: Any, status: Any) -> str:
    """A disk's status on a node as Ganeti prints it: ``PATH (MAJOR:MINOR)``, and for
    an LV whose data is lost `` *FAILED* (failed drive?)``."""
    if not isinstance(status, list | tuple) or len(status) < 7:
        return str(status)
    path, major, minor, _sync, _eta, _degraded, ldisk = status[:7]
    text = (f"{path} ({'N/A' if major is None else major}:"
            f"{'N/A' if minor is None else minor})")
    if dev_type == "plain" and ldisk == _LDS_FAULTY:
        text += " *FAILED* (failed drive?)"
    return text


def _nic_info(index: int, nic: Any) -> list[tuple[str, Any]]:
    if isinstance(nic, dict):
        values = nic
    else:
        keys = ("name", "uuid", "ip", "mac", "mode", "link", "vlan", "network", "netinfo")
        values = dict(zip(keys, nic, strict=False))
    netinfo = values.get("netinfo")
    network = netinfo.get("name") if isinstance(netinfo, dict) else values.get("network")
    return [
        (f"nic/{index}", ""),
        ("MAC", str(values.get("mac"))),
        ("IP", str(values.get("ip"))),
        ("mode", str(values.get("mode"))),
        ("link", str(values.get("link"))),
        ("vlan", str(values.get("vlan"))),
        ("network", str(network)),
        ("UUID", str(values.get("uuid"))),
        ("name", str(values.get("name"))),
    ]


def instance_info_layout(inst: dict[str, Any]) -> list[tuple[str, Any]]:
    """One ``OP_INSTANCE_QUERY_DATA`` entry in ``gnt-instance info``'s layout."""
    state = f"configured to be {inst.get('config_state')}"
    if inst.get("run_state"):
        state += f", actual state is {inst['run_state']}"
    pgroup = f"{inst.get('pnode_group_name')} (UUID {inst.get('pnode_group_uuid')})"
    secondaries = ", ".join(
        f"{name} (group {gname}, group UUID {guuid})"
        for name, gname, guuid in zip(inst.get("snodes") or [],
                                      inst.get("snodes_group_names") or [],
                                      inst.get("snodes_group_uuids") or [], strict=False)
    )
    layout: list[tuple[str, Any]] = [
        ("Instance name", inst.get("name")),
        ("UUID", inst.get("uuid")),
        ("Serial number", str(inst.get("serial_no"))),
        ("Creation time", _time(inst.get("ctime"))),
        ("Modification time", _time(inst.get("mtime"))),
        ("State", state),
        ("Nodes", [[("primary", inst.get("pnode")), ("group", pgroup)],
                   [("secondaries", secondaries)]]),
    ]
    if inst.get("placement"):  # corral's: only for an instance that has constraints
        layout.append(("Placement constraints", inst["placement"]))
    layout += [
        ("Operating system", inst.get("os")),
        ("Operating system parameters",
         _params_info(inst.get("os_instance") or {}, inst.get("os_actual") or {})),
    ]
    if "network_port" in inst:  # "None" without one, as Ganeti prints it
        layout.append(("Allocated network port", str(inst["network_port"])))
    layout.append(("Hypervisor", inst.get("hypervisor")))
    vnc = vnc_console_info(inst)
    if vnc:
        layout.append(("console connection", vnc))
    layout.extend([
        ("Hypervisor parameters",
         _params_info(inst.get("hv_instance") or {}, inst.get("hv_actual") or {})),
        ("Back-end parameters",
         _params_info(inst.get("be_instance") or {}, inst.get("be_actual") or {})),
        ("NICs", [_nic_info(i, nic) for i, nic in enumerate(inst.get("nics") or [])]),
        ("Disk template", inst.get("disk_template")),
        ("Disks", [_disk_info(i, d) for i, d in enumerate(inst.get("disks") or [])]),
    ])
    trail = _reason_info(inst.get("last_reason"))
    if trail:
        layout.append(("Last state change reason", trail))
    return layout


#: VNC display 0 is this port; an instance's display is its network port minus it.
VNC_BASE_PORT = 5900


def vnc_console_info(inst: dict[str, Any]) -> str | None:
    """Ganeti's "console connection" line of an instance with a VNC bind address:
    where to point a VNC viewer (address, port and display), or ``None``."""
    address = (inst.get("hv_actual") or {}).get("vnc_bind_address")
    if not address:
        return None
    port = inst.get("network_port")
    display = int(port) - VNC_BASE_PORT if isinstance(port, int) else 0
    node = inst.get("pnode")
    if display > 0 and address == "0.0.0.0":
        where = f"{node}:{port} (display {display})"
    elif display > 0 and _is_ipv4(address):
        where = f"{address}:{port} (node {node}) (display {display})"
    else:
        where = f"{node}:{address}"
    return f"vnc to {where}"


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _time(value: Any) -> str:
    if isinstance(value, list | tuple) and len(value) == 2:
        return format_time(value[0], value[1])
    if isinstance(value, int | float):
        return format_time(value)
    return "N/A"


@click.command()
@click.option("-s", "--static", is_flag=True,
              help="Only configuration data, no live state from the nodes.")
@click.option("--all", "show_all", is_flag=True, help="Show every instance.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw data as JSON.")
@priority_option
@click.argument("instances", nargs=-1)
def info(instances: tuple[str, ...], static: bool, show_all: bool, as_json: bool,
         priority: int | None) -> None:
    """Show the configuration (and run state) of INSTANCES, or --all of them."""
    if not instances and not show_all:
        click.echo("No instance selected. Please pass in --all if you want to query all "
                   "instances.\nGive instance names, or --all for every instance (which can "
                   "take long on a big cluster).", err=True)
        exit_with(1)
    if instances and show_all:
        click.echo("Give either instance names or --all, not both.", err=True)
        exit_with(1)
    op = make_op("OP_INSTANCE_QUERY_DATA",
                 {"instances": list(instances), "static": static, "use_locking": not static},
                 trail=reason_trail(TOOL, "info"), priority=priority)
    with get_client() as client:
        results = submit_and_wait(client, [op])
    result = results[0] if results else None
    if as_json:
        from corral import serializer  # msgspec: only when JSON is read or written
        click.echo(serializer.dumps_pretty(result or {}))
        return
    if not result:
        click.echo("No instances.")
        exit_with(1)
    assert isinstance(result, dict)
    click.echo(format_info([instance_info_layout(data) for data in result.values()]))


# -- list -----------------------------------------------------------------------------------


def _joined(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


@click.command("list")
@common_list_options
@click.option("-v", "--verbose", is_flag=True, help="Long marks for values not available.")
@click.option("-F", "--filter", "force_filter", is_flag=True,
              help="Treat the arguments as a query filter.")
@click.argument("names", nargs=-1, metavar="<instance-name>")
def list_(names: tuple[str, ...], output: FieldSelection | None, no_headers: bool,
          separator: str | None, units: str | None, as_json: bool, verbose: bool,
          force_filter: bool) -> None:
    """List instances (all, or NAMES or UUIDs, or a filter); default fields name,
    hypervisor, os, pnode, status, oper_ram."""
    fields = resolve_fields(output, LIST_DEFAULT_FIELDS)
    with get_client() as client:
        code = generic_list(client, "instance", fields,
                            qfilter=selection_filter(names, force_filter),
                            separator=separator, no_headers=no_headers, units=units,
                            verbose=verbose, as_json=as_json,
                            overrides=dict.fromkeys(_LIST_JOINED, _joined))
    exit_with(code)


#: ``gnt-instance list-fields``.
list_fields = list_fields_command("instance", "instances", lambda: get_client())
