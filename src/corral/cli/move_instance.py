"""``move-instance``: move instances from one cluster to another over both RAPIs.

Ganeti's tool of the same name and options (``move-instance [options]
SOURCE-CLUSTER DEST-CLUSTER INSTANCE...``), driving Ganeti or corral clusters alike.
Each move follows design 2.2's workflow with two threads, one per cluster:

- source: check that the instance exists, read its configuration
  (``/2/instances/N/info?static=1``) and tags, ``prepare-export?mode=remote`` (the
  signed certificate, key name and handshake);
- destination: create the instance with ``mode=remote-import`` and the source's
  handshake and certificate; its job log reports (log type ``remote-import``) the
  destination's signed certificate and, per disk, where to send it;
- source: ``export`` with ``mode=remote`` to those destinations, stopping the
  instance, and removing it after a successful move unless
  ``--keep-source-instance``;
- both jobs must succeed. ``--parallel`` moves that many instances at once.

``--opportunistic-tries``/``--opportunistic-delay`` are checked as Ganeti checks them
and otherwise have no effect: corral's allocator does not lock opportunistically, so
the instance is created in one attempt.

Messages go to stderr as the tool logs them (warnings and errors; ``-v`` adds the
steps, ``-d`` the details); the exit code is 0 when every move
succeeded, 1 otherwise, 2 for wrong options (Ganeti's).
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NoReturn

from corral.cli.keyval import parse_ident_keyval, parse_keyval
from corral.cli.rapi_client import JobFailed, RapiClient, RapiError, read_password_file
from corral.errors import CorralError

__all__ = ["Move", "build_parser", "main", "run_move"]

log = logging.getLogger("move-instance")

#: Ganeti's RAPI port, the default of ``--src-rapi-port``.
DEFAULT_RAPI_PORT = 5080
#: Log type of the job log entry that carries the destination's import information.
REMOTE_IMPORT_LOG = "remote-import"
#: Disk keys copied from the source's disks into the creation request.
_DISK_KEYS = ("size", "mode", "name")

USAGE = "move-instance [--debug|--verbose] <source-cluster> <dest-cluster> <instance...>"


def build_parser() -> argparse.ArgumentParser:
    """The options of Ganeti's ``move-instance``."""
    p = argparse.ArgumentParser(prog="move-instance", usage=USAGE)
    add = p.add_argument
    add("-d", "--debug", action="count", default=0, help="Increase debugging level")
    add("-v", "--verbose", action="store_true", help="Increase the verbosity of the operation")
    add("-I", "--iallocator", metavar="<NAME>", help="Select nodes for the instance "
        "automatically using the <NAME> iallocator plugin")
    add("-B", "--backend-parameters", dest="beparams", default="", help="Backend parameters")
    add("-H", "--hypervisor-parameters", dest="hvparams", default="",
        help="Hypervisor parameters")
    add("-O", "--os-parameters", dest="osparams", default="", help="OS parameters")
    add("--net", dest="nics", action="append", default=[], metavar="NICS",
        help="NIC parameters (N:key=value,...)")
    add("--src-rapi-port", type=int, default=DEFAULT_RAPI_PORT,
        help="Source cluster RAPI port (defaults to 5080)")
    add("--src-ca-file", help="File containing source cluster Certificate Authority (CA) "
        "in PEM format")
    add("--src-username", help="Source cluster username")
    add("--src-password-file", help="File containing source cluster password")
    add("--dest-rapi-port", type=int, help="Destination cluster RAPI port (defaults to "
        "source cluster RAPI port)")
    add("--dest-ca-file", help="File containing destination cluster Certificate Authority "
        "(CA) in PEM format (defaults to source cluster CA)")
    add("--dest-username", help="Destination cluster username (defaults to source cluster "
        "username)")
    add("--dest-password-file", help="File containing destination cluster password "
        "(defaults to source cluster password)")
    add("--dest-instance-name", help="Instance name on destination cluster (only when "
        "moving exactly one instance)")
    add("--dest-primary-node", help="Primary node on destination cluster (only when moving "
        "exactly one instance)")
    add("--dest-secondary-node", help="Secondary node on destination cluster (only when "
        "moving exactly one instance)")
    add("--dest-disk-template", help="Disk template to use on destination cluster")
    add("--compress", default="none", help="Compression mode to use during the move (this "
        "mode has to be supported by both clusters)")
    add("-p", "--parallel", type=int, default=1, metavar="<number>",
        help="Number of instances to be moved simultaneously")
    add("--opportunistic-tries", type=int, metavar="<number>",
        help="Number of opportunistic instance creation attempts before a normal creation "
        "is performed (needs an iallocator)")
    add("--opportunistic-delay", type=int, metavar="<number>",
        help="The delay between successive opportunistic instance creation attempts, in "
        "seconds")
    add("--keep-source-instance", action="store_true",
        help="Keep source instance after successful transfer")
    add("args", nargs="*", help=argparse.SUPPRESS)
    return p


@dataclass
class Move:
    """One instance to move and how it ended."""

    src_name: str
    dest_name: str
    dest_pnode: str | None = None
    dest_snode: str | None = None
    iallocator: str | None = None
    disk_template: str | None = None
    compress: str = "none"
    hvparams: dict[str, Any] = field(default_factory=dict)
    beparams: dict[str, Any] = field(default_factory=dict)
    osparams: dict[str, Any] = field(default_factory=dict)
    nics: list[dict[str, Any]] = field(default_factory=list)
    keep_source: bool = False
    error: str | None = None


def _check_options(parser: argparse.ArgumentParser, opts: argparse.Namespace
                   ) -> tuple[str, str, list[str]]:
    args = list(opts.args)
    if len(args) < 3:
        parser.error("Not enough arguments")
    src, dest, names = args[0], args[1], args[2:]
    if not opts.src_ca_file:
        parser.error("Missing source cluster CA file")
    if opts.parallel < 1:
        parser.error("Number of simultaneous moves must be >= 1")
    if opts.iallocator and (opts.dest_primary_node or opts.dest_secondary_node):
        parser.error("Destination node and iallocator options exclude each other")
    tries, delay = opts.opportunistic_tries, opts.opportunistic_delay
    if tries is not None and tries > 0 and not opts.iallocator:
        parser.error("Opportunistic instance creation can only be used with an iallocator")
    if tries is not None and tries < 0:
        parser.error("Number of opportunistic creation attempts must be >= 0")
    if delay is not None and tries is None:
        parser.error("Opportunistic delay can only be specified when opportunistic tries "
                     "are used")
    if delay is not None and delay <= 0:
        parser.error("The delay between two successive creation attempts must be greater "
                     "than zero")
    if len(names) > 1 and any((opts.dest_instance_name, opts.dest_primary_node,
                               opts.dest_secondary_node, opts.hvparams, opts.beparams,
                               opts.osparams, opts.nics)):
        parser.error("The options --dest-instance-name, --dest-primary-node, "
                     "--dest-secondary-node, --hypervisor-parameters, --backend-parameters, "
                     "--os-parameters and --net can only be used when moving exactly one "
                     "instance")
    return src, dest, names


def _nic_overrides(items: Sequence[str]) -> list[dict[str, Any]]:
    by_index: dict[int, dict[str, Any]] = {}
    for item in items:
        ident, params = parse_ident_keyval("--net", item, parse_prefixes=False)
        if not ident.isdigit() or not isinstance(params, dict):
            raise CorralError(f"--net {item}: expected N:key=value,... with N a NIC index")
        # "" means: do not carry this setting over (Ganeti's shortcut)
        by_index[int(ident)] = {k: (None if v == "" else v) for k, v in params.items()}
    if by_index and sorted(by_index) != list(range(len(by_index))):
        raise CorralError("--net: NICs are numbered from 0 without gaps")
    return [by_index[i] for i in range(len(by_index))]


class _Clients:
    """How to reach the two clusters (one client per thread)."""

    def __init__(self, opts: argparse.Namespace, src: str, dest: str) -> None:
        src_password = (read_password_file(opts.src_password_file)
                        if opts.src_password_file else None)
        dest_password = (read_password_file(opts.dest_password_file)
                         if opts.dest_password_file else src_password)
        src_user = opts.src_username or ""
        dest_user = opts.dest_username if opts.dest_username is not None else src_user

        def source() -> RapiClient:
            return RapiClient(src, opts.src_rapi_port, username=src_user,
                              password=src_password, ca_file=opts.src_ca_file)

        def destination() -> RapiClient:
            return RapiClient(dest, opts.dest_rapi_port or opts.src_rapi_port,
                              username=dest_user, password=dest_password,
                              ca_file=opts.dest_ca_file or opts.src_ca_file)

        self.source: Callable[[], RapiClient] = source
        self.destination: Callable[[], RapiClient] = destination


class _Exchange:
    """What the two threads of one move hand each other."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.instance: dict[str, Any] | None = None
        self.prepared: dict[str, Any] | None = None
        self.imported: dict[str, Any] | None = None
        self.failed: str | None = None

    def put(self, **values: Any) -> None:
        with self.cond:
            for key, value in values.items():
                setattr(self, key, value)
            self.cond.notify_all()

    def wait_for(self, ready: Callable[[], bool]) -> None:
        with self.cond:
            while not ready():
                if self.failed:
                    raise JobFailed("Aborted")
                self.cond.wait(1.0)


def _creation_body(move: Move, instance: dict[str, Any], prepared: dict[str, Any]
                   ) -> dict[str, Any]:
    disks = [{k: disk[k] for k in _DISK_KEYS if disk.get(k) is not None}
             for disk in instance["disks"]]
    for created, disk in zip(disks, instance["disks"], strict=True):
        if disk.get("spindles") is not None:
            created["spindles"] = disk["spindles"]
    nics = []
    for nic in instance["nics"]:
        name, _uuid, ip, mac, mode, link, vlan, network, netinfo = nic
        entry: dict[str, Any] = {"name": name, "ip": ip, "mac": mac}
        if network is not None:
            entry["network"] = (netinfo or {}).get("name", network)
        else:
            entry.update(mode=mode, link=link, vlan=vlan)
        nics.append(entry)
    if len(move.nics) > len(nics):
        raise CorralError("Can not create new NICs")
    for nic, override in zip(nics, move.nics, strict=False):
        nic.update(override)
    body: dict[str, Any] = {
        "__version__": 1, "mode": "remote-import", "name": move.dest_name,
        "disk_template": move.disk_template or instance["disk_template"],
        "disks": disks, "nics": nics, "os": instance.get("os"),
        "start": instance.get("config_state") == "up", "ip_check": False,
        "name_check": False, "hypervisor": instance["hypervisor"],
        "source_handshake": prepared["handshake"], "source_x509_ca": prepared["x509_ca"],
        "source_instance_name": instance["name"], "compress": move.compress,
        "beparams": {**instance.get("be_instance", {}), **move.beparams},
        "hvparams": {**instance.get("hv_instance", {}), **move.hvparams},
        "osparams": {**instance.get("os_instance", {}), **move.osparams},
        "tags": instance.get("tags", []), "wait_for_sync": False,
    }
    if not body["os"]:
        body["no_install"] = True  # an instance without OS: its disks move as they are
    for key, value in (("pnode", move.dest_pnode), ("snode", move.dest_snode),
                       ("iallocator", move.iallocator)):
        if value:
            body[key] = value
    return body


def _source_side(client: RapiClient, move: Move, ex: _Exchange) -> None:
    name = move.src_name
    log.info("Checking whether instance exists")
    try:
        tags = client.request("GET", f"/2/instances/{name}")["tags"]
    except RapiError as err:
        if err.status == 404:
            raise CorralError(f"Instance {name} not found ({err.message})") from None
        raise
    log.info("Retrieving instance information from source cluster")
    job = client.request("GET", f"/2/instances/{name}/info", {"static": 1})
    (info,) = client.wait_for_job(job, _logger(name))
    (instance,) = info.values()
    instance["tags"] = tags
    log.info("Preparing export on source cluster")
    job = client.request("PUT", f"/2/instances/{name}/prepare-export", {"mode": "remote"})
    (prepared,) = client.wait_for_job(job, _logger(name))
    ex.put(instance=instance, prepared=prepared)
    log.info("Waiting for destination information to become available")
    ex.wait_for(lambda: ex.imported is not None)
    assert ex.imported is not None
    log.info("Starting remote export on source cluster")
    job = client.request("PUT", f"/2/instances/{name}/export", body={
        "mode": "remote", "destination": ex.imported["disks"], "shutdown": True,
        "remove_instance": not move.keep_source, "x509_key_name": prepared["x509_key_name"],
        "destination_x509_ca": ex.imported["x509_ca"], "compress": move.compress})
    (result,) = client.wait_for_job(job, _logger(name))
    finished, disk_results = result
    if not (finished and all(disk_results)):
        failed = ", ".join(str(i) for i, ok in enumerate(disk_results) if not ok)
        raise CorralError(f"Export failed for disks {failed}")
    log.info("Export successful")


def _dest_side(client: RapiClient, move: Move, ex: _Exchange) -> None:
    log.debug("Waiting for instance information to become available")
    ex.wait_for(lambda: ex.instance is not None and ex.prepared is not None)
    assert ex.instance is not None and ex.prepared is not None
    log.info("Creating instance %s in remote-import mode", move.dest_name)
    job = client.request("POST", "/2/instances",
                         body=_creation_body(move, ex.instance, ex.prepared))

    def on_log(log_type: str, message: Any) -> None:
        if log_type == REMOTE_IMPORT_LOG:
            log.debug("Received remote import information")
            if not (isinstance(message, dict) and "disks" in message
                    and "x509_ca" in message):
                raise CorralError(f"malformed remote import information: {message!r}")
            ex.put(imported=message)
        else:
            _logger(move.dest_name)(log_type, message)

    try:
        client.wait_for_job(job, on_log, should_stop=lambda: ex.failed is not None)
    except JobFailed:
        if ex.failed is not None:
            log.warning("Aborting despite job %s still running (the source failed); the "
                        "import fails by itself when no data arrives and removes what it "
                        "made", job)
        raise
    log.info("Import successful")


def _logger(name: str) -> Callable[[str, Any], None]:
    def on_log(log_type: str, message: Any) -> None:
        log.info("[%s] %s", name, message)
    return on_log


def run_move(clients: _Clients, move: Move) -> None:
    """Run one move (both sides); its outcome goes to ``move.error``."""
    log.info("Moving %s to %s", move.src_name, move.dest_name)
    ex = _Exchange()
    errors: dict[str, str] = {}

    def side(which: str, fn: Callable[[RapiClient, Move, _Exchange], None],
             client: Callable[[], RapiClient]) -> None:
        try:
            fn(client(), move, ex)
        except CorralError as err:
            errors[which] = err.message
            log.error("%s: %s side: %s", move.src_name, which, err.message)
            ex.put(failed=err.message)
        except Exception as err:  # a bug: report it as this move's failure
            log.exception("unexpected error on the %s side", which)
            errors[which] = str(err)
            ex.put(failed=str(err))

    dest_thread = threading.Thread(target=side, args=("destination", _dest_side,
                                                      clients.destination))
    dest_thread.start()
    try:
        side("source", _source_side, clients.source)
    finally:
        dest_thread.join()
    if errors:
        move.error = (f"Source error: {errors.get('source')}, destination error: "
                      f"{errors.get('destination')}")


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"move-instance: error: {message}\n")
    sys.exit(1)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``move-instance``."""
    parser = build_parser()
    opts = parser.parse_intermixed_args(argv)
    level = logging.DEBUG if opts.debug else logging.INFO if opts.verbose else logging.WARNING
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s: %(threadName)s %(levelname)s %(message)s")
    src, dest, names = _check_options(parser, opts)
    try:
        nics = _nic_overrides(opts.nics)
        hv = parse_keyval("-H", opts.hvparams)
        be = parse_keyval("-B", opts.beparams)
        os_params = parse_keyval("-O", opts.osparams)
        clients = _Clients(opts, src, dest)
        log.info("Source cluster: %s", src)
        log.info("Destination cluster: %s", dest)
        log.info("Instances to be moved: %s", ", ".join(names))
        log.info("Source cluster RAPI version: %s",
                 clients.source().request("GET", "/version"))
        log.info("Destination cluster RAPI version: %s",
                 clients.destination().request("GET", "/version"))
        has_allocator = bool(opts.iallocator) or bool(
            clients.destination().request("GET", "/2/info").get("default_iallocator"))
    except CorralError as err:
        _fail(err.message)
    if len(names) > 1 and not has_allocator:
        _fail("When moving multiple nodes, an iallocator must be used. None was provided and "
              "the target cluster does not have a default iallocator.")
    if len(names) == 1 and not (has_allocator or opts.dest_primary_node
                                or opts.dest_secondary_node):
        _fail("Target cluster does not have a default iallocator, please specify either "
              "destination nodes or an iallocator.")
    moves = [Move(name, opts.dest_instance_name or name, opts.dest_primary_node,
                  opts.dest_secondary_node, opts.iallocator, opts.dest_disk_template,
                  opts.compress, dict(hv), dict(be), dict(os_params), nics,
                  opts.keep_source_instance)
             for name in names]
    with ThreadPoolExecutor(max_workers=opts.parallel, thread_name_prefix="Move") as pool:
        list(pool.map(lambda m: run_move(clients, m), moves))
    log.info("Instance move results:")
    for move in moves:
        shown = (move.src_name if move.src_name == move.dest_name
                 else f"{move.src_name} as {move.dest_name}")
        outcome = f"Failed ({move.error})" if move.error else "Success"
        log.info("%s: %s", shown, outcome)
    sys.exit(1 if any(m.error for m in moves) else 0)


if __name__ == "__main__":
    main()
