"""``gnt-cluster command``, ``copyfile`` and ``renew-crypto``: through the node daemons
and the master, no SSH.

Run on the master (or a master candidate): the tool asks the master daemon which
nodes to use (``-n``, repeatable, and ``-g`` narrow the choice; offline nodes are
skipped with a note, as Ganeti's tools do), then calls every node daemon at once
with the master's client certificate, which only root on the master and the
candidates can read, as Ganeti uses root's SSH key.

Output is Ganeti's, recorded from it: per node, in the order of the node list with
the master last, ``------------------------------------------------``, ``node:
NAME``, the command's standard output then its standard error, and ``return code =
N``; ``-M`` prefixes every output line with the node's name instead; ``--failure-only``
leaves out the nodes where the command exited 0. The exit status is 0 whatever the
commands' codes, as Ganeti's (each node's code is in the output); a node that cannot
be reached is reported under its name with ``return code = 255`` (what ssh answers
for a connection that failed). ``copyfile`` copies to every chosen node but the master
(the file's source) and says on standard error which copies failed, exit status 0.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from corral.cli.common import get_client
from corral.cli.options import reason_option
from corral.errors import NotFoundError, OpPrereqError
from corral.paths import Paths

__all__ = ["PART_SIZE", "RENEW_FIRST", "RENEW_LAST", "SEPARATOR", "command", "copyfile",
           "renew_crypto"]

#: Ganeti's line between two nodes' results.
SEPARATOR = "-" * 48
#: Bytes of a file per call of ``write_file_part``.
PART_SIZE = 4 << 20
#: How long one command may run on a node (seconds).
COMMAND_TIMEOUT = 3600.0

_node_option = click.option(
    "-n", "--node", "nodes", multiple=True, metavar="<node>",
    help="Use only this node (can be used multiple times, if not given defaults to all "
         "nodes)")
_group_option = click.option("-g", "--node-group", "nodegroup", metavar="<nodegroup>",
                             help="Node group (name or uuid)")


def _pick_nodes(nodes: Sequence[str], nodegroup: str | None) -> tuple[
        list[tuple[str, str]], str, int]:
    """The online nodes chosen, as ``(name, primary IP)`` in Ganeti's order (the
    master last), the master's name and the node daemons' port."""
    from corral.qlang import make_simple_filter

    with get_client() as client:
        master, port = client.call("QueryConfigValues", ["master_node", "noded_port"])
        qfilter = make_simple_filter("name", list(nodes))
        if nodegroup is not None:
            groups = client.call("Query", "group", ["name", "uuid"], None)["data"]
            known = {value for row in groups for _status, value in row}
            if nodegroup not in known:
                raise NotFoundError(f"Node group '{nodegroup}' not found; the node groups: "
                                    + ", ".join(sorted(v for (_s1, v), _u in groups)))
            by_group = ["|", ["=", "group", nodegroup], ["=", "group.uuid", nodegroup]]
            qfilter = by_group if qfilter is None else ["&", qfilter, by_group]
        rows = client.call("Query", "node", ["name", "pip", "offline"],
                           qfilter)["data"]
    chosen = [(name, ip) for (_s1, name), (_s2, ip), (_s3, offline) in rows if not offline]
    offline = [name for (_s1, name), _ip, (_s3, off) in rows if off]
    if offline:
        click.echo(f"Note: skipping offline node(s): {', '.join(offline)}", err=True)
    chosen.sort(key=lambda item: item[0] == master)  # the master last, as Ganeti
    return chosen, str(master), int(port)


def _call(procedure: str, targets: list[tuple[str, str, int]], args: Any,
          timeout: float) -> dict[str, Any]:
    """Call ``procedure`` on every target at once with the master's certificate."""
    import asyncio

    from corral.rpc.client import RpcClient

    paths = Paths.from_env()
    if not paths.master_client_cert.exists():
        raise OpPrereqError(
            f"this node has no master client certificate ({paths.master_client_cert}): run "
            "the command on the master node (or a master candidate) as root",
            ecode="wrong_input")

    async def run() -> dict[str, Any]:
        client = RpcClient(paths)
        try:
            return await client.call(targets, procedure, args, timeout=timeout)
        finally:
            await client.close()

    return asyncio.run(run())


@click.command("command", context_settings={"allow_interspersed_args": False})
@_node_option
@_group_option
@click.option("-M", "--show-machine-names", is_flag=True,
              help="Show machine name for every line in output")
@click.option("--failure-only", is_flag=True,
              help="Hide successful results and show failures only (determined by the "
                   "exit code)")
@reason_option
@click.argument("command_words", nargs=-1, required=True)
def command(nodes: tuple[str, ...], nodegroup: str | None, show_machine_names: bool,
            failure_only: bool, reason: str | None, command_words: tuple[str, ...]) -> None:
    """Runs a command on all (or only some) nodes.

    The words are joined by spaces and run by /bin/sh on each node, by its node daemon.
    """
    chosen, _master, port = _pick_nodes(nodes, nodegroup)
    line = " ".join(command_words)
    results = _call("run_command", [(name, ip, port) for name, ip in chosen],
                    {"command": line, "timeout": COMMAND_TIMEOUT}, COMMAND_TIMEOUT + 30)
    for name, _ip in chosen:
        result = results[name]
        if result.error is not None:
            code, output = 255, f"{result.error.message}\n"
        else:
            code = int(result.payload["exit_code"])
            output = result.payload["stdout"] + result.payload["stderr"]
        if failure_only and code == 0:
            continue
        click.echo(SEPARATOR)
        if show_machine_names:
            for text in output.splitlines():
                click.echo(f"{name}: {text}")
        else:
            click.echo(f"node: {name}")
            click.echo(output)
        click.echo(f"return code = {code}")


@click.command("copyfile")
@_node_option
@click.option("--use-replication-network", is_flag=True,
              help="Whether to use the replication network for talking to the nodes")
@_group_option
@reason_option
@click.argument("filename")
def copyfile(nodes: tuple[str, ...], use_replication_network: bool, nodegroup: str | None,
             reason: str | None, filename: str) -> None:
    """Copies a file to all (or only some) nodes.

    The file goes to the same path on every chosen node but the master, with its mode
    and modification time, replacing what is there in one step.
    """
    path = Path(os.path.abspath(filename))
    if not path.exists():
        raise OpPrereqError(f"No such filename '{path}'", ecode="wrong_input")
    chosen, master, port = _pick_nodes(nodes, nodegroup)
    targets = [(name, ip, port) for name, ip in chosen if name != master]
    if not targets or not path.is_file():
        return  # Ganeti copies nothing here either (a directory is not copied)
    info = path.stat()
    data = path.read_bytes()
    import secrets

    transfer = secrets.token_hex(8)
    failed: dict[str, str] = {}
    offset = 0
    while True:
        part = data[offset:offset + PART_SIZE]
        last = offset + len(part) >= len(data)
        args = {"path": str(path), "transfer": transfer, "offset": offset,
                "data": base64.b64encode(part).decode("ascii"), "last": last,
                "mode": info.st_mode & 0o7777, "mtime": info.st_mtime}
        live = [target for target in targets if target[0] not in failed]
        for name, result in _call("write_file_part", live, args, 120.0).items():
            if result.error is not None:
                failed[name] = result.error.message
        offset += len(part)
        if last or len(failed) == len(targets):
            break
    for name, _ip, _port in targets:
        if name in failed:
            click.echo(f"Copy of file {path} to node {name}:{port} failed: {failed[name]}",
                       err=True)
    sys.stdout.flush()


#: What renew-crypto prints first and last (Ganeti's lines).
RENEW_FIRST = ('Updating certificates now. Running "gnt-cluster verify"  is recommended after '
               'this operation.')
RENEW_LAST = ('All requested certificates and keys have been replaced. Running "gnt-cluster '
              'verify" now is recommended.')


def _renew_refusal(message: str) -> None:
    """A refused renew-crypto: the message alone on stderr, exit 1 (as Ganeti's)."""
    click.echo(message, err=True)
    sys.exit(1)


@click.command("renew-crypto")
@click.option("--new-cluster-certificate", is_flag=True,
              help="Generate a new cluster certificate")
@click.option("--new-rapi-certificate", is_flag=True,
              help="Generate a new self-signed RAPI certificate")
@click.option("--rapi-certificate", "rapi_cert", metavar="RAPI_CERT",
              help="File containing new RAPI certificate")
@click.option("--new-confd-hmac-key", is_flag=True,
              help="Create a new HMAC key for corral-confd")
@click.option("-f", "--force", is_flag=True, help="Force the operation")
@click.option("--new-cluster-domain-secret", is_flag=True,
              help="Create a new cluster domain secret")
@click.option("--cluster-domain-secret", "cds_file", metavar="CLUSTER_DOMAIN_SECRET",
              help="Load new new cluster domain secret from file")
@click.option("--new-spice-certificate", is_flag=True,
              help="Generate a new self-signed SPICE certificate (corral has no SPICE)")
@click.option("--spice-certificate", metavar="SPICE_CERT",
              help="File containing new SPICE certificate (corral has no SPICE)")
@click.option("--spice-ca-certificate", metavar="SPICE_CACERT",
              help="File containing the certificate of the CA which signed the SPICE "
                   "certificate (corral has no SPICE)")
@click.option("--new-node-certificates", is_flag=True,
              help="Generate new node certificates (for all nodes)")
@click.option("--new-ssh-keys", is_flag=True,
              help="Generate new node SSH keys (corral uses none: nothing to do)")
@click.option("--no-ssh-key-check", is_flag=True,
              help="Disable SSH key fingerprint checking (corral uses no SSH)")
@click.option("-v", "--verbose", is_flag=True, help="Increase the verbosity of the operation")
@click.option("--ssh-key-bits", type=int, help="Length of SSH keys (corral uses no SSH)")
@click.option("--ssh-key-type", help="Type of SSH key (corral uses no SSH)")
@reason_option
def renew_crypto(new_cluster_certificate: bool, new_rapi_certificate: bool,
                 rapi_cert: str | None, new_confd_hmac_key: bool, force: bool,
                 new_cluster_domain_secret: bool, cds_file: str | None,
                 new_spice_certificate: bool, spice_certificate: str | None,
                 spice_ca_certificate: str | None, new_node_certificates: bool,
                 new_ssh_keys: bool, no_ssh_key_check: bool, verbose: bool,
                 ssh_key_bits: int | None, ssh_key_type: str | None,
                 reason: str | None) -> None:
    """Renews cluster certificates, keys and secrets.

    Every node gets the new ones while instances keep running: nodes trust the old
    and the new cluster certificate until all have switched (see docs/monitoring.md).
    """
    from corral.cli.common import reason_trail
    from corral.cli.jobs import make_op, submit_and_wait
    from corral.cli.prompt import ask_user

    click.echo(RENEW_FIRST)
    if new_rapi_certificate and rapi_cert:
        _renew_refusal("Only one of the --new-rapi-certificate and --rapi-certificate options "
                       "can be specified at the same time.")
    if new_cluster_domain_secret and cds_file:
        _renew_refusal("Only one of the --new-cluster-domain-secret and --cluster-domain-"
                       "secret options can be specified at the same time.")
    if new_spice_certificate or spice_certificate or spice_ca_certificate:
        _renew_refusal("corral has no SPICE consoles, so there is no SPICE certificate to "
                       "renew; leave out the --*spice* options")
    # The files are checked here and named to the master daemon by absolute path (it
    # runs on this node): their contents never travel in the job, which others may read.
    rapi_path = cds_path = None
    if rapi_cert:
        try:
            Path(rapi_cert).read_text()
        except OSError as err:
            _renew_refusal(f"Unable to load X509 certificate from {rapi_cert}: Unable to read "
                           f"certificate: {err}")
        rapi_path = os.path.abspath(rapi_cert)
    if cds_file:
        try:
            Path(cds_file).read_text()
        except OSError as err:
            _renew_refusal(f"Can't load new cluster domain secret from {cds_file}: {err}")
        cds_path = os.path.abspath(cds_file)
    if not force and not ask_user(
            "This replaces certificates and keys on every node (no instance is stopped; "
            "confd and RAPI restart to load their new keys). Continue?"):
        sys.exit(1)
    params = {"node_certificates": new_node_certificates, "renew_ssh_keys": new_ssh_keys,
              "verbose": verbose, "cluster_certificate": new_cluster_certificate,
              "rapi_certificate": new_rapi_certificate, "rapi_certificate_file": rapi_path,
              "confd_hmac_key": new_confd_hmac_key,
              "cluster_domain_secret": new_cluster_domain_secret,
              "cluster_domain_secret_file": cds_path}
    wanted = [key for key, value in params.items()
              if value and key not in ("verbose", "renew_ssh_keys")]
    if wanted:
        op = make_op("OP_CLUSTER_RENEW_CRYPTO", params,
                     trail=reason_trail("gnt-cluster", "renew-crypto", reason))
        with get_client() as client:
            submit_and_wait(client, [op])
    elif new_ssh_keys:
        click.echo("corral uses no SSH keys between nodes: there are none to renew")
    click.echo(RENEW_LAST)
