"""``gnt-instance``: create, run, change, move and remove instances.

Every command builds its opcode in Ganeti's dict form (field names of Ganeti's
``opcodes.py``) and submits it through the master daemon's luxi socket, as Ganeti's
own client does. Options follow ``man gnt-instance``: ``--disk N:size=...``,
``--net N:mac=...``, ``-H``, ``-B`` and ``-O`` take ``key=val`` lists (``-key``
resets a parameter to its default in ``modify``; ``-B`` values are checked and typed
before submitting, as Ganeti's client does). Instance names or UUIDs are
accepted and passed on unchanged; the master resolves them.

Only the fields a command sets on purpose are sent (plus those Ganeti's client always
sends and corral implements), so the opcode defaults apply to the rest.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client, reason_trail
from corral.cli.gnt_instance_disks import DISK_COMMANDS
from corral.cli.gnt_instance_power import (
    DEFAULT_SHUTDOWN_TIMEOUT,
    backend_overrides,
    reboot,
    shutdown,
    startup,
)
from corral.cli.gnt_instance_query import (
    LIST_DEFAULT_FIELDS,
    info,
    list_,
    list_fields,
)
from corral.cli.jobs import (
    exit_with,
    make_op,
    submit_and_wait,
    submit_op,
)
from corral.cli.jobset import run_jobs, wait_jobs
from corral.cli.keyval import IdentValue, KeyValDict
from corral.cli.lookup import query_named
from corral.cli.options import (
    GANETI_NOTHING,
    IdentKeyValType,
    KeyValType,
    dry_run_option,
    force_option,
    print_jobid_option,
    priority_option,
    reason_option,
    submit_option,
)
from corral.cli.placement_options import placement_body, placement_options
from corral.cli.prompt import ask_user
from corral.cli.tags import add_tag_commands
from corral.errors import CorralError, NothingToChangeError, OpExecError, ParameterError
from corral.objects.params import DISK_TEMPLATES, parse_size
from corral.paths import Paths

__all__ = ["LIST_DEFAULT_FIELDS", "convert_modifications", "main", "parse_disks", "parse_nics"]

TOOL = "gnt-instance"

#: Actions of ``modify --disk/--net`` that take no index (Ganeti's DDM_* words).
_INDEXLESS_ACTIONS = ("add", "remove", "attach", "detach")
_ALL_ACTIONS = ("add", "remove", "attach", "detach", "modify")

F = TypeVar("F", bound=Callable[..., Any])


# -- option helpers ------------------------------------------------------------------------


def _job_options(*, dry_run: bool = True) -> Callable[[F], F]:
    """``--submit``, ``--print-jobid``, ``--priority``, ``--reason`` (and ``--dry-run``)."""
    decorators: list[Callable[[F], F]] = [submit_option, print_jobid_option, priority_option,
                                          reason_option]
    if dry_run:
        decorators.append(dry_run_option)

    def decorate(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func
    return decorate


def _shutdown_timeout_option(func: F) -> F:
    return click.option("--shutdown-timeout", "shutdown_timeout", type=click.IntRange(min=0),
                        default=DEFAULT_SHUTDOWN_TIMEOUT, show_default=True,
                        help="Seconds to wait for the instance to shut down.")(func)


def _index(option: str, ident: str, what: str) -> int:
    try:
        index = int(ident)
    except ValueError:
        raise ParameterError(
            f"{option} {ident}:...: invalid {what} index '{ident}'; expected a number "
            "such as 0"
        ) from None
    if index < 0:
        raise ParameterError(f"{option}: {what} index must not be negative, got {index}")
    return index


def _size(option: str, value: Any, what: str) -> int:
    if not isinstance(value, str):
        raise ParameterError(f"{option}: {what} needs a value, e.g. size=10G")
    try:
        return parse_size(value)
    except CorralError as err:
        raise ParameterError(f"{option}: invalid size for {what}: {err.message}") from None
    except ValueError as err:
        raise ParameterError(f"{option}: invalid size for {what}: {err}") from None


def _indexed(option: str, items: Sequence[tuple[str, IdentValue]],
             what: str) -> list[dict[str, Any]]:
    """``N:key=val`` items → a list with one dict per index 0..max (each index once)."""
    by_index: dict[int, dict[str, Any]] = {}
    for ident, values in items:
        index = _index(option, ident, what)
        if not isinstance(values, dict):
            raise ParameterError(
                f"{option}: '{'-' if values is None else 'no_'}{ident}' is not valid when "
                f"creating; give {ident}:key=value,..."
            )
        if index in by_index:
            raise ParameterError(f"{option}: {what} {index} given more than once")
        by_index[index] = dict(values)
    if not by_index:
        return []
    missing = [i for i in range(max(by_index) + 1) if i not in by_index]
    if missing:
        raise ParameterError(
            f"{option}: no {what} {', '.join(map(str, missing))} given; {what}s are "
            f"numbered from 0 without gaps"
        )
    return [by_index[i] for i in range(len(by_index))]


def parse_disks(items: Sequence[tuple[str, IdentValue]]) -> list[dict[str, Any]]:
    """``--disk N:size=SIZE[,mode=ro|rw][,name=...]`` values → opcode ``disks``.

    Sizes take Ganeti's units (``10G``, ``512M``, plain numbers are MiB) and become
    MiB; every disk needs ``size`` (or ``adopt``).
    """
    disks = _indexed("--disk", items, "disk")
    for index, disk in enumerate(disks):
        if "size" in disk:
            if "adopt" in disk:
                raise ParameterError(f"Only one of 'size' and 'adopt' allowed (disk {index})")
            disk["size"] = _size("--disk", disk["size"], f"disk {index}")
        elif "adopt" not in disk:
            raise ParameterError(f"--disk {index}: missing size, e.g. --disk {index}:size=10G")
    return disks


def parse_nics(items: Sequence[tuple[str, IdentValue]]) -> list[dict[str, Any]]:
    """``--net N:mac=...,ip=...,mode=...,link=...,name=...`` values → opcode ``nics``."""
    return _indexed("--net", items, "NIC")


def _mod_identifier(ident: str) -> int | str:
    """An index (``0``, ``-1``) as a number; a disk/NIC name or UUID as text."""
    try:
        return int(ident)
    except ValueError:
        return ident


def convert_modifications(option: str, items: Sequence[tuple[str, IdentValue]], *,
                          disks: bool) -> list[list[Any]]:
    """``modify --disk/--net`` values → Ganeti's ``[[action, identifier, params]]``.

    ``add:size=1G`` adds at the end (identifier -1), ``remove`` removes the last one;
    ``N:remove`` removes number N (or the one called N), ``N:add,...`` adds at N, and
    ``N:key=val,...`` (or ``N:modify,key=val``) changes it. Removals take no parameters.
    """
    result: list[list[Any]] = []
    for ident, values in items:
        if not isinstance(values, dict):
            raise ParameterError(
                f"{option} {'-' if values is None else 'no_'}{ident}: not understood; use "
                f"{ident}:remove to remove it"
            )
        params: dict[str, Any] = dict(values)
        identifier: int | str
        if ident in _INDEXLESS_ACTIONS:
            action, identifier = ident, -1
        else:
            identifier = _mod_identifier(ident)
            given = [a for a in _ALL_ACTIONS if a in params]
            if len(given) > 1:
                raise ParameterError(
                    f"{option} {ident}: only one of {', '.join(_ALL_ACTIONS)} at a time "
                    f"(got {', '.join(given)})"
                )
            action = given[0] if given else "modify"
            for name in given:
                if params.pop(name) is not True:
                    raise ParameterError(f"{option} {ident}: '{name}' takes no value")
        if action in ("remove", "detach") and params:
            raise ParameterError(
                f"{option} {ident}: {action} takes no parameters (got "
                f"{', '.join(sorted(params))})"
            )
        if disks:
            if "size" in params:
                params["size"] = _size(option, params["size"], f"disk {ident}")
            elif action == "add":
                raise ParameterError(f"{option} {ident}: adding a disk needs size=SIZE")
        result.append([action, identifier, params])
    return result


# -- submitting -----------------------------------------------------------------------------


#: Submit one opcode as one job from this tool; its result (None with ``--submit``).
_submit = functools.partial(submit_op, TOOL)


def _iallocator_option(func: F) -> F:
    return click.option(
        "-I", "--iallocator", metavar="NAME",
        help="The allocator that chooses the node ('.': the cluster's default allocators, "
             "also used without -n and -I).")(func)


def _ignore_ipolicy_option(func: F) -> F:
    return click.option("--ignore-ipolicy", "ignore_ipolicy", is_flag=True,
                        help="Ignore instance policy violations.")(func)


def _placement(target_node: str | None, iallocator: str | None, ignore_ipolicy: bool
               ) -> dict[str, Any]:
    """The opcode fields of a move's target: only those given."""
    body: dict[str, Any] = {"target_node": target_node, "iallocator": iallocator}
    body = {key: value for key, value in body.items() if value is not None}
    if ignore_ipolicy:
        body["ignore_ipolicy"] = True
    return body


def _confirm(text: str, force: bool) -> None:
    """Ask ``text`` unless ``force``; a "no" ends the command with exit code 1, as
    does the lack of a terminal to ask on (Ganeti's default answer, silently)."""
    if not force and not ask_user(text):
        exit_with(1)


# -- the commands ---------------------------------------------------------------------------


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Instance administration: add, remove, start, stop, modify, migrate, move, list..."""


@cli.command()
@click.option("-t", "--disk-template", "disk_template", type=click.Choice(DISK_TEMPLATES),
              help="Disk template: " + ", ".join(DISK_TEMPLATES) + ".")
@click.option("-o", "--os-type", "os_type", metavar="OS[+VARIANT]",
              help="OS definition (and variant) to install.")
@click.option("-n", "--node", "node", metavar="PNODE[:SNODE]",
              help="Primary node (without it, an allocator chooses).")
@click.option("-I", "--iallocator", metavar="NAME",
              help="The allocator that chooses the node ('.': the cluster's default "
                   "allocators, also used without -n and -I).")
@click.option("-g", "--node-group", "group_name", metavar="GROUP",
              help="Node group to place the instance in.")
@placement_options()
@click.option("--disk", "disk_items", type=IdentKeyValType(), multiple=True,
              help="Disk N: N:size=SIZE[,mode=rw|ro][,name=NAME]; repeat per disk. "
                   "ext disks: provider=NAME and the provider's own key=val; rbd and "
                   "ext: access=kernelspace|userspace.")
@click.option("-s", "--os-size", "os_size", metavar="SIZE",
              help="One disk of SIZE (instead of --disk).")
@click.option("--net", "net_items", type=IdentKeyValType(), multiple=True,
              help="NIC N: N:mac=MAC,ip=IP,mode=MODE,link=LINK,name=NAME; repeat per NIC.")
@click.option("--no-nics", is_flag=True, help="Create the instance without NICs.")
@click.option("-H", "--hypervisor-parameters", "hv_option", type=IdentKeyValType(),
              default=None, help="Hypervisor and its parameters: HV[:key=val,...].")
@click.option("--hypervisor", "hypervisor_name", metavar="HV",
              help="Hypervisor (same as the HV of -H).")
@click.option("-B", "--backend-parameters", "beparams", type=KeyValType(), default=None,
              help="Backend parameters: vcpus=N,maxmem=SIZE,minmem=SIZE,...")
@click.option("-O", "--os-parameters", "osparams", type=KeyValType(), default=None,
              help="OS parameters: key=val,...")
@click.option("--no-start", is_flag=True, help="Do not start the instance after creating it.")
@click.option("--no-install", is_flag=True,
              help="Do not install the OS (implies --no-start).")
@click.option("--force-variant", is_flag=True,
              help="Accept an OS variant the OS does not list, or none.")
@click.option("--file-storage-dir", metavar="DIR",
              help="Directory below the cluster's file storage dir for the disk files.")
@click.option("--file-driver", metavar="DRIVER", help="Driver for file disks (loop).")
@click.option("--no-name-check", is_flag=True, help="Do not resolve the instance name.")
@click.option("--no-ip-check", is_flag=True,
              help="Do not check that the instance's IP is unused.")
@click.option("--tags", "tags", metavar="TAG,...", help="Comma-separated tags.")
@click.option("--ignore-ipolicy", "ignore_ipolicy", is_flag=True,
              help="Create the instance even if it breaks the instance policy, and file "
                   "disks larger than the node's free file storage (they are sparse).")
@_job_options()
@click.argument("instance_name")
def add(instance_name: str, disk_template: str | None, os_type: str | None,
        node: str | None, iallocator: str | None, group_name: str | None,
        member_of: tuple[str, ...], required_traits: tuple[str, ...],
        forbidden_traits: tuple[str, ...], disk_items: tuple[tuple[str, IdentValue], ...],
        os_size: str | None, net_items: tuple[tuple[str, IdentValue], ...], no_nics: bool,
        hv_option: tuple[str, IdentValue] | None, hypervisor_name: str | None,
        beparams: KeyValDict | None, osparams: KeyValDict | None, no_start: bool,
        no_install: bool, force_variant: bool, file_storage_dir: str | None,
        file_driver: str | None, no_name_check: bool, no_ip_check: bool, tags: str | None,
        ignore_ipolicy: bool, submit_only: bool, print_jobid: bool, priority: int | None,
        reason: str | None, dry_run: bool) -> None:
    """Create INSTANCE_NAME: its disks, the OS install and (unless --no-start) a start."""
    if disk_template == "diskless":
        if disk_items or os_size is not None:
            raise ParameterError("a diskless instance takes no --disk or -s option")
        disks: list[dict[str, Any]] = []
    else:
        if disk_items and os_size is not None:
            raise ParameterError("give either --disk or -s, not both")
        if os_size is not None:
            disks = [{"size": _size("-s", os_size, "the disk")}]
        else:
            disks = parse_disks(disk_items)
        if not disks:
            raise ParameterError(
                "no disk given: use --disk 0:size=SIZE (or -s SIZE), or -t diskless"
            )
    if net_items and no_nics:
        raise ParameterError("give either --net or --no-nics, not both")
    nics = parse_nics(net_items) if net_items else ([] if no_nics else [{}])
    hypervisor, hvparams = hypervisor_name, {}
    if hv_option is not None:
        hv, values = hv_option
        if not isinstance(values, dict):
            raise ParameterError(f"-H: '{hv}' needs to name a hypervisor, e.g. -H fake")
        if hypervisor is not None and hypervisor != hv:
            raise ParameterError(
                f"--hypervisor {hypervisor} and -H {hv}:... name different hypervisors"
            )
        hypervisor, hvparams = hv, dict(values)
    pnode, _, snode = (node or "").partition(":")
    body: dict[str, Any] = {
        "instance_name": instance_name,
        "mode": "create",
        "disks": disks,
        "nics": nics,
        "hvparams": hvparams,
        "beparams": backend_overrides(beparams) or {},
        "osparams": dict(osparams or {}),
        "start": not (no_start or no_install),
        "name_check": not no_name_check,
        "ip_check": not no_ip_check,
    }
    optional = {
        "disk_template": disk_template, "os_type": os_type, "pnode": pnode or None,
        "snode": snode or None, "iallocator": iallocator,
        "group_name": group_name, "hypervisor": hypervisor,
        "file_storage_dir": file_storage_dir, "file_driver": file_driver,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    if no_install:
        body["no_install"] = True
    if force_variant:
        body["force_variant"] = True
    if ignore_ipolicy:
        body["ignore_ipolicy"] = True
    if tags:
        body["tags"] = [t for t in tags.split(",") if t]
    body.update({k: v for k, v in placement_body(member_of, required_traits,
                                                  forbidden_traits).items() if v})
    _submit("add", "OP_INSTANCE_CREATE", body, reason=reason, priority=priority,
            submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)


@cli.command()
@force_option
@_shutdown_timeout_option
@click.option("--ignore-failures", is_flag=True,
              help="Remove the instance from the configuration even if removing its disks "
                   "or stopping it fails.")
@_job_options()
@click.argument("instance_name")
def remove(instance_name: str, force: bool, shutdown_timeout: int, ignore_failures: bool,
           submit_only: bool, print_jobid: bool, priority: int | None, reason: str | None,
           dry_run: bool) -> None:
    """Stop INSTANCE_NAME and remove it with all its disks."""
    _confirm(f"This will remove instance {instance_name} and delete all its disks, with "
             "all the data on them. Continue?", force)
    _submit("remove", "OP_INSTANCE_REMOVE",
            {"instance_name": instance_name, "ignore_failures": ignore_failures,
             "shutdown_timeout": shutdown_timeout},
            reason=reason, priority=priority, submit_only=submit_only,
            print_jobid=print_jobid, dry_run=dry_run)


@cli.command()
@force_option
@click.option("-o", "--os-type", "os_type", metavar="OS[+VARIANT]",
              help="Install this OS instead of the current one.")
@click.option("-O", "--os-parameters", "osparams", type=KeyValType(), default=None,
              help="OS parameters: key=val,...")
@click.option("--force-variant", is_flag=True,
              help="Accept an OS variant the OS does not list, or none.")
@_job_options()
@click.argument("instance_name")
def reinstall(instance_name: str, force: bool, os_type: str | None,
              osparams: KeyValDict | None, force_variant: bool, submit_only: bool,
              print_jobid: bool, priority: int | None, reason: str | None,
              dry_run: bool) -> None:
    """Reinstall the OS of the stopped INSTANCE_NAME, erasing its disks."""
    what = f"install OS '{os_type}'" if os_type else "reinstall the same OS"
    _confirm(f"This will {what} on instance '{instance_name}', erasing all data on its "
             "disks. Continue?", force)
    body: dict[str, Any] = {"instance_name": instance_name, "force_variant": force_variant}
    if os_type is not None:
        body["os_type"] = os_type
    if osparams:
        body["osparams"] = dict(osparams)
    # Ganeti runs reinstall through its many-instances path even for one: "N: NAME"
    # with --submit, "Waiting for job N for NAME ..." otherwise
    op = make_op("OP_INSTANCE_REINSTALL", body, trail=reason_trail(TOOL, "reinstall", reason),
                 priority=priority, dry_run=dry_run)
    with get_client() as client:
        ok = run_jobs(client, [(instance_name, [op])], wait=not submit_only, verbose=False)
    exit_with(0 if ok else 1)


@cli.command()
@force_option
@click.option("--no-name-check", is_flag=True, help="Do not resolve the new name.")
@click.option("--no-ip-check", is_flag=True, help="Do not check that the new IP is unused.")
@_job_options()
@click.argument("instance_name")
@click.argument("new_name")
def rename(instance_name: str, new_name: str, force: bool, no_name_check: bool,
           no_ip_check: bool, submit_only: bool, print_jobid: bool, priority: int | None,
           reason: str | None, dry_run: bool) -> None:
    """Rename INSTANCE_NAME to NEW_NAME (the OS's rename script runs on its disks)."""
    if no_name_check:
        _confirm(f"The name check is off: make sure '{new_name}' is a fully qualified "
                 "name. Continue?", force)
    result = _submit("rename", "OP_INSTANCE_RENAME",
                     {"instance_name": instance_name, "new_name": new_name,
                      "name_check": not no_name_check, "ip_check": not no_ip_check},
                     reason=reason, priority=priority, submit_only=submit_only,
                     print_jobid=print_jobid, dry_run=dry_run)
    if result:
        click.echo(f"Instance '{instance_name}' renamed to '{result}'")


@cli.command()
@click.option("-H", "--hypervisor-parameters", "hvparams", type=KeyValType(), default=None,
              help="Hypervisor parameters: key=val,...; '-key' or key=default resets one.")
@click.option("-B", "--backend-parameters", "beparams", type=KeyValType(), default=None,
              help="Backend parameters: key=val,...; '-key' or key=default resets one.")
@click.option("-O", "--os-parameters", "osparams", type=KeyValType(), default=None,
              help="OS parameters: key=val,...; '-key' removes one.")
@click.option("-o", "--os-type", "os_name", metavar="OS[+VARIANT]",
              help="Change the OS (takes effect at the next reinstall).")
@click.option("--force-variant", is_flag=True,
              help="Accept an OS variant the OS does not list, or none.")
@click.option("--disk", "disk_items", type=IdentKeyValType(), multiple=True,
              help="add:size=SIZE[,mode=..] | N:remove | N:modify,mode=..; repeatable.")
@click.option("--net", "net_items", type=IdentKeyValType(), multiple=True,
              help="add[:mac=..,ip=..,mode=..,link=..] | N:remove | N:modify,ip=..; "
                   "repeatable.")
@click.option("--offline", "offline", flag_value=True, default=None,
              help="Mark the (stopped) instance offline.")
@click.option("--online", "offline", flag_value=False, help="Mark the instance online again.")
@click.option("--allow-diskless", "allow_diskless", is_flag=True,
              help="Allow removing the instance's last disk: it becomes diskless "
                   "(corral; Ganeti does this without asking).")
@click.option("--hotplug", is_flag=True,
              help="Add and remove disks and NICs of the running instance now (refused "
                   "when its hypervisor cannot).")
@click.option("--hotplug-if-possible", "hotplug_if_possible", is_flag=True,
              help="Hotplug when the hypervisor can; otherwise the change waits for the "
                   "next start.")
@placement_options(modify=True)
@force_option
@_ignore_ipolicy_option
@_job_options()
@click.argument("instance_name")
def modify(instance_name: str, hvparams: KeyValDict | None, beparams: KeyValDict | None,
           osparams: KeyValDict | None, os_name: str | None, force_variant: bool,
           disk_items: tuple[tuple[str, IdentValue], ...],
           net_items: tuple[tuple[str, IdentValue], ...], offline: bool | None,
           allow_diskless: bool, hotplug: bool, hotplug_if_possible: bool,
           member_of: tuple[str, ...], required_traits: tuple[str, ...],
           forbidden_traits: tuple[str, ...], force: bool, ignore_ipolicy: bool,
           submit_only: bool, print_jobid: bool, priority: int | None, reason: str | None,
           dry_run: bool) -> None:
    """Change parameters, disks, NICs or placement constraints of INSTANCE_NAME."""
    placement = placement_body(member_of, required_traits, forbidden_traits)
    if not (hvparams or beparams or osparams or os_name or disk_items or net_items
            or offline is not None or placement):
        raise NothingToChangeError(f"{GANETI_NOTHING}\nnothing to change: give at least one of "
                                   "-H, -B, -O, -o, --disk, --net, --online, --offline, "
                                   "--member-of, --required-trait, --forbidden-trait")
    body: dict[str, Any] = {"instance_name": instance_name, "force": force, **placement}
    if ignore_ipolicy:
        body["ignore_ipolicy"] = True
    if hvparams:
        body["hvparams"] = dict(hvparams)
    if beparams:
        body["beparams"] = backend_overrides(beparams)
    if osparams:
        body["osparams"] = dict(osparams)
    if os_name:
        body["os_name"] = os_name
    if force_variant:
        body["force_variant"] = True
    if allow_diskless:
        body["allow_diskless"] = True
    if disk_items:
        body["disks"] = convert_modifications("--disk", disk_items, disks=True)
    if net_items:
        body["nics"] = convert_modifications("--net", net_items, disks=False)
        if hotplug and any(action == "modify" for action, _i, _p in body["nics"]):
            _confirm("Hot-modifying a NIC removes it from the running instance and adds it "
                     "again with the new parameters: its network connection may drop. "
                     "Continue?", force)
    if hotplug:
        body["hotplug"] = True
    if hotplug_if_possible:
        body["hotplug_if_possible"] = True
    if offline is not None:
        body["offline"] = offline
    result = _submit("modify", "OP_INSTANCE_SET_PARAMS", body, reason=reason,
                     priority=priority, submit_only=submit_only, print_jobid=print_jobid,
                     dry_run=dry_run)
    if result:
        click.echo(f"Modified instance {instance_name}")
        for param, data in result:
            click.echo(f" - {param:<5} -> {data}")
        click.echo("Most parameters take effect only at the next start of the instance "
                   "done by the cluster; a restart from inside the guest is not enough.")


@cli.command()
@force_option
@click.option("-n", "--target-node", "target_node", metavar="NODE",
              help="Node to migrate to (without it, an allocator chooses).")
@_iallocator_option
@_ignore_ipolicy_option
@click.option("--non-live", "non_live", is_flag=True,
              help="Suspend, copy and resume instead of a live migration.")
@click.option("--migration-mode", type=click.Choice(["live", "non-live"]), default=None,
              help="Override the hypervisor's default migration mode.")
@click.option("--cleanup", is_flag=True, help="Recover from a failed migration.")
@click.option("--allow-failover", is_flag=True,
              help="Fail over instead if the instance cannot be migrated.")
@_job_options()
@click.argument("instance_name")
def migrate(instance_name: str, force: bool, target_node: str | None, iallocator: str | None,
            ignore_ipolicy: bool, non_live: bool, migration_mode: str | None, cleanup: bool,
            allow_failover: bool,
            submit_only: bool, print_jobid: bool, priority: int | None, reason: str | None,
            dry_run: bool) -> None:
    """Move the running INSTANCE_NAME to another node without stopping it."""
    if non_live and migration_mode is not None:
        raise ParameterError("give only one of --non-live and --migration-mode")
    what = ("recovered from a failed migration" if cleanup else "migrated")
    _confirm(f"Instance {instance_name} will be {what}; if anything goes wrong the "
             "instance may be affected. Continue?", force)
    mode = "non-live" if non_live else migration_mode
    body: dict[str, Any] = {"instance_name": instance_name, "cleanup": cleanup,
                            "allow_failover": allow_failover}
    if mode is not None:
        body["mode"] = mode
    body.update(_placement(target_node, iallocator, ignore_ipolicy))
    _submit("migrate", "OP_INSTANCE_MIGRATE", body, reason=reason, priority=priority,
            submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)


@cli.command()
@force_option
@click.option("-n", "--target-node", "target_node", metavar="NODE",
              help="Node to fail over to (without it, an allocator chooses).")
@_iallocator_option
@_ignore_ipolicy_option
@click.option("--ignore-consistency", is_flag=True,
              help="Fail over even if the disks cannot be checked (source node offline).")
@_shutdown_timeout_option
@_job_options()
@click.argument("instance_name")
def failover(instance_name: str, force: bool, target_node: str | None,
             iallocator: str | None, ignore_ipolicy: bool, ignore_consistency: bool,
             shutdown_timeout: int, submit_only: bool,
             print_jobid: bool, priority: int | None, reason: str | None,
             dry_run: bool) -> None:
    """Stop INSTANCE_NAME, make another node its primary and start it there if it ran."""
    _confirm(f"Failing over instance {instance_name} shuts it down. Continue?", force)
    if ignore_consistency:
        _confirm(f"To fail over {instance_name} ignoring consistency its primary node must "
                 "be marked offline first. Is it?", force)
    body: dict[str, Any] = {"instance_name": instance_name,
                            "ignore_consistency": ignore_consistency,
                            "shutdown_timeout": shutdown_timeout}
    body.update(_placement(target_node, iallocator, ignore_ipolicy))
    _submit("failover", "OP_INSTANCE_FAILOVER", body, reason=reason, priority=priority,
            submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)


@cli.command()
@force_option
@click.option("-n", "--node", "target_node", metavar="NODE", required=True,
              help="Node to move the instance to.")
@_shutdown_timeout_option
@click.option("--ignore-consistency", is_flag=True,
              help="Go on even if the instance cannot be stopped on its node.")
@_ignore_ipolicy_option
@_job_options()
@click.argument("instance_name")
def move(instance_name: str, force: bool, target_node: str, shutdown_timeout: int,
         ignore_consistency: bool, ignore_ipolicy: bool, submit_only: bool, print_jobid: bool,
         priority: int | None, reason: str | None, dry_run: bool) -> None:
    """Copy the disks of INSTANCE_NAME to another node and make it the primary."""
    _confirm(f"Instance {instance_name} will be moved; it is shut down for that. "
             "Continue?", force)
    body: dict[str, Any] = {"instance_name": instance_name, "target_node": target_node,
                            "shutdown_timeout": shutdown_timeout}
    if ignore_consistency:
        body["ignore_consistency"] = True
    if ignore_ipolicy:
        body["ignore_ipolicy"] = True
    _submit("move", "OP_INSTANCE_MOVE", body, reason=reason, priority=priority,
            submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)


@cli.command("change-group")
@click.option("--to", "to", metavar="GROUP", multiple=True,
              help="Destination node group (name or UUID); repeatable [default: any other].")
@_iallocator_option
@click.option("--early-release", is_flag=True,
              help="Release the locks on the secondary node(s) early.")
@_job_options(dry_run=False)
@click.argument("instance_name")
def change_group(instance_name: str, to: tuple[str, ...], iallocator: str | None,
                 early_release: bool, submit_only: bool, print_jobid: bool,
                 priority: int | None, reason: str | None) -> None:
    """Move INSTANCE_NAME to another node group, with the jobs an allocator plans."""
    body: dict[str, Any] = {"instance_name": instance_name, "early_release": early_release,
                            "target_groups": list(to) or None}
    if iallocator is not None:
        body["iallocator"] = iallocator
    result = _submit("change-group", "OP_INSTANCE_CHANGE_GROUP", body, reason=reason,
                     priority=priority, submit_only=submit_only, print_jobid=print_jobid)
    if result is None:
        return
    with get_client() as client:
        done = wait_jobs(client, [("", bool(ok), data) for ok, data in result["jobs"]])
    bad = sum(1 for ok, _result in done if not ok)
    if bad:
        click.echo(f"There were {bad} errors while changing group of instance "
                   f"'{instance_name}'.")
        exit_with(1)
    click.echo(f"Instance '{instance_name}' changed group successfully.")


@cli.command("activate-disks")
@click.option("--ignore-size", is_flag=True, help="Ignore the recorded size of the disks.")
@click.option("--wait-for-sync", is_flag=True, help="Wait for disks to sync.")
@_job_options(dry_run=False)
@click.argument("instance_name")
def activate_disks(instance_name: str, ignore_size: bool, wait_for_sync: bool,
                   submit_only: bool, print_jobid: bool, priority: int | None,
                   reason: str | None) -> None:
    """Make the disks of INSTANCE_NAME available on its node; print node:disk:path."""
    body: dict[str, Any] = {"instance_name": instance_name}
    if ignore_size:
        body["ignore_size"] = True
    if wait_for_sync:
        body["wait_for_sync"] = True
    result = _submit("activate-disks", "OP_INSTANCE_ACTIVATE_DISKS", body, reason=reason,
                     priority=priority, submit_only=submit_only, print_jobid=print_jobid)
    for entry in result or []:
        click.echo(":".join(str(part) for part in entry))


@cli.command("deactivate-disks")
@force_option
@_job_options()
@click.argument("instance_name")
def deactivate_disks(instance_name: str, force: bool, submit_only: bool, print_jobid: bool,
                     priority: int | None, reason: str | None, dry_run: bool) -> None:
    """Release the disks of the stopped INSTANCE_NAME on its node."""
    _submit("deactivate-disks", "OP_INSTANCE_DEACTIVATE_DISKS",
            {"instance_name": instance_name, "force": force}, reason=reason,
            priority=priority, submit_only=submit_only, print_jobid=print_jobid,
            dry_run=dry_run)


@cli.command("grow-disk")
@click.option("--absolute", is_flag=True,
              help="AMOUNT is the new size, not the amount to add.")
@_ignore_ipolicy_option
@_job_options()
@click.argument("instance_name")
@click.argument("disk")
@click.argument("amount")
def grow_disk(instance_name: str, disk: str, amount: str, absolute: bool, ignore_ipolicy: bool,
              submit_only: bool, print_jobid: bool, priority: int | None, reason: str | None,
              dry_run: bool) -> None:
    """Grow disk number DISK of INSTANCE_NAME by AMOUNT (e.g. 1G), or to AMOUNT."""
    try:
        index = int(disk)
    except ValueError:
        raise ParameterError(f"invalid disk index '{disk}': expected a number such as 0") \
            from None
    size = _size("grow-disk", amount, "the amount")
    body: dict[str, Any] = {"instance_name": instance_name, "disk": index, "amount": size,
                            "absolute": absolute}
    if ignore_ipolicy:
        body["ignore_ipolicy"] = True
    _submit("grow-disk", "OP_INSTANCE_GROW_DISK", body,
            reason=reason, priority=priority, submit_only=submit_only,
            print_jobid=print_jobid, dry_run=dry_run)


# -- console, tags --------------------------------------------------------------------------


@cli.command()
@click.option("--show-cmd", "show_cmd", is_flag=True,
              help="Print the console command instead of running it.")
@priority_option
@click.argument("instance_name")
def console(instance_name: str, show_cmd: bool, priority: int | None) -> None:
    """Connect to the console of INSTANCE_NAME (or say how to).

    A kvm serial console is attached to this terminal through the primary node's
    daemon (Ctrl-] detaches); standard input may be a pipe.
    """
    op = make_op("OP_INSTANCE_CONSOLE", {"instance_name": instance_name},
                 trail=reason_trail(TOOL, "console"), priority=priority)
    with get_client() as client:
        results = submit_and_wait(client, [op])
        data = results[0] if results else None
        if not isinstance(data, dict):
            raise OpExecError(f"no console information for instance {instance_name}")
        kind = data.get("kind")
        name = str(data.get("instance", instance_name))
        endpoint = None
        if kind == "ssh":
            # Here, not at the top: aiohttp takes a noticeable time to import, and only
            # attaching needs it.
            from corral.cli.console_attach import ConsoleEndpoint, attach

            cluster_name, noded_port = client.call("QueryConfigValues",
                                                   ["cluster_name", "noded_port"])
            if show_cmd:
                click.echo(shlex.join(ssh_console_command(data, cluster_name)))
                return
            (node,) = query_named(client, "node", "node", [str(data.get("host"))], ["pip"])
            endpoint = ConsoleEndpoint(name, str(node["name"]), str(node["pip"]),
                                       int(noded_port))
    if kind == "msg":
        click.echo(str(data.get("message", "")))
    elif kind == "vnc":
        click.echo(f"Instance {name} has VNC listening on {data.get('host')}:"
                   f"{data.get('port')} (display {data.get('display')}), URL "
                   f"<vnc://{data.get('host')}:{data.get('port')}/>")
    elif kind == "spice":
        click.echo(f"Instance {name} has SPICE listening on {data.get('host')}:"
                   f"{data.get('port')}")
    elif endpoint is not None:
        if attach(Paths.from_env(), endpoint) == "closed":
            raise OpExecError(f"the console of instance {name} was closed by node "
                              f"{endpoint.node} (did the instance stop?)")
    else:
        raise OpExecError(f"unknown console kind {kind!r} for instance {name}")


def ssh_console_command(data: dict[str, Any], cluster_name: str) -> list[str]:
    """The ssh command line Ganeti's client runs for an ``ssh`` console: its options
    (batch mode, the cluster's host key alias, a forced terminal) and the console
    dict's user, host, port and command."""
    command = data.get("command") or []
    remote = command if isinstance(command, str) else shlex.join(map(str, command))
    argv = ["ssh", "-oEscapeChar=none", "-oHashKnownHosts=no",
            "-oUserKnownHostsFile=/dev/null", "-oCheckHostIp=no", "-oConnectTimeout=10",
            f"-oHostKeyAlias={cluster_name}"]
    if data.get("port"):
        argv.append(f"-oPort={data['port']}")
    argv += ["-oBatchMode=yes", "-oStrictHostKeyChecking=yes", "-t", "-t",
             f"{data.get('user', 'root')}@{data.get('host')}", remote]
    return argv


add_tag_commands(cli, TOOL, "instance", "INSTANCE_NAME")

# startup, shutdown and reboot act on many instances at once, and info and list only
# read: their own modules.
for _command in (startup, shutdown, reboot, info, list_, list_fields):
    cli.add_command(_command)

# Ganeti's aliases.
for _disk_command in DISK_COMMANDS:
    cli.add_command(_disk_command)
cli.add_command(startup, "start")
cli.add_command(shutdown, "stop")
cli.add_command(info, "show")


def main() -> None:
    """Entry point of ``gnt-instance``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()

