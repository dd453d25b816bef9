"""``gnt-cluster``: create, inspect, change and destroy the cluster.

What only ``init``, ``destroy`` and ``master-failover`` need (bootstrap, the daemons,
failover with its node RPC) is imported by those commands when they run, so that
every other command starts as a client of the master and nothing more.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from corral import __version__, uidpool
from corral.cli.common import CorralGroup, get_client, reason_trail
from corral.cli.gnt_cluster_aggregates import add_aggregate_commands
from corral.cli.gnt_cluster_disks import verify_disks
from corral.cli.gnt_cluster_ops import add_ops_commands
from corral.cli.ipolicy import format_policy, ipolicy_from_options, ipolicy_options
from corral.cli.jobs import exit_with, make_op, submit_and_wait, submit_op
from corral.cli.master import NOT_A_CLUSTER, locate_master
from corral.cli.options import (
    GANETI_NOTHING,
    KeyValType,
    dry_run_option,
    ident_keyval_option,
    json_option,
    print_jobid_option,
    priority_option,
    reason_option,
    submit_option,
    yes_do_it_option,
)
from corral.cli.output import format_info
from corral.cli.prompt import ask_user
from corral.cli.tags import add_tag_commands, search_tags_command
from corral.errors import (
    ConfirmationRequiredError,
    CorralError,
    MasterUnreachableError,
    NothingToChangeError,
    OpPrereqError,
    ParameterError,
)
from corral.paths import Paths
from corral.rpc.protocol import DEFAULT_HANDOVER_WAIT

if TYPE_CHECKING:
    from corral.opcodes import OpClusterSetParams

__all__ = ["main"]

TOOL = "gnt-cluster"


F = TypeVar("F", bound=Callable[..., Any])


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def _timespec(value: str | None) -> int | None:
    if value is None:
        return None
    from corral.watcher.pause import parse_timespec

    return parse_timespec(value)


def _uids(value: str | None) -> list[tuple[int, int]] | None:
    return None if value is None else uidpool.parse_uid_pool(value)


def _grouped(option: str, merged: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Refuse whole-group removal (``-H -kvm``), which means nothing at cluster level."""
    if not merged:
        return None
    for ident, values in merged.items():
        if not isinstance(values, dict):
            raise ParameterError(
                f"{option} {'-' if values is None else 'no_'}{ident}: removing a whole "
                "parameter group is not possible at cluster level; reset single "
                f"parameters with {option} {ident}:-name"
            )
    return merged


def _params_options(init: bool) -> list[Any]:
    """The parameter options ``init`` and ``modify`` share (Ganeti's names)."""
    opts: list[Any] = [
        click.option("-B", "--backend-parameters", "beparams", type=KeyValType(),
                     help="Default backend parameters, key=val,... (maxmem, minmem, vcpus, ...)."),
        ident_keyval_option("-H", "--hypervisor-parameters", "hvparams",
                            help="Hypervisor parameters, hypervisor:key=val,...; repeatable."),
        click.option("-N", "--nic-parameters", "nicparams", type=KeyValType(),
                     help="Default NIC parameters, key=val,... (mode, link, vlan)."),
        ident_keyval_option("-D", "--disk-parameters", "diskparams",
                            help="Disk template parameters, template:key=val,...; repeatable."),
        click.option("--node-parameters", "ndparams", type=KeyValType(),
                     help="Default node parameters, key=val,..."),
        click.option("--enabled-hypervisors", metavar="HV,...",
                     help="Comma-separated hypervisors; the first is the default (kvm, fake)."),
        click.option("--enabled-disk-templates", metavar="TEMPLATE,...",
                     help="Comma-separated disk templates (plain, file, sharedfile, diskless)."),
        click.option("-C", "--candidate-pool-size", type=int,
                     help="How many master candidates to keep."),
        click.option("--max-running-jobs", type=int, help="Jobs that may run at once."),
        click.option("--max-tracked-jobs", type=int,
                     help="Jobs the scheduler tracks at once."),
        click.option("--job-archive-age", metavar="TIMESPEC",
                     help="The watcher archives jobs finished longer ago (30, 5m, 6h, 2d, "
                          "1w)."),
        click.option("-m", "--mac-prefix", metavar="PREFIX",
                     help="Prefix of generated MAC addresses, XX:XX:XX."),
        click.option("--master-netdev", metavar="NETDEV",
                     help="Interface that carries the master IP address."),
        click.option("--vg-name", metavar="VG", help="LVM volume group for 'plain' disks."),
        click.option("--uid-pool", metavar="UIDS",
                     help="User-id pool: comma-separated uids and ranges like 4000-4099."),
        click.option("-I", "--default-iallocator", metavar="NAME[,NAME...]",
                     help="Default instance allocators, tried in the order given."),
        click.option("--default-iallocator-params", type=KeyValType(),
                     help="Parameters for the default allocator, key=val,..."),
        click.option("--compression-tools", metavar="TOOL,...",
                     help="Compression tools disk transfers may use (gzip, gzip-fast, "
                          "gzip-slow, zstd, or another tool run as 'TOOL -c')."),
        click.option("--file-storage-dir", metavar="DIR",
                     help="Directory for 'file' disks (cluster-wide)."),
        click.option("--shared-file-storage-dir", metavar="DIR",
                     help="Directory for 'sharedfile' disks, shared by all nodes."),
        click.option("--os-search-path", metavar="DIR,...",
                     help="Comma-separated directories searched for OS definitions."),
        click.option("--iallocator-timeout", type=click.FloatRange(min=0, min_open=True),
                     metavar="SECONDS",
                     help="How long an allocator may take before it is stopped."),
        click.option("--iallocator-search-path", metavar="DIR,...",
                     help="Comma-separated directories searched for iallocator plugins "
                          "(-I NAME); empty: Ganeti's and corral's usual places."),
        click.option("--extstorage-search-path", metavar="DIR,...",
                     help="Comma-separated directories searched for ExtStorage providers "
                          "(corral extension; Ganeti's are built in)."),
    ]
    if not init:
        opts += [
            click.option("--add-uids", metavar="UIDS", help="Add uids or ranges to the pool."),
            click.option("--remove-uids", metavar="UIDS",
                         help="Remove uids or ranges from the pool."),
        ]
    return opts


def with_params_options(init: bool) -> Callable[[F], F]:
    """Decorate a command with the cluster parameter options."""
    def decorate(func: F) -> F:
        func = ipolicy_options(std=True, split=init)(func)
        for option in reversed(_params_options(init)):
            func = option(func)
        return func
    return decorate


def _set_params(kw: dict[str, Any]) -> OpClusterSetParams:
    """Turn the parsed options into the change request (unset options stay ``None``)."""
    from corral.opcodes import OpClusterSetParams  # msgspec: only when a change is made

    return OpClusterSetParams(
        hvparams=_grouped("-H", kw["hvparams"]),
        beparams=kw["beparams"],
        nicparams=kw["nicparams"],
        ndparams=kw["ndparams"],
        diskparams=_grouped("-D", kw["diskparams"]),
        enabled_hypervisors=_csv(kw["enabled_hypervisors"]),
        enabled_disk_templates=_csv(kw["enabled_disk_templates"]),
        candidate_pool_size=kw["candidate_pool_size"],
        max_running_jobs=kw["max_running_jobs"],
        max_tracked_jobs=kw["max_tracked_jobs"],
        job_archive_age=_timespec(kw["job_archive_age"]),
        mac_prefix=kw["mac_prefix"],
        master_netdev=kw["master_netdev"],
        vg_name=kw["vg_name"],
        uid_pool=_uids(kw["uid_pool"]),
        add_uids=_uids(kw.get("add_uids")),
        remove_uids=_uids(kw.get("remove_uids")),
        default_iallocator=kw["default_iallocator"],
        default_iallocator_params=kw["default_iallocator_params"],
        compression_tools=_csv(kw.get("compression_tools")),
        file_storage_dir=kw["file_storage_dir"],
        shared_file_storage_dir=kw["shared_file_storage_dir"],
        os_search_path=_csv(kw["os_search_path"]),
        iallocator_search_path=_csv(kw["iallocator_search_path"]),
        iallocator_timeout=kw["iallocator_timeout"],
        ipolicy=ipolicy_from_options(kw, group=False),
        extstorage_search_path=_csv(kw["extstorage_search_path"]),
    )


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Cluster administration: init, info, modify, verify, queue, tags, getmaster, version,
    destroy.

    Commands talk to the master daemon over its luxi socket; all paths derive
    from CORRAL_ROOT (default /).
    """


@cli.command()
@click.argument("cluster_name")
@click.option("--master-name", metavar="NAME",
              help="Name of this (master) node [default: this host's FQDN].")
@click.option("--primary-ip", metavar="IP",
              help="Primary IP of this node [default: the master name resolved].")
@click.option("-s", "--secondary-ip", metavar="IP", help="Secondary IP of this node.")
@click.option("--no-start", is_flag=True, help="Do not start the master daemon afterwards.")
@click.option("--user-prefix", metavar="PREFIX", default=None,
              help="Prefix of the daemons' user names (Ganeti's configure option) "
                   "[default: corral-, giving corral-masterd, corral-rapi, ...].")
@click.option("--group-prefix", metavar="PREFIX", default=None,
              help="Prefix of the daemons' group names, corral-admin among them "
                   "[default: corral-].")
@click.option("--daemons-as-root", is_flag=True,
              help="No privilege separation: every daemon runs as whoever starts it "
                   "[default when CORRAL_ROOT places the node elsewhere than /, or "
                   "when not run as root, unless a prefix is given].")
@with_params_options(init=True)
def init(cluster_name: str, master_name: str | None, primary_ip: str | None,
         secondary_ip: str | None, no_start: bool, user_prefix: str | None,
         group_prefix: str | None, daemons_as_root: bool, **kw: Any) -> None:
    """Create a cluster named CLUSTER_NAME with this node as its master.

    Creates the configuration store, a cluster CA and this node's certificate,
    the confd HMAC key and a RAPI users file with a write user 'admin', the
    daemons' users and groups (privilege separation: docs/security.md), then
    starts the master daemon. Refused when this node already has a cluster.
    """
    from corral import bootstrap, daemons

    paths = Paths.from_env()
    options = bootstrap.InitOptions(
        cluster_name=cluster_name, master_name=master_name, primary_ip=primary_ip,
        secondary_ip=secondary_ip, params=_set_params(kw),
        daemon_users=_daemon_users(paths, user_prefix, group_prefix, daemons_as_root),
    )
    cluster, node = bootstrap.init_cluster(paths, options)
    click.echo(f"Cluster {cluster.name} initialised; master node {node.name} "
               f"({node.primary_ip}), cluster UUID {cluster.uuid}.")
    click.echo(f"RAPI user '{bootstrap.RAPI_ADMIN}' has write access; its password is in "
               f"{paths.rapi_admin_password}.")
    if not no_start:
        pids = daemons.start(paths)
        click.echo("Started " + ", ".join(f"corral-{n} (pid {p})" for n, p in pids.items()) + ".")


def _daemon_users(paths: Paths, user_prefix: str | None, group_prefix: str | None,
                  as_root: bool) -> Any:
    """The daemons' accounts ``init`` was asked for (None: no separation)."""
    from corral.daemon_users import DEFAULT_GROUP_PREFIX, DEFAULT_USER_PREFIX, DaemonUsers

    given = user_prefix is not None or group_prefix is not None
    if as_root:
        if given:
            raise ParameterError("--daemons-as-root runs no daemon as a user of its own: "
                                 "give it or --user-prefix/--group-prefix, not both")
        return None
    if not given and (os.geteuid() != 0 or paths.root != Path("/")):
        return None
    if os.geteuid() != 0:
        raise ParameterError("--user-prefix/--group-prefix need root: the daemons' "
                             "users and groups are created and the daemons started as them")
    return DaemonUsers(user_prefix if user_prefix is not None else DEFAULT_USER_PREFIX,
                       group_prefix if group_prefix is not None else DEFAULT_GROUP_PREFIX)


@cli.command()
@json_option
def info(as_json: bool) -> None:
    """Show the cluster's configuration."""
    with get_client() as client:
        result = client.call("QueryClusterInfo")
    if as_json:
        from corral import serializer  # msgspec: only when JSON is read or written
        click.echo(serializer.dumps_pretty(result))
        return
    click.echo(format_info(_info_layout(result)))


def _strs(params: dict[str, Any]) -> dict[str, Any]:
    return {k: _strs(v) if isinstance(v, dict) else str(v) for k, v in params.items()}


def _info_layout(r: dict[str, Any]) -> list[tuple[str, Any]]:
    """``gnt-cluster info`` in Ganeti's layout and wording, for what corral has."""
    join = ", ".join
    return [
        ("Cluster name", r["name"]),
        ("Cluster UUID", r["uuid"]),
        ("Creation time", _time(r["ctime"])),
        ("Modification time", _time(r["mtime"])),
        ("Master node", r["master"]),
        ("Architecture (this node)", f"{r['architecture'][0]} ({r['architecture'][1]})"),
        ("Tags", join(sorted(r["tags"])) or "(none)"),
        ("Default hypervisor", r["default_hypervisor"]),
        ("Enabled hypervisors", join(r["enabled_hypervisors"])),
        ("Hypervisor parameters", _strs(r["hvparams"])),
        ("OS-specific hypervisor parameters", _strs(r["os_hvp"])),
        ("OS parameters", _strs(r["osparams"])),
        ("Hidden OSes", join(r["hidden_os"])),
        ("Blacklisted OSes", join(r["blacklisted_os"])),
        ("Cluster parameters", [
            ("candidate pool size", str(r["candidate_pool_size"])),
            ("maximal number of jobs running simultaneously", str(r["max_running_jobs"])),
            ("maximal number of jobs simultaneously tracked by the scheduler",
             str(r["max_tracked_jobs"])),
            ("mac prefix", r["mac_prefix"]),
            ("master netdev", r["master_netdev"]),
            ("lvm volume group", r["volume_group_name"]),
            ("file storage path", r["file_storage_dir"]),
            ("shared file storage path", r["shared_file_storage_dir"]),
            ("uid pool", uidpool.format_uid_pool([tuple(x) for x in r["uid_pool"]])),
            ("default instance allocator", r["default_iallocator"]),
            ("default instance allocator parameters", _strs(r["default_iallocator_params"])),
            ("OS search path", join(r["os_search_path"])),
            ("iallocator search path", join(r["iallocator_search_path"])),
            ("iallocator timeout", f"{r['iallocator_timeout']:g}"),
            ("ExtStorage Providers search path", join(r["extstorage_search_path"])),
            ("enabled disk templates", join(r["enabled_disk_templates"])),
            ("compression tools", list(r["compression_tools"])),
            ("configuration serial", str(r["config_serial"])),
        ]),
        ("Default node parameters", _strs(r["ndparams"])),
        ("Default instance parameters", _strs(r["beparams"])),
        ("Default nic parameters", _strs(r["nicparams"])),
        ("Default disk parameters", _strs(r["diskparams"])),
        ("Instance policy - limits for instances",
         format_policy(r["ipolicy"], r["ipolicy"], cluster=True)),
    ]


def _time(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


@cli.command()
@with_params_options(init=False)
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
def modify(dry_run: bool, priority: int | None, submit_only: bool, print_jobid: bool,
           reason: str | None, **kw: Any) -> None:
    """Change cluster parameters; only the options given are changed.

    In -H/-B/-N/-D and --node-parameters, 'key=default' or '-key' restores a
    parameter's built-in default, 'no_key' sets a boolean to false.
    """
    from corral import serializer
    from corral.opcodes import OpCode

    change = _set_params(kw)
    # the settings given: not the fields every opcode has
    common = {"OP_ID", *OpCode.__struct_fields__}
    body = {k: v for k, v in serializer.to_builtins(change).items()
            if v is not None and k not in common}
    if not body:
        raise NothingToChangeError(f"{GANETI_NOTHING}\nnothing to change: give at least one option "
                                   "(see --help)")
    op = make_op("OP_CLUSTER_SET_PARAMS", body,
                 trail=reason_trail(TOOL, "modify", reason), priority=priority,
                 dry_run=dry_run)
    with get_client() as client:
        results = submit_and_wait(client, [op], submit_only=submit_only,
                                  print_jobid=print_jobid)
    if results is None:
        return
    result = results[0]
    changes = result["changes"]
    if not changes:
        click.echo("Nothing changed: the cluster already has these settings.")
        return
    prefix = "Would change" if result["dry_run"] else "Changed"
    for line in changes:
        click.echo(f"{prefix} {line}")


@cli.command()
@click.argument("command", type=click.Choice(["drain", "undrain", "info"]))
def queue(command: str) -> None:
    """Drain the job queue (refuse new jobs), undrain it, or show whether it is drained."""
    with get_client() as client:
        if command == "info":
            (flag,) = client.call("QueryConfigValues", ["drain_flag"])
            click.echo(f"The drain flag is {'set' if flag else 'unset'}")
        else:
            client.call("SetDrainFlag", command == "drain")


@cli.command()
def getmaster() -> None:
    """Print the name of the master node (on any node of the cluster)."""
    paths = Paths.from_env()
    try:
        with get_client(paths, explain=False) as client:
            (master,) = client.call("QueryConfigValues", ["master_node"])
    except MasterUnreachableError:
        master = locate_master(paths).master
        if master is None:
            raise OpPrereqError(NOT_A_CLUSTER, ecode="wrong_input") from None
    click.echo(master)


@cli.command("redistribute-conf")
@submit_option
@print_jobid_option
@priority_option
@reason_option
def redistribute_conf(submit_only: bool, print_jobid: bool, priority: int | None,
                      reason: str | None) -> None:
    """Push the configuration to the master candidates and the ancillary files (CA
    certificate, confd key, RAPI users, the user file list and its files) to every
    node."""
    result = submit_op(TOOL, "redistribute-conf", "OP_CLUSTER_REDIST_CONF", {},
                       reason=reason, priority=priority, submit_only=submit_only,
                       print_jobid=print_jobid)
    if isinstance(result, dict) and result.get("failed"):
        exit_with(1)


cli.add_command(redistribute_conf, "redist-conf")  # Ganeti's name for it


@cli.command("master-ping")
def master_ping() -> None:
    """Exit 0 if the master daemon answers on this node, 1 if not."""
    try:
        with get_client(explain=False) as client:
            client.call("QueryClusterInfo")
    except CorralError:
        sys.exit(1)


@cli.command("master-failover")
@click.option("--no-voting", is_flag=True,
              help="Take over even if most master candidates do not answer (dangerous: "
                   "two parts of a split cluster could both have a master).")
@click.option("--handover-timeout", "handover_wait", type=click.FloatRange(min=0),
              default=DEFAULT_HANDOVER_WAIT, show_default=True, metavar="SECONDS",
              help="How long the old master lets running opcodes finish; one still "
                   "running then is interrupted and its job ends in error.")
@yes_do_it_option
def master_failover(no_voting: bool, handover_wait: float, yes_do_it: bool) -> None:
    """Make this node, a master candidate, the master.

    The master candidates vote (a majority must answer unless --no-voting); the old
    master, if it answers, refuses new jobs, lets running opcodes finish and stops
    its master daemon, leaving every unfinished job queued; this node takes the
    newest configuration and job queue any candidate holds, starts the master
    daemon and runs those jobs to their end.
    """
    if no_voting and not yes_do_it and not ask_user(
            "--no-voting takes over even if most master candidates are down or this node "
            "is outdated, which can leave a cluster with two masters. Continue?"):
        sys.exit(1)
    import asyncio

    from corral import failover

    result = asyncio.run(failover.master_failover(
        Paths.from_env(), no_voting=no_voting, handover_wait=handover_wait,
        feedback=lambda text: click.echo(text)))
    if result.copied_from:
        click.echo(f"Took the newest state from {result.copied_from}")
    click.echo(f"{result.new_master} is the master now (was {result.old_master})")


def _ignore_choices() -> click.Choice[str]:
    from corral.objects.verify_codes import CODES  # pure data, no msgspec

    return click.Choice(CODES)


@cli.command()
@click.option("-v", "--verbose", is_flag=True, help="Increase the verbosity of the operation.")
@click.option("--debug-simulate-errors", "simulate_errors", is_flag=True,
              help="Debugging option that makes the operation treat most runtime checks "
                   "as failed.")
@click.option("--error-codes", is_flag=True, help="Enable parseable error messages.")
@click.option("--no-nplus1-mem", "--skip-nplusone", "skip_nplusone", is_flag=True,
              help="Skip N+1 memory redundancy tests.")
@dry_run_option
@priority_option
@click.option("-g", "--node-group", "nodegroup", metavar="<nodegroup>",
              help="Node group (name or uuid).")
@click.option("-I", "--ignore-errors", "ignore_errors", multiple=True, metavar="ECODE",
              type=_ignore_choices(), help="Error code to be ignored (repeatable).")
@click.option("--verify-ssh-clutter", is_flag=True,
              help="Accepted for Ganeti's scripts; corral uses no SSH, so there is nothing "
                   "to check.")
@click.option("-d", "--debug", "debug", count=True, help="Increase debugging level.")
@reason_option
def verify(verbose: bool, simulate_errors: bool, error_codes: bool, skip_nplusone: bool,
           dry_run: bool, priority: int | None, nodegroup: str | None,
           ignore_errors: tuple[str, ...], verify_ssh_clutter: bool, debug: int,
           reason: str | None) -> None:
    """Verify the cluster: its configuration, then each node group's nodes and
    instances against what they really run.

    Submits one job for the configuration and one per node group, waits for each and
    prints what they found; exits 1 when a job failed or found an error (a warning
    does not count; -I CODE turns that code's errors into warnings). --error-codes
    prints each finding as ftype:ecode:edomain:name:msg.
    """
    from corral.cli.jobset import wait_jobs

    body: dict[str, Any] = {
        "verbose": verbose, "error_codes": error_codes,
        "debug_simulate_errors": simulate_errors,
        "skip_checks": ["nplusone_mem"] if skip_nplusone else [],
        "ignore_errors": list(dict.fromkeys(ignore_errors)),
        "group_name": nodegroup, "verify_clutter": verify_ssh_clutter,
    }
    if debug:
        body["debug_level"] = debug
    op = make_op("OP_CLUSTER_VERIFY", body, trail=reason_trail(TOOL, "verify", reason),
                 priority=priority, dry_run=dry_run)
    with get_client() as client:
        results = submit_and_wait(client, [op])
        assert results is not None
        submitted = [("", bool(ok), data) for ok, data in results[0].get("jobs") or []]
        outcome = wait_jobs(client, submitted)
    failed_jobs = sum(1 for ok, _ in outcome if not ok)
    bad = failed_jobs + sum(1 for ok, value in outcome if ok and not (value and value[0]))
    if failed_jobs:
        click.echo(f"{failed_jobs} job(s) failed while verifying the cluster.")
    exit_with(1 if bad else 0)


@cli.command()
def version() -> None:
    """Print the software and protocol versions the cluster runs."""
    with get_client() as client:
        r = client.call("QueryClusterInfo")
    click.echo(f"Software version: {r['software_version']}")
    click.echo(f"Internode protocol: {r['protocol_version']}")
    click.echo(f"Configuration format: {r['config_version']}")
    click.echo(f"OS api version: {r['os_api_version']}")
    click.echo(f"Export interface: {r['export_version']}")
    click.echo(f"VCS version: {r['vcs_version']}")


@cli.command()
@yes_do_it_option
def destroy(yes_do_it: bool) -> None:
    """Stop the daemons and remove the cluster configuration, keys and certificates.

    Only possible when the master is the last node and no instances are left.
    """
    if not yes_do_it:
        # Ganeti's words, alone, exit 1
        raise ConfirmationRequiredError(
            "Destroying a cluster is irreversible. If you really want destroy this cluster, "
            "supply the --yes-do-it option.")
    from corral import bootstrap, daemons

    paths = Paths.from_env()
    removed = bootstrap.destroy_cluster(paths, before_removal=lambda: daemons.stop(paths))
    click.echo(f"Cluster destroyed: {len(removed)} file(s) removed; logs are kept in "
               f"{paths.log_dir}.")


add_tag_commands(cli, TOOL, "cluster")
add_ops_commands(cli)
add_aggregate_commands(cli)
cli.add_command(search_tags_command(TOOL))
cli.add_command(verify_disks)


def main() -> None:
    """Entry point of ``gnt-cluster``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
