"""``corral-confd-query TYPE [QUERY]``: ask the master candidates' confd.

The query goes to every server at once (by default the master candidates' primary
IPs from this node's configuration or replica); the answer with the highest
configuration serial among those received is printed. Exit status 0 for an OK
answer, 1 for an error answer or no answer (``Failure: ...`` on standard error).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from corral import serializer
from corral.cli.common import CONTEXT_SETTINGS
from corral.cli.localconfig import read_local_config
from corral.confd.client import QueryResult, Server, query_sync
from corral.confd.protocol import (
    DEFAULT_PORT,
    ErrorCode,
    MasterField,
    NodeRole,
    QueryKey,
    QueryType,
    Status,
)
from corral.confd.settings import read_settings
from corral.errors import CorralError, ParameterError
from corral.paths import Paths

__all__ = ["TYPE_NAMES", "main"]

#: Query type names accepted on the command line (numbers work too).
TYPE_NAMES: dict[str, QueryType] = {
    "ping": QueryType.PING,
    "node-role": QueryType.NODE_ROLE_BYNAME,
    "node-pip-by-instance-ip": QueryType.NODE_PIP_BY_INSTANCE_IP,
    "cluster-master": QueryType.CLUSTER_MASTER,
    "node-pip-list": QueryType.NODE_PIP_LIST,
    "mc-pip-list": QueryType.MC_PIP_LIST,
    "instances-ips-list": QueryType.INSTANCES_IPS_LIST,
    "node-drbd": QueryType.NODE_DRBD,
    "node-instances": QueryType.NODE_INSTANCES,
    "instance-disks": QueryType.INSTANCE_DISKS,
    "config-query": QueryType.CONFIG_QUERY,
    "data-collectors": QueryType.DATA_COLLECTORS,
    "instance-list": QueryType.INSTANCE_LIST,
    "instance-primary-node": QueryType.INSTANCE_PRIMARY_NODE,
    "offline-nodes": QueryType.OFFLINE_NODES,
}

_FIELD_NAMES = {"name": MasterField.NAME, "ip": MasterField.IP,
                "mnode-pip": MasterField.MNODE_PIP}


def _accepted_types() -> str:
    return ", ".join(f"{name} ({int(qtype)})" for name, qtype in TYPE_NAMES.items())


def parse_type(text: str) -> QueryType:
    """A query type from its name or number; the error lists what is accepted."""
    qtype = TYPE_NAMES.get(text.lower())
    if qtype is None and text.isdigit() and int(text) in QueryType._value2member_map_:
        qtype = QueryType(int(text))
    if qtype is None:
        raise ParameterError(f"unknown query type '{text}'; accepted: {_accepted_types()}")
    return qtype


def parse_server(text: str, port: int) -> tuple[str, int]:
    """``HOST``, ``HOST:PORT``, ``[V6]:PORT`` or a bare IPv6 address."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else port
    if text.count(":") == 1:
        host, _, port_text = text.partition(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ParameterError(f"bad port in server '{text}'")
        return host, int(port_text)
    return text, port


def build_query(qtype: QueryType, text: str | None, link: str | None,
                fields: tuple[str, ...]) -> Any:
    """The ``query`` value of a request from the command line's arguments."""
    if qtype == QueryType.NODE_PIP_BY_INSTANCE_IP:
        if not text:
            raise ParameterError("node-pip-by-instance-ip needs an instance IP (or IP,IP,...)")
        query: dict[str, Any] = {}
        if "," in text:
            query[QueryKey.IPLIST] = [ip for ip in text.split(",") if ip]
        else:
            query[QueryKey.IP] = text
        if link is not None:
            query[QueryKey.LINK] = link
        return query
    if qtype == QueryType.CLUSTER_MASTER and fields:
        try:
            return {QueryKey.FIELDS: [int(_FIELD_NAMES[f]) for f in fields]}
        except KeyError as err:
            raise ParameterError(f"unknown field {err.args[0]!r}; accepted: "
                                 f"{', '.join(_FIELD_NAMES)}") from None
    if qtype == QueryType.INSTANCES_IPS_LIST and text is None:
        return link
    return text


def default_servers(paths: Paths) -> list[str]:
    """The master candidates' primary IPs from this node's configuration."""
    found = read_local_config(paths)
    if found is None:
        raise ParameterError(f"no configuration at {paths.local_config()} to find the "
                             "master candidates; give --server")
    return found.candidates


def _describe(qtype: QueryType, status: int, value: Any) -> str:
    if status != Status.OK:
        if status == Status.ERROR and type(value) is int and value in ErrorCode._value2member_map_:
            return f"error: {ErrorCode(value).name.lower().replace('_', ' ')}"
        return f"{'not implemented' if status == Status.NOTIMPLEMENTED else 'error'}: {value}"
    if qtype == QueryType.NODE_ROLE_BYNAME and value in NodeRole._value2member_map_:
        return NodeRole(value).name.lower()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    return value if isinstance(value, str) else serializer.dumps(value).decode()


def _report(qtype: QueryType, result: QueryResult, as_json: bool, timeout: float) -> int:
    best = result.best
    if as_json:
        click.echo(serializer.dumps({
            "type": int(qtype),
            "status": None if best is None else best.status,
            "answer": None if best is None else best.answer,
            "serial": None if best is None else best.serial,
            "server": None if best is None else f"{best.server[0]}:{best.server[1]}",
            "answers": len(result.answers), "asked": result.asked,
        }).decode())
    if best is None:
        click.echo(f"Failure: no answer from {result.asked} confd server(s) within "
                   f"{timeout:g}s", err=True)
        return 1
    if not as_json:
        text = _describe(qtype, best.status, best.answer)
        if best.status == Status.OK:
            if text:
                click.echo(text)
        else:
            click.echo(f"Failure: confd answered {text}", err=True)
    return 0 if best.status == Status.OK else 1


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("qtype", metavar="TYPE")
@click.argument("query", required=False)
@click.option("-s", "--server", "servers", multiple=True, metavar="HOST[:PORT]",
              help="Ask this confd server (repeatable; default: every master candidate).")
@click.option("-p", "--port", type=click.IntRange(1, 65535), default=None,
              help=f"Port of servers given without one (default: this node's confd.json, "
                   f"else {DEFAULT_PORT}).")
@click.option("-n", "--answers", type=click.IntRange(min=1), default=None,
              help="Stop waiting after N answers (default: a majority of the servers).")
@click.option("-t", "--timeout", type=click.FloatRange(min=0.01), default=2.0,
              show_default=True, help="Seconds to wait for answers.")
@click.option("--link", default=None,
              help="NIC link for node-pip-by-instance-ip and instances-ips-list.")
@click.option("--field", "fields", multiple=True,
              help="cluster-master: ask for name, ip or mnode-pip (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as one JSON object.")
def cli(qtype: str, query: str | None, servers: tuple[str, ...], port: int | None,
        answers: int | None, timeout: float, link: str | None, fields: tuple[str, ...],
        as_json: bool) -> None:
    """Ask confd a question: TYPE is a name or number, QUERY its argument.

    \b
    Types: ping, node-role NODE, node-pip-by-instance-ip IP[,IP...],
    cluster-master, node-pip-list, mc-pip-list, instances-ips-list [LINK],
    instance-list, instance-primary-node INSTANCE, offline-nodes.
    """
    try:
        parsed = parse_type(qtype)
        paths = Paths.from_env()
        if port is None:
            port = read_settings(paths).port
        targets: list[Server] = [parse_server(s, port) for s in servers] or list(
            default_servers(paths))
        if not targets:
            raise ParameterError("no master candidates known; give --server")
        key = paths.confd_hmac_key.read_bytes()
        result = query_sync(key, targets, parsed, build_query(parsed, query, link, fields),
                            port=port, answers=answers, timeout=timeout)
    except CorralError as err:
        click.echo(f"Failure: {err.message}", err=True)
        sys.exit(err.exit_code)
    except OSError as err:
        click.echo(f"Failure: {err}", err=True)
        sys.exit(1)
    sys.exit(_report(parsed, result, as_json, timeout))


def main() -> None:
    """Entry point of ``corral-confd-query``."""
    cli(prog_name="corral-confd-query")


if __name__ == "__main__":
    main()
