"""Handlers of allocations (``/allocations``, ``/allocations/{consumer}``), ``/usages``,
``/allocation_candidates`` and ``/reshaper``.

Shapes by microversion (Placement's): allocation bodies are a list of
``{"resource_provider": {"uuid"}, "resources"}`` before 1.12 and a dict by provider
from 1.12; ``project_id``/``user_id`` are required from 1.8; the consumer generation
is required (``null`` for a new consumer) and answered from 1.28; ``consumer_type``
from 1.38; candidates carry ``mappings`` from 1.34, summaries ``traits`` from 1.17 and
the tree from 1.29, and all of a provider's classes from 1.27.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Mapping
from typing import Any

from corral.errors import PlacementError
from corral.placement.candidates import allocation_candidates
from corral.placement.query import is_uuid_like, parse_allocation_candidates
from corral.placement.rest.body import (
    check_keys,
    check_uuid,
    json_body,
    need,
    optional,
    schema_problem,
)
from corral.placement.rest.context import Call, forbid_read_only
from corral.placement.rest.protocol import HttpProblem, PlacementResponse, json_response
from corral.placement.rest.providers import INVENTORY_FIELDS, inventory_from

__all__ = ["delete_allocations", "get_allocations", "list_candidates", "post_allocations",
           "put_allocations", "reshape", "total_usages"]

#: What a consumer's project and user are when a client before 1.8 gives none
#: (Placement's configurable defaults).
INCOMPLETE_PROJECT = "00000000-0000-0000-0000-000000000000"
INCOMPLETE_USER = "00000000-0000-0000-0000-000000000000"

#: How Placement names the type of a consumer that was given none.
UNKNOWN_TYPE = "unknown"
#: What a consumer type looks like (Placement's pattern for names).
_CONSUMER_TYPE = re.compile(r"^[A-Z0-9_]+$")

#: One consumer's change as the engine takes it.
Wanted = tuple[dict[str, dict[str, int]], int | None, str, str, str]


def get_allocations(call: Call) -> PlacementResponse:
    """``GET /allocations/{consumer_uuid}``."""
    consumer = call.store.consumer(call.args["consumer_uuid"])
    allocations: dict[str, Any] = {}
    out: dict[str, Any] = {"allocations": allocations}
    if consumer is None:
        return json_response(200, out)
    for rp_uuid, resources in consumer.allocations.items():
        allocations[rp_uuid] = {"generation": call.store.provider(rp_uuid).generation,
                                "resources": dict(resources)}
    if call.at_least(12):
        out["project_id"] = consumer.project_id
        out["user_id"] = consumer.user_id
    if call.at_least(28):
        out["consumer_generation"] = consumer.generation
    if call.at_least(38):
        out["consumer_type"] = _type_name(consumer.consumer_type)
    return json_response(200, out)


def _type_name(consumer_type: str) -> str:
    """A consumer's type as Placement names it: ``unknown`` for one given none (the
    engine's ``UNKNOWN``)."""
    return UNKNOWN_TYPE if consumer_type == "UNKNOWN" else consumer_type


def _resources(data: Any, where: str) -> dict[str, int]:
    resources = check_keys(data, _any_keys(data), where)
    out = {}
    for rc, amount in resources.items():
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise schema_problem(f"{amount!r} is not of type 'integer' (field "
                                 f"'{where}.{rc}')")
        if amount < 1:
            raise schema_problem(f"{amount} is less than the minimum of 1 (field "
                                 f"'{where}.{rc}')")
        out[rc] = amount
    if not out:
        raise schema_problem(f"{{}} does not have enough properties (field '{where}')")
    return out


def _any_keys(data: Any) -> list[str]:
    return list(data) if isinstance(data, dict) else []


def _allocation_dict(call: Call, raw: Any, empty_ok: bool) -> dict[str, dict[str, int]]:
    """Allocations by provider from the body's ``allocations`` (list before 1.12)."""
    out: dict[str, dict[str, int]] = {}
    if not call.at_least(12):
        if not isinstance(raw, list):
            raise schema_problem(f"{raw!r} is not of type 'array' (field 'allocations')")
        if not raw:
            raise schema_problem("[] is too short (field 'allocations')")
        for item in raw:
            item = check_keys(item, ["resource_provider", "resources"], "allocation")
            rp = check_keys(need(item, "resource_provider", dict), ["uuid"],
                            "resource_provider")
            rp_uuid = check_uuid(need(rp, "uuid", str), "resource_provider.uuid")
            out[rp_uuid] = _resources(need(item, "resources", dict), "resources")
        return out
    if not isinstance(raw, dict):
        raise schema_problem(f"{raw!r} is not of type 'object' (field 'allocations')")
    if not raw and not empty_ok:
        raise schema_problem("{} does not have enough properties (field 'allocations')")
    for rp_uuid, entry in raw.items():
        check_uuid(rp_uuid, "allocations")
        allowed = ["resources", "generation"]
        entry = check_keys(entry, allowed, f"allocations.{rp_uuid}")
        out[rp_uuid] = _resources(need(entry, "resources", dict),
                                  f"allocations.{rp_uuid}.resources")
    return out


def _consumer_change(call: Call, consumer_uuid: str, data: Any) -> Wanted:
    """One consumer's body as the engine's change, with Placement's rules."""
    allowed = ["allocations"]
    if call.at_least(8):
        allowed += ["project_id", "user_id"]
    if call.at_least(28):
        allowed.append("consumer_generation")
    if call.at_least(38):
        allowed.append("consumer_type")
    data = check_keys(data, allowed)
    allocations = _allocation_dict(call, need(data, "allocations", (dict, list)),
                                   empty_ok=call.at_least(28))
    if call.at_least(8):
        project = need(data, "project_id", str)
        user = need(data, "user_id", str)
    else:
        project, user = INCOMPLETE_PROJECT, INCOMPLETE_USER
    existing = call.store.consumer(consumer_uuid)
    if call.at_least(28):
        if "consumer_generation" not in data:
            raise schema_problem("'consumer_generation' is a required property")
        generation = optional(data, "consumer_generation", (int, type(None)))
    else:
        generation = existing.generation if existing is not None else None
    ctype = "UNKNOWN"
    if call.at_least(38):
        ctype = need(data, "consumer_type", str)
        if not _CONSUMER_TYPE.match(ctype) or len(ctype) > 255:
            raise schema_problem(f"'{ctype}' does not match '^[A-Z0-9_]+$' (field "
                                 "'consumer_type')")
    elif existing is not None:
        ctype = existing.consumer_type
    for rp_uuid in allocations:
        if call.store.slot_of(rp_uuid) is None:
            raise HttpProblem(400, f"Unable to allocate inventory for consumer "
                                   f"{consumer_uuid}: No such resource provider(s): "
                                   f"{rp_uuid}")
    return allocations, generation, project, user, ctype


def _apply(call: Call, changes: Mapping[str, Wanted]) -> None:
    touched: set[str] = set()
    for consumer_uuid, (allocations, *_rest) in changes.items():
        touched.update(allocations)
        existing = call.store.consumer(consumer_uuid)
        if existing is not None:
            touched.update(existing.allocations)
    try:
        call.store.set_allocations_many(changes)
    except PlacementError as err:
        problem = HttpProblem.from_error(err)
        if err.http_status == 409 and problem.code == "placement.concurrent_update":
            problem.detail = ("Inventory and/or allocations changed while attempting to "
                              f"allocate: {err.message}")
        raise problem from None
    call.changes.consumers.update(changes)
    call.changes.providers.update(touched)


def _consumer_uuid(call: Call) -> str:
    value = call.args["consumer_uuid"]
    if not is_uuid_like(value):
        raise HttpProblem(400, f"Malformed consumer_uuid: {value}")
    return str(uuidlib.UUID(value))


def put_allocations(call: Call) -> PlacementResponse:
    """``PUT /allocations/{consumer_uuid}``: replace what the consumer holds."""
    forbid_read_only(call, "allocations:update")
    consumer_uuid = _consumer_uuid(call)
    _apply(call, {consumer_uuid: _consumer_change(call, consumer_uuid,
                                                  json_body(call.req))})
    return PlacementResponse(204)


def post_allocations(call: Call) -> PlacementResponse:
    """``POST /allocations`` (1.13): several consumers at once, all or nothing."""
    forbid_read_only(call, "allocations:manage")
    data = json_body(call.req)
    if not isinstance(data, dict) or not data:
        raise schema_problem(f"{data!r} does not have enough properties")
    changes: dict[str, Wanted] = {}
    for key, body in data.items():
        consumer_uuid = check_uuid(key, "consumer uuid")
        changes[consumer_uuid] = _consumer_change(call, consumer_uuid, body)
    _apply(call, changes)
    return PlacementResponse(204)


def delete_allocations(call: Call) -> PlacementResponse:
    """``DELETE /allocations/{consumer_uuid}``."""
    forbid_read_only(call, "allocations:delete")
    consumer_uuid = call.args["consumer_uuid"]
    existing = call.store.consumer(consumer_uuid)
    if existing is None:
        raise HttpProblem(404, f"No allocations for consumer '{consumer_uuid}'")
    _apply(call, {consumer_uuid: ({}, existing.generation, existing.project_id,
                                  existing.user_id, existing.consumer_type)})
    return PlacementResponse(204)


def total_usages(call: Call) -> PlacementResponse:
    """``GET /usages`` (1.9): a project's (and user's) usage; by consumer type with
    ``consumer_count`` from 1.38."""
    params = call.params
    allowed = {"project_id", "user_id"} | ({"consumer_type"} if call.at_least(38) else set())
    for key, _value in params:
        if key not in allowed:
            raise HttpProblem(400, "Invalid query string parameters: Additional properties "
                                   f"are not allowed ('{key}' was unexpected)")
    query = dict(params)
    if "project_id" not in query:
        raise HttpProblem(400, "Invalid query string parameters: 'project_id' is a "
                               "required property")
    project, user = query["project_id"], query.get("user_id")
    ctype = query.get("consumer_type")
    if not call.at_least(38):
        return json_response(200, {"usages": call.store.total_usages(project, user)})
    grouped: dict[str, dict[str, int]] = {}
    for consumer in call.store.consumers():
        if consumer.project_id != project or (user and consumer.user_id != user):
            continue
        kind = _type_name(consumer.consumer_type)
        if ctype not in (None, "all") and kind != ctype:
            continue
        key = "all" if ctype == "all" else kind
        entry = grouped.setdefault(key, {"consumer_count": 0})
        entry["consumer_count"] += 1
        for resources in consumer.allocations.values():
            for rc, amount in resources.items():
                entry[rc] = entry.get(rc, 0) + amount
    return json_response(200, {"usages": grouped})


def list_candidates(call: Call) -> PlacementResponse:
    """``GET /allocation_candidates`` (1.10)."""
    request = parse_allocation_candidates(call.params, call.version)
    found = allocation_candidates(call.store, request)
    requested = {rc for group in request.groups.values() for rc in group.resources}
    requests: list[dict[str, Any]] = []
    for candidate in found.allocation_requests:
        if call.at_least(12):
            entry: dict[str, Any] = {"allocations": {
                rp: {"resources": dict(res)} for rp, res in candidate.allocations.items()}}
            if call.at_least(34):
                entry["mappings"] = {k: list(v) for k, v in candidate.mappings.items()}
        else:
            entry = {"allocations": [{"resource_provider": {"uuid": rp},
                                      "resources": dict(res)}
                                     for rp, res in candidate.allocations.items()]}
        requests.append(entry)
    summaries: dict[str, Any] = {}
    for rp_uuid, summary in found.provider_summaries.items():
        resources = {rc: {"capacity": cap, "used": used}
                     for rc, (cap, used) in summary.resources.items()
                     if call.at_least(27) or rc in requested}
        out: dict[str, Any] = {"resources": resources}
        if call.at_least(17):
            out["traits"] = sorted(summary.traits)
        if call.at_least(29):
            out["parent_provider_uuid"] = summary.parent_uuid
            out["root_provider_uuid"] = summary.root_uuid
        summaries[rp_uuid] = out
    return json_response(200, {"allocation_requests": requests,
                               "provider_summaries": summaries})


def reshape(call: Call) -> PlacementResponse:
    """``POST /reshaper`` (1.30): new inventories and allocations at once. Every
    generation is checked before anything changes; the engine applies inventories
    and allocations in two steps, and the caller restores the previous state from
    the persisted rows if the second step fails (see :class:`Changes`)."""
    forbid_read_only(call, "reshaper:reshape")
    data = check_keys(json_body(call.req), ["inventories", "allocations"])
    raw_inv = need(data, "inventories", dict)
    raw_alloc = need(data, "allocations", dict)
    inventories: dict[str, tuple[int, dict[str, Any]]] = {}
    for rp_uuid, entry in raw_inv.items():
        entry = check_keys(entry, ["inventories", "resource_provider_generation"],
                           f"inventories.{rp_uuid}")
        generation = need(entry, "resource_provider_generation", int)
        if call.store.slot_of(rp_uuid) is None:
            raise HttpProblem(400, f"Resource provider {rp_uuid} in inventories not found")
        sub = Call(call.store, call.req, call.version, {"uuid": rp_uuid})
        inventories[rp_uuid] = (generation, {
            rc: inventory_from(sub, check_keys(fields, INVENTORY_FIELDS, rc), rc)
            for rc, fields in need(entry, "inventories", dict).items()})
    changes = {check_uuid(c, "consumer uuid"): _consumer_change(call, c, body)
               for c, body in raw_alloc.items()}
    for rp_uuid, (generation, _inv) in inventories.items():
        current = call.store.provider(rp_uuid).generation
        if current != generation:
            raise HttpProblem(409, f"resource provider generation conflict: provider "
                                   f"{rp_uuid} is at generation {current}, the change was "
                                   f"based on {generation}",
                              code="placement.concurrent_update")
    # Allocations first leave providers whose inventory then shrinks.
    releasing: dict[str, Wanted] = {c: ({}, w[1], *w[2:]) for c, w in changes.items()
                 if call.store.consumer(c) is not None}
    call.changes.providers.update(inventories)
    call.changes.consumers.update(changes)
    if releasing:
        _apply(call, releasing)
        # Released consumers are gone from the engine: they come back as new ones.
        changes = {c: (w[0], None if c in releasing else w[1], *w[2:])
                   for c, w in changes.items()}
    for rp_uuid, (_generation, inv) in inventories.items():
        try:
            call.store.set_inventories(rp_uuid, None, inv)
        except PlacementError as err:
            raise HttpProblem.from_error(err) from None
    _apply(call, {c: w for c, w in changes.items() if w[0]})
    return PlacementResponse(204)

