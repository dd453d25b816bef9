"""Refusals of REST changes to what the cluster owns in a served store.

When the ``/placement/`` store shows the cluster (:mod:`corral.masterd.placement_sync`),
a node's provider follows the node (its inventories its live resources, its traits and
aggregates the node's settings) and an instance's consumer follows the instance. A REST
client may read them and may allocate against node providers, but changing one over
REST would be undone by the next sync and never be saved; such a request is refused
up front with 409 and Placement's error body, saying which node or instance it is and
which command changes it. The trait that marks node providers
(:data:`~corral.placement.cluster.NODE_TRAIT`) cannot be given to another provider.

HTTP-free like the rest of :mod:`corral.placement.rest`: the caller says which
providers are nodes and which consumers are instances.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Final

from corral.placement.cluster import NODE_TRAIT
from corral.placement.rest.protocol import (
    HttpProblem,
    PlacementRequest,
    PlacementResponse,
    error_response,
    negotiate,
)
from corral.placement.rest.routes import match

__all__ = ["cluster_refusal"]

_WRITES: Final = frozenset({"PUT", "POST", "DELETE"})
_RP: Final = "/resource_providers/{uuid}"

#: Which kind of change each route is, for the message.
_WHAT: Final[dict[str, str | dict[str, str]]] = {
    _RP: {"PUT": "renamed or moved", "DELETE": "deleted"},
    f"{_RP}/inventories": "given inventories",
    f"{_RP}/inventories/{{resource_class}}": "given inventories",
    f"{_RP}/aggregates": "given aggregates",
    f"{_RP}/traits": "given traits",
}


def cluster_refusal(req: PlacementRequest, node_name: Callable[[str], str | None],
                    instance_name: Callable[[str], str | None]) -> PlacementResponse | None:
    """409 for a request that would change a cluster node's provider or an instance's
    consumer, or give another provider the nodes' trait; None for any other request
    (including one :func:`~corral.placement.rest.handle` refuses for another reason:
    a bad microversion, path, method or body, or a user who may not write).

    ``node_name(uuid)`` is the name of the node whose provider has that UUID (None
    for other providers); ``instance_name(uuid)`` the same for instances' consumers.
    """
    if req.method not in _WRITES or req.read_only:
        return None
    try:
        version = negotiate(req.version_header)
    except HttpProblem:
        return None
    found = match(req.path)
    if found is None:
        return None
    route, args = found
    served = route.methods.get(req.method)
    if served is None or version < served.since:
        return None
    detail = _refused(route.template, req, args, node_name, instance_name)
    if detail is None:
        return None
    return error_response(HttpProblem(409, detail), req.request_id, version, req.method,
                          req.accept)


def _refused(template: str, req: PlacementRequest, args: dict[str, str],
             node_name: Callable[[str], str | None],
             instance_name: Callable[[str], str | None]) -> str | None:
    """What is wrong with the request, or None."""
    what = _WHAT.get(template)
    if what is not None:
        rp_uuid = args["uuid"]
        name = node_name(rp_uuid)
        if name is not None:
            action = what if isinstance(what, str) else what.get(req.method)
            if action is not None:
                return _node_detail(rp_uuid, name, action)
        if template == f"{_RP}/traits" and req.method == "PUT":
            traits = _body(req).get("traits")
            if isinstance(traits, list) and NODE_TRAIT in traits:
                return (f"trait {NODE_TRAIT} marks the providers of the cluster's nodes; "
                        f"resource provider {rp_uuid} is not a node and cannot have it")
        return None
    if template == "/resource_providers" and req.method == "POST":
        wanted = _body(req).get("uuid")
        name = node_name(wanted) if isinstance(wanted, str) else None
        if name is not None:
            return (f"resource provider {wanted} is cluster node {name}: its provider is "
                    f"the cluster's and cannot be created over this API")
        return None
    if template == "/allocations/{consumer_uuid}":
        return _instances_detail([args["consumer_uuid"]], instance_name)
    if template == "/allocations" and req.method == "POST":
        return _instances_detail(_keys(_body(req)), instance_name)
    if template == "/reshaper":
        body = _body(req)
        for rp_uuid in _keys(body.get("inventories")):
            name = node_name(rp_uuid)
            if name is not None:
                return _node_detail(rp_uuid, name, "given inventories")
        return _instances_detail(_keys(body.get("allocations")), instance_name)
    return None


def _node_detail(rp_uuid: str, name: str, action: str) -> str:
    return (f"resource provider {rp_uuid} is cluster node {name}: it follows the node "
            f"and cannot be {action} over this API (its inventories are the node's live "
            f"resources; change its aggregates and traits with 'gnt-node modify "
            f"--aggregates/--traits {name}', remove it with 'gnt-node remove {name}')")


def _instances_detail(consumers: Iterable[str],
                      instance_name: Callable[[str], str | None]) -> str | None:
    for consumer_uuid in consumers:
        name = instance_name(consumer_uuid)
        if name is not None:
            return (f"consumer {consumer_uuid} is instance {name} of the cluster: its "
                    f"allocations follow the instance and cannot be changed over this "
                    f"API (resize it with 'gnt-instance modify', move it with "
                    f"'gnt-instance migrate/failover/move', remove it with "
                    f"'gnt-instance remove')")
    return None


def _body(req: PlacementRequest) -> dict[str, Any]:
    """The body as a JSON object; empty when it is not one (the handler refuses it)."""
    try:
        body = json.loads(req.body) if req.body else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _keys(value: Any) -> list[str]:
    return [key for key in value if isinstance(key, str)] if isinstance(value, dict) else []
