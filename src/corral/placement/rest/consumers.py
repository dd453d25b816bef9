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
from corral.placement.model import Inventory
from corral.placement.query import is_uuid_like, parse_allocation_candidates
from corral.placement.rest.body import (
    check_int,
    check_keys,
    check_length,
    check_uuid,
    json_body,
    need,
    optional,
    prop,
    schema_problem,
)
from corral.placement.rest.candidates_json import candidates_body
from corral.placement.rest.context import Call, forbid_read_only
from corral.placement.rest.protocol import HttpProblem, PlacementResponse, json_response
from corral.placement.rest.providers import inventory_fields, inventory_from
from corral.utils.gcpause import collector_paused

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
_UUID = re.compile(r"^[0-9a-fA-F-]{36}$")

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
    if not isinstance(data, dict):
        raise schema_problem(f"{data!r} is not of type 'object'", "type", where)
    out = {}
    for rc, amount in data.items():
        if not _CONSUMER_TYPE.match(rc):
            raise schema_problem(f"{rc!r} does not match any of the regexes: "
                                 "'^[0-9A-Z_]+$'", "additionalProperties", where)
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise schema_problem(f"{amount!r} is not of type 'integer'", "type",
                                 f"{where}['patternProperties']['^[0-9A-Z_]+$']")
        check_int(amount, rc, where, minimum=1)
        out[rc] = amount
    if not out:
        raise schema_problem("{} does not have enough properties", "minProperties", where)
    return out


def _allocation_dict(call: Call, raw: Any, empty_ok: bool) -> dict[str, dict[str, int]]:
    """Allocations by provider from the body's ``allocations`` (list before 1.12)."""
    out: dict[str, dict[str, int]] = {}
    where = prop("", "allocations")
    if not call.at_least(12):
        if not isinstance(raw, list):
            raise schema_problem(f"{raw!r} is not of type 'array'", "type", where)
        if not raw:
            raise schema_problem("[] is too short", "minItems", where)
        for item in raw:
            item = check_keys(item, ["resource_provider", "resources"], f"{where}['items']")
            rp = need(item, "resource_provider", dict, f"{where}['items']")
            rp = check_keys(rp, ["uuid"], prop(f"{where}['items']", "resource_provider"))
            rp_uuid = check_uuid(need(rp, "uuid", str), "uuid",
                                 prop(f"{where}['items']", "resource_provider"))
            resources = need(item, "resources", dict, f"{where}['items']")
            out[rp_uuid] = _resources(resources, prop(f"{where}['items']", "resources"))
        return out
    if not isinstance(raw, dict):
        raise schema_problem(f"{raw!r} is not of type 'object'", "type", where)
    if not raw and not empty_ok:
        raise schema_problem("{} does not have enough properties", "minProperties", where)
    inner = f"{where}['patternProperties']['^[0-9a-fA-F-]{{36}}$']"
    for rp_uuid, entry in raw.items():
        if not _UUID.match(rp_uuid):
            raise schema_problem(f"{rp_uuid!r} does not match any of the regexes: "
                                 "'^[0-9a-fA-F-]{36}$'", "additionalProperties", where)
        entry = check_keys(entry, ["resources", "generation"], inner)
        out[rp_uuid] = _resources(need(entry, "resources", dict, inner),
                                  prop(inner, "resources"))
    return out


_SUFFIX = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _check_mappings(mappings: Any, where: str) -> None:
    """``mappings`` (1.34): request group suffix -> the providers that served it."""
    if not isinstance(mappings, dict):
        raise schema_problem(f"{mappings!r} is not of type 'object'", "type", where)
    if not mappings:
        raise schema_problem("{} does not have enough properties", "minProperties", where)
    item_where = f"{where}['patternProperties']['[a-zA-Z0-9_-]{{1,64}}']"
    for suffix, providers in mappings.items():
        if not _SUFFIX.search(suffix) and suffix != "":
            continue  # Placement's schema only constrains matching keys
        if not isinstance(providers, list):
            raise schema_problem(f"{providers!r} is not of type 'array'", "type", item_where)
        if not providers:
            raise schema_problem("[] is too short", "minItems", item_where)
        for rp in providers:
            if not isinstance(rp, str):
                raise schema_problem(f"{rp!r} is not of type 'string'", "type",
                                     f"{item_where}['items']")
            check_uuid(rp, "items", item_where)


def _consumer_change(call: Call, consumer_uuid: str, data: Any, where: str = "",
                     *, empty_ok: bool = False, schema_only: bool = False) -> Wanted:
    """One consumer's body as the engine's change, with Placement's checks in its
    order: the schema, then the consumer generation, then the providers."""
    allowed = ["allocations"]
    if call.at_least(8):
        allowed += ["project_id", "user_id"]
    if call.at_least(28):
        allowed.append("consumer_generation")
    if call.at_least(34):
        allowed.append("mappings")
    if call.at_least(38):
        allowed.append("consumer_type")
    data = check_keys(data, allowed, where)
    allocations = _allocation_dict(call, need(data, "allocations", (dict, list), where),
                                   empty_ok=empty_ok or call.at_least(28))
    if call.at_least(8):
        project = check_length(need(data, "project_id", str, where), "project_id", where)
        user = check_length(need(data, "user_id", str, where), "user_id", where)
    else:
        project, user = INCOMPLETE_PROJECT, INCOMPLETE_USER
    if "mappings" in data:
        _check_mappings(data["mappings"], prop(where, "mappings"))
    if call.at_least(28) and "consumer_generation" not in data:
        raise schema_problem("'consumer_generation' is a required property", "required",
                             where)
    ctype = "UNKNOWN"
    if call.at_least(38):
        ctype = need(data, "consumer_type", str, where)
        if not _CONSUMER_TYPE.match(ctype) or len(ctype) > 255:
            raise schema_problem(f"{ctype!r} does not match '^[A-Z0-9_]+$'", "pattern",
                                 prop(where, "consumer_type"))
    if call.at_least(28):
        optional(data, "consumer_generation", (int, type(None)), where=where)
    if schema_only:
        return allocations, None, project, user, ctype
    existing = call.store.consumer(consumer_uuid)
    if call.at_least(28):
        generation = optional(data, "consumer_generation", (int, type(None)), where=where)
        if existing is not None and existing.generation != generation:
            raise HttpProblem(409, f"consumer generation conflict - expected "
                                   f"{existing.generation} but got {generation}",
                              code="placement.concurrent_update")
        if existing is None and generation is not None:
            raise HttpProblem(409, "consumer generation conflict - expected null but got "
                                   f"{generation}", code="placement.concurrent_update")
    else:
        generation = existing.generation if existing is not None else None
    if not call.at_least(38) and existing is not None:
        ctype = existing.consumer_type
    for rp_uuid in allocations:
        if call.store.slot_of(rp_uuid) is None:
            raise HttpProblem(400, f"Allocation for resource provider '{rp_uuid}' that "
                                   "does not exist.")
    return allocations, generation, project, user, ctype


def _apply(call: Call, changes: Mapping[str, Wanted], *, many: bool = False,
           bump_emptied: bool = True) -> None:
    touched: set[str] = set()
    for consumer_uuid, (allocations, *_rest) in changes.items():
        for resources in allocations.values():
            for rc in resources:
                if not call.store.has_resource_class(rc):
                    prefix = ("Unable to allocate inventory" if many else
                              f"Unable to allocate inventory for consumer {consumer_uuid}:")
                    raise HttpProblem(400, f"{prefix} No such resource class {rc}.")
        touched.update(allocations)
        existing = call.store.consumer(consumer_uuid)
        if existing is not None:
            touched.update(existing.allocations)
    try:
        call.store.set_allocations_many(changes, bump_emptied=bump_emptied)
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
    if not isinstance(data, dict):
        raise schema_problem(f"{data!r} is not of type 'object'", "type")
    if not data:
        raise schema_problem("{} does not have enough properties", "minProperties")
    changes: dict[str, Wanted] = {}
    for key, body in data.items():
        if not _UUID.match(key):
            raise schema_problem(f"{key!r} does not match any of the regexes: "
                                 "'^[0-9a-fA-F-]{36}$'", "additionalProperties")
        changes[key] = _consumer_change(call, key, body,
                                        "['patternProperties']['^[0-9a-fA-F-]{36}$']",
                                        empty_ok=True)
    _apply(call, changes, many=True)
    return PlacementResponse(204)


def delete_allocations(call: Call) -> PlacementResponse:
    """``DELETE /allocations/{consumer_uuid}``."""
    forbid_read_only(call, "allocations:delete")
    consumer_uuid = call.args["consumer_uuid"]
    existing = call.store.consumer(consumer_uuid)
    if existing is None:
        raise HttpProblem(404, f"No allocations for consumer '{consumer_uuid}'")
    _apply(call, {consumer_uuid: ({}, existing.generation, existing.project_id,
                                  existing.user_id, existing.consumer_type)},
           bump_emptied=False)
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
    for key in ("project_id", "user_id"):
        value = query.get(key)
        if value is not None and not 1 <= len(value) <= 255:
            rule = "minLength" if not value else "maxLength"
            raise HttpProblem(400, f"Invalid query string parameters: {value!r} is too "
                                   f"{'short' if not value else 'long'}\n\nFailed "
                                   f"validating '{rule}' in schema['properties']['{key}']")
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
    with collector_paused():  # tens of thousands of small dicts, no cycles
        return _list_candidates(call)


def _list_candidates(call: Call) -> PlacementResponse:
    request = parse_allocation_candidates(call.params, call.version)
    found = allocation_candidates(call.store, request)
    requested = frozenset(rc for group in request.groups.values() for rc in group.resources)
    body = candidates_body(call.store, found, call.version, requested)
    return PlacementResponse(200, {"Content-Type": "application/json"}, body.decode())


def reshape(call: Call) -> PlacementResponse:
    """``POST /reshaper`` (1.30): new inventories and allocations at once, in
    Placement's three steps: every provider gets the union of its old and new
    inventories, the allocations are replaced, then the new inventories alone are
    set, in Placement's order of checks. A step refused after the first change
    rolls the engine back to its state before the call (all or nothing)."""
    forbid_read_only(call, "reshaper:reshape")
    data = check_keys(json_body(call.req), ["inventories", "allocations"])
    raw_inv = need(data, "inventories", dict)
    raw_alloc = need(data, "allocations", dict)
    where = f"{prop('', 'inventories')}['patternProperties']['^[0-9a-fA-F-]{{36}}$']"
    checked: dict[str, tuple[int, dict[str, dict[str, Any]]]] = {}
    for rp_uuid, entry in raw_inv.items():
        entry = check_keys(entry, ["inventories", "resource_provider_generation"], where)
        generation = need(entry, "resource_provider_generation", int, where)
        checked[rp_uuid] = (generation, {
            rc: inventory_fields(value, f"{prop(where, 'inventories')}"
                                        f"['patternProperties']['{rc}']")
            for rc, value in need(entry, "inventories", dict, where).items()})
    alloc_where = f"{prop('', 'allocations')}['patternProperties']['^[0-9a-fA-F-]{{36}}$']"
    for consumer_uuid, body in raw_alloc.items():
        _consumer_change(call, consumer_uuid, body, alloc_where, schema_only=True)
    inventories: dict[str, dict[str, Inventory]] = {}
    for rp_uuid, (generation, fields) in checked.items():
        if call.store.slot_of(rp_uuid) is None:
            raise HttpProblem(400, f"Resource provider {rp_uuid} in inventories not found: "
                                   f"No resource provider with uuid {rp_uuid} found",
                              code="placement.resource_provider.not_found")
        current = call.store.provider(rp_uuid).generation
        if current != generation:
            raise HttpProblem(409, f"resource provider generation conflict for provider "
                                   f"{rp_uuid}: actual: {current}, given: {generation}",
                              code="placement.concurrent_update")
        inventories[rp_uuid] = {rc: inventory_from(call, values, rc, rp_uuid, "update")
                                for rc, values in fields.items()}
    changes = {c: _consumer_change(call, c, body, alloc_where)
               for c, body in raw_alloc.items()}
    wanted_classes = [rc for allocations, *_rest in changes.values()
                      for resources in allocations.values() for rc in resources]
    wanted_classes += [rc for new in inventories.values() for rc in new]
    for rc in wanted_classes:
        if not call.store.has_resource_class(rc):
            raise HttpProblem(400, f"malformed reshaper data: No such resource class {rc}.")
    touched = set(inventories)
    for consumer_uuid, (allocations, *_rest) in changes.items():
        touched.update(allocations)
        existing = call.store.consumer(consumer_uuid)
        if existing is not None:
            touched.update(existing.allocations)
    before = call.store.snapshot(touched, changes)
    try:
        for rp_uuid, new in inventories.items():
            if new:
                call.store.set_inventories(rp_uuid, None,
                                           {**call.store.inventories(rp_uuid), **new})
        try:
            _apply(call, changes)
        except HttpProblem as problem:
            if problem.status == 409 and problem.code != "placement.concurrent_update":
                problem.detail = problem.detail.replace("Unable to allocate inventory: ", "")
                problem.detail = f"Unable to allocate inventory: {problem.detail}"
            raise
        for rp_uuid, new in inventories.items():
            try:
                call.store.set_inventories(rp_uuid, None, new)
            except PlacementError as err:
                raise HttpProblem(409, f"update conflict: {err.message}",
                                  code=err.placement_code or "placement.undefined_code",
                                  ) from None
    except (HttpProblem, PlacementError):
        call.store.rollback(before)
        call.changes.providers.clear()
        call.changes.consumers.clear()
        raise
    call.changes.providers.update(touched)
    call.changes.consumers.update(changes)
    return PlacementResponse(204)
