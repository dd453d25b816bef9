"""Handlers of ``/resource_providers`` and what hangs below a provider: inventories,
aggregates, traits, usages and allocations.

Shapes by microversion (Placement's): links ``aggregates`` from 1.1, ``traits`` 1.6,
``allocations`` 1.11; ``parent_provider_uuid``/``root_provider_uuid`` 1.14; ``POST``
answers 201 with ``Location`` before 1.20 and 200 with the provider from 1.20;
aggregates carry the provider generation (and need it to change) from 1.19.
"""

from __future__ import annotations

import re
from typing import Any

from corral.errors import PlacementError
from corral.placement.model import Inventory, ResourceProvider
from corral.placement.providers import parse_resource_providers, resource_providers
from corral.placement.rest.body import (
    MAX_INT,
    check_int,
    check_keys,
    check_uuid,
    json_body,
    need,
    optional,
    prop,
    schema_problem,
)
from corral.placement.rest.context import Call, forbid_read_only
from corral.placement.rest.protocol import HttpProblem, PlacementResponse, json_response

__all__ = ["INVENTORY_FIELDS", "create_inventory", "create_provider", "delete_inventories",
           "delete_inventory", "delete_provider", "delete_provider_traits",
           "get_aggregates", "get_inventories", "get_inventory", "get_provider",
           "get_provider_traits", "inventory_fields", "inventory_from", "list_providers",
           "provider_allocations", "provider_usages", "serialize_provider",
           "set_aggregates", "set_inventories", "set_provider_traits", "update_inventory",
           "update_provider"]

_UUID = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size",
                     "allocation_ratio")


def serialize_provider(call: Call, rp: ResourceProvider) -> dict[str, Any]:
    """A provider as Placement shows it at the call's microversion."""
    base = f"/resource_providers/{rp.uuid}"
    rels = ["inventories", "usages"]
    if call.at_least(1):
        rels.append("aggregates")
    if call.at_least(6):
        rels.append("traits")
    if call.at_least(11):
        rels.append("allocations")
    links = [{"rel": "self", "href": call.url(base)}]
    links.extend({"rel": rel, "href": call.url(f"{base}/{rel}")} for rel in rels)
    out: dict[str, Any] = {"uuid": rp.uuid, "name": rp.name, "generation": rp.generation,
                           "links": links}
    if call.at_least(14):
        out["parent_provider_uuid"] = rp.parent_uuid
        out["root_provider_uuid"] = rp.root_uuid
    return out


def _provider(call: Call) -> ResourceProvider:
    try:
        return call.store.provider(call.args["uuid"])
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None


def list_providers(call: Call) -> PlacementResponse:
    """``GET /resource_providers`` with Placement's filters."""
    found = resource_providers(call.store, parse_resource_providers(call.params,
                                                                    call.version))
    return json_response(200, {"resource_providers": [serialize_provider(call, rp)
                                                      for rp in found]})


def get_provider(call: Call) -> PlacementResponse:
    """``GET /resource_providers/{uuid}``."""
    return json_response(200, serialize_provider(call, _provider(call)))


def _parent_field(data: dict[str, Any]) -> str | None:
    parent = data.get("parent_provider_uuid")
    if parent is None:
        return None
    if not isinstance(parent, str):
        raise schema_problem(f"{parent!r} is not valid under any of the given schemas",
                             "anyOf", prop("", "parent_provider_uuid"))
    return check_uuid(parent, "parent_provider_uuid")


def _name_field(data: dict[str, Any]) -> str:
    name: str = need(data, "name", str)
    if len(name) > 200:
        raise schema_problem(f"{name!r} is too long", "maxLength", prop("", "name"))
    return name


def create_provider(call: Call) -> PlacementResponse:
    """``POST /resource_providers``: ``name``, optional ``uuid`` and (1.14)
    ``parent_provider_uuid``."""
    forbid_read_only(call, "resource_providers:create")
    allowed = ["name", "uuid"] + (["parent_provider_uuid"] if call.at_least(14) else [])
    data = check_keys(json_body(call.req), allowed)
    name = _name_field(data)
    rp_uuid = optional(data, "uuid", str)
    if rp_uuid is not None:
        rp_uuid = check_uuid(rp_uuid, "uuid")
    parent = _parent_field(data)
    if not name or (parent is not None and (parent == rp_uuid
                                            or call.store.slot_of(parent) is None)):
        reason = ("name is required" if not name else
                  "parent provider UUID cannot be same as UUID. Please set parent provider "
                  "UUID to None if there is no parent." if parent == rp_uuid else
                  "parent provider UUID does not exist.")
        raise HttpProblem(400, f'Unable to create resource provider "{name}", {rp_uuid}: '
                               f"Object action create failed because: {reason}")
    duplicates = []
    if rp_uuid is not None and call.store.slot_of(rp_uuid) is not None:
        duplicates.append(f"uuid: {rp_uuid}")
    if call.store.uuid_named(name) is not None:
        duplicates.append(f"name: {name}")
    if duplicates:
        raise HttpProblem(409, f"Conflicting resource provider {', '.join(duplicates)} "
                               "already exists.", code="placement.duplicate_name")
    try:
        rp = call.store.create_provider(name, rp_uuid, parent)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(rp.uuid)
    location = {"Location": call.url(f"/resource_providers/{rp.uuid}")}
    if call.at_least(20):
        return json_response(200, serialize_provider(call, rp), location)
    return PlacementResponse(201, location)


def update_provider(call: Call) -> PlacementResponse:
    """``PUT /resource_providers/{uuid}``: a new name and (1.14) parent; moving a
    child or making it a root from 1.37."""
    forbid_read_only(call, "resource_providers:update")
    rp = _provider(call)
    allowed = ["name"] + (["parent_provider_uuid"] if call.at_least(14) else [])
    data = check_keys(json_body(call.req), allowed)
    name = _name_field(data)
    parent = _parent_field(data) if "parent_provider_uuid" in data else rp.parent_uuid
    if name != rp.name and call.store.uuid_named(name) is not None:
        raise HttpProblem(409, f"Conflicting resource provider {name} already exists.",
                          code="placement.duplicate_name")
    try:
        updated = call.store.update_provider(rp.uuid, name, parent,
                                             allow_reparenting=call.at_least(37))
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    for root in {updated.root_uuid, rp.root_uuid}:
        root_slot = call.store.slot_of(root)
        if root_slot is not None:
            call.changes.providers.update(call.store.uuid_at[slot]
                                          for slot in call.store.subtree(root_slot))
    return json_response(200, serialize_provider(call, updated))


def delete_provider(call: Call) -> PlacementResponse:
    """``DELETE /resource_providers/{uuid}``."""
    forbid_read_only(call, "resource_providers:delete")
    rp_uuid = call.args["uuid"]
    if call.store.slot_of(rp_uuid) is None:
        raise HttpProblem(404, f"No resource provider with uuid {rp_uuid} found for delete")
    record = call.store.at(call.store.slot_of(rp_uuid) or 0)
    if record.children:
        raise HttpProblem(409, f"Unable to delete parent resource provider {rp_uuid}: It "
                               "has child resource providers.",
                          code="placement.resource_provider.cannot_delete_parent")
    if record.consumers:
        raise HttpProblem(409, f"Unable to delete resource provider {rp_uuid}: Resource "
                               "provider has allocations.",
                          code="placement.resource_provider.inuse")
    try:
        call.store.delete_provider(rp_uuid)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(rp_uuid)
    return PlacementResponse(204)


# ----- inventories -----

def _serialize_inventory(inv: Inventory) -> dict[str, Any]:
    return {"total": inv.total, "reserved": inv.reserved, "min_unit": inv.min_unit,
            "max_unit": inv.max_unit if inv.max_unit is not None else inv.total,
            "step_size": inv.step_size, "allocation_ratio": inv.allocation_ratio}


#: Placement's largest allocation ratio (its database's single-precision float).
_MAX_RATIO = 3.40282e38


def inventory_fields(data: Any, where: str, *, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """An inventory's fields from a body object at schema path ``where``, checked as
    Placement's schema checks them (``extra``: other keys the object may have)."""
    data = check_keys(data, (*INVENTORY_FIELDS, *extra), where)
    values: dict[str, Any] = {"total": check_int(need(data, "total", int, where), "total",
                                                 where, minimum=1)}
    for key, minimum in (("reserved", 0), ("min_unit", 1), ("max_unit", 1),
                         ("step_size", 1)):
        value = optional(data, key, int, where=where)
        if value is not None:
            values[key] = check_int(value, key, where, minimum=minimum)
    ratio = optional(data, "allocation_ratio", float, where=where)
    if ratio is not None:
        if ratio > _MAX_RATIO:
            raise schema_problem(f"{ratio} is greater than the maximum of {_MAX_RATIO}",
                                 "maximum", prop(where, "allocation_ratio"))
        values["allocation_ratio"] = float(ratio)
    return values


def inventory_from(call: Call, values: dict[str, Any], rc: str, rp_uuid: str,
                   doing: str) -> Inventory:
    """The inventory of ``rc`` from checked fields (``max_unit`` defaults to
    Placement's largest integer, not the total); 400 ``Unable to <doing> inventory``
    when it leaves no capacity (reserved >= total, or > total from 1.26)."""
    values = {"reserved": 0, "min_unit": 1, "max_unit": MAX_INT, "step_size": 1,
              "allocation_ratio": 1.0, **values}
    capacity = (values["total"] - values["reserved"]) * values["allocation_ratio"]
    can_be_total = call.at_least(26)
    if capacity < 0 or (capacity == 0 and not can_be_total):
        than = "greater than total" if can_be_total else "greater than or equal to total"
        raise HttpProblem(400, f"Unable to {doing} inventory for resource provider "
                               f"{rp_uuid}: Invalid inventory for '{rc}' on resource "
                               f"provider '{rp_uuid}'. The reserved value is {than}.")
    try:
        return Inventory(**values)
    except (PlacementError, ValueError) as err:
        message = err.message if isinstance(err, PlacementError) else str(err)
        raise HttpProblem(400, f"Bad inventory {rc} for resource provider {rp_uuid}: "
                               f"{message}") from None


def _inventories_answer(call: Call, status: int = 200) -> PlacementResponse:
    rp = _provider(call)
    inventories = call.store.inventories(rp.uuid)
    return json_response(status, {
        "inventories": {rc: _serialize_inventory(inv) for rc, inv in inventories.items()},
        "resource_provider_generation": rp.generation})


def get_inventories(call: Call) -> PlacementResponse:
    """``GET .../inventories``."""
    return _inventories_answer(call)


def _set(call: Call, inventories: dict[str, Inventory]) -> None:
    try:
        call.store.set_inventories(call.args["uuid"], None, inventories)
    except PlacementError as err:
        problem = HttpProblem.from_error(err)
        if err.http_status == 409:
            problem.detail = f"update conflict: {err.message}"
        raise problem from None
    call.changes.providers.add(call.args["uuid"])


def _generation_conflict(call: Call, rp: ResourceProvider, generation: int) -> None:
    if generation != rp.generation:
        raise HttpProblem(409, "resource provider generation conflict",
                          code="placement.concurrent_update")


def set_inventories(call: Call) -> PlacementResponse:
    """``PUT .../inventories``: replace them all, at a provider generation."""
    forbid_read_only(call, "resource_providers:inventories:update")
    rp = _provider(call)
    data = check_keys(json_body(call.req), ["inventories", "resource_provider_generation"])
    generation = need(data, "resource_provider_generation", int)
    raw = need(data, "inventories", dict)
    fields = {rc: inventory_fields(value, f"['properties']['inventories']"
                                          f"['patternProperties']['{rc}']")
              for rc, value in raw.items()}
    _generation_conflict(call, rp, generation)
    inventories = {rc: inventory_from(call, values, rc, rp.uuid, "update")
                   for rc, values in fields.items()}
    _check_classes(call, rp.uuid, inventories)
    _set(call, inventories)
    return _inventories_answer(call)


def _check_classes(call: Call, rp_uuid: str, inventories: dict[str, Inventory],
                   doing: str = "") -> None:
    for rc in inventories:
        if not call.store.has_resource_class(rc):
            if doing:
                raise HttpProblem(400, f"Unable to {doing} inventory for resource provider "
                                       f"{rp_uuid}: No such resource class {rc}.")
            raise HttpProblem(400, f"Unknown resource class in inventory for resource "
                                   f"provider {rp_uuid}: No such resource class {rc}.")


def create_inventory(call: Call) -> PlacementResponse:
    """``POST .../inventories``: add one class; 409 if the provider has it already."""
    forbid_read_only(call, "resource_providers:inventories:create")
    rp = _provider(call)
    data = json_body(call.req)
    fields = inventory_fields(data, "", extra=("resource_class",
                                               "resource_provider_generation"))
    rc = need(data, "resource_class", str)
    optional(data, "resource_provider_generation", int)
    inventory = inventory_from(call, fields, rc, rp.uuid, "create")
    current = call.store.inventories(rp.uuid)
    _check_classes(call, rp.uuid, {rc: inventory}, "create")
    if rc in current:
        raise HttpProblem(409, f"Update conflict: Inventory for '{rc}' on resource "
                               f"provider '{rp.uuid}' already exists.",
                          code="placement.concurrent_update")
    _set(call, {**current, rc: inventory})
    gen = call.store.provider(rp.uuid).generation
    return json_response(201, {**_serialize_inventory(inventory),
                               "resource_provider_generation": gen},
                         {"Location": call.url(f"/resource_providers/{rp.uuid}"
                                               f"/inventories/{rc}")})


def get_inventory(call: Call) -> PlacementResponse:
    """``GET .../inventories/{resource_class}``."""
    rp_uuid, rc = call.args["uuid"], call.args["resource_class"]
    if call.store.slot_of(rp_uuid) is None:
        raise HttpProblem(404, f"No resource provider with uuid {rp_uuid} found : No "
                               f"resource provider with uuid {rp_uuid} found")
    rp = call.store.provider(rp_uuid)
    inventory = call.store.inventories(rp.uuid).get(rc)
    if inventory is None:
        raise HttpProblem(404, f"No inventory of class {rc} for {rp.uuid}")
    return json_response(200, {**_serialize_inventory(inventory),
                               "resource_provider_generation": rp.generation})


def update_inventory(call: Call) -> PlacementResponse:
    """``PUT .../inventories/{resource_class}``."""
    forbid_read_only(call, "resource_providers:inventories:update")
    rp = _provider(call)
    rc = call.args["resource_class"]
    data = json_body(call.req)
    fields = inventory_fields(data, "", extra=("resource_provider_generation",))
    generation = need(data, "resource_provider_generation", int)
    _generation_conflict(call, rp, generation)
    inventory = inventory_from(call, fields, rc, rp.uuid, "update")
    current = call.store.inventories(rp.uuid)
    if rc not in current:
        raise HttpProblem(400, f"No inventory record with resource class for resource "
                               f"provider {rp.uuid}: No inventory of class {rc} found.")
    _set(call, {**current, rc: inventory})
    gen = call.store.provider(rp.uuid).generation
    return json_response(200, {**_serialize_inventory(inventory),
                               "resource_provider_generation": gen})


def delete_inventory(call: Call) -> PlacementResponse:
    """``DELETE .../inventories/{resource_class}``."""
    forbid_read_only(call, "resource_providers:inventories:delete")
    rp = _provider(call)
    rc = call.args["resource_class"]
    current = call.store.inventories(rp.uuid)
    if rc not in current:
        raise HttpProblem(404, f"No inventory of class {rc} found for delete: No "
                               f"inventory of class {rc} found.")
    del current[rc]
    try:
        call.store.set_inventories(rp.uuid, None, current)
    except PlacementError as err:
        raise HttpProblem(409, f"Unable to delete inventory of class {rc}: {err.message}",
                          code="placement.concurrent_update") from None
    call.changes.providers.add(rp.uuid)
    return PlacementResponse(204)


def delete_inventories(call: Call) -> PlacementResponse:
    """``DELETE .../inventories`` (1.5)."""
    forbid_read_only(call, "resource_providers:inventories:delete")
    rp = _provider(call)
    try:
        call.store.set_inventories(rp.uuid, None, {})
    except PlacementError as err:
        raise HttpProblem(409, err.message, code="placement.inventory.inuse") from None
    call.changes.providers.add(rp.uuid)
    return PlacementResponse(204)


# ----- aggregates and traits of a provider -----

def _aggregates_answer(call: Call) -> PlacementResponse:
    rp = _provider(call)
    out: dict[str, Any] = {"aggregates": sorted(call.store.provider_aggregates(rp.uuid))}
    if call.at_least(19):
        out["resource_provider_generation"] = rp.generation
    return json_response(200, out)


def get_aggregates(call: Call) -> PlacementResponse:
    """``GET .../aggregates`` (1.1)."""
    return _aggregates_answer(call)


def set_aggregates(call: Call) -> PlacementResponse:
    """``PUT .../aggregates`` (1.1): a list before 1.19, then an object with the
    provider generation."""
    forbid_read_only(call, "resource_providers:aggregates:update")
    rp = _provider(call)
    data = json_body(call.req)
    generation: int | None = None
    where = ""
    if call.at_least(19):
        data = check_keys(data, ["aggregates", "resource_provider_generation"])
        aggregates = need(data, "aggregates", list)
        generation = need(data, "resource_provider_generation", int)
        where = prop("", "aggregates")
    else:
        if not isinstance(data, list):
            raise schema_problem(f"{data!r} is not of type 'array'", "type")
        aggregates = data
    for agg in aggregates:
        if not isinstance(agg, str):
            raise schema_problem(f"{agg!r} is not of type 'string'", "type",
                                 f"{where}['items']")
        if not _UUID.match(agg):
            raise schema_problem(f"{agg!r} is not a 'uuid'", "format", f"{where}['items']")
    if len(set(aggregates)) != len(aggregates):
        raise schema_problem(f"{aggregates!r} has non-unique elements", "uniqueItems",
                             where)
    if generation is not None and generation != rp.generation:
        raise HttpProblem(409, "Resource provider's generation already changed. Please "
                               "update the generation and try again.",
                          code="placement.concurrent_update")
    try:
        call.store.set_provider_aggregates(rp.uuid, None, aggregates,
                                           increment=call.at_least(19))
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(rp.uuid)
    out: dict[str, Any] = {"aggregates": list(aggregates)}  # in the order given
    if call.at_least(19):
        out["resource_provider_generation"] = call.store.provider(rp.uuid).generation
    return json_response(200, out)


def _traits_answer(call: Call) -> PlacementResponse:
    rp = _provider(call)
    return json_response(200, {"traits": sorted(call.store.provider_traits(rp.uuid)),
                               "resource_provider_generation": rp.generation})


def get_provider_traits(call: Call) -> PlacementResponse:
    """``GET .../traits`` (1.6)."""
    return _traits_answer(call)


def set_provider_traits(call: Call) -> PlacementResponse:
    """``PUT .../traits`` (1.6)."""
    forbid_read_only(call, "resource_providers:traits:update")
    rp = _provider(call)
    data = check_keys(json_body(call.req), ["traits", "resource_provider_generation"])
    traits = need(data, "traits", list)
    generation = need(data, "resource_provider_generation", int)
    for trait in traits:
        if not isinstance(trait, str):
            raise schema_problem(f"{trait!r} is not of type 'string'", "type",
                                 f"{prop('', 'traits')}['items']")
    if len(set(traits)) != len(traits):
        raise schema_problem(f"{traits!r} has non-unique elements", "uniqueItems",
                             prop("", "traits"))
    if generation != rp.generation:
        raise HttpProblem(409, "Resource provider's generation already changed. Please "
                               "update the generation and try again.",
                          code="placement.concurrent_update")
    unknown = sorted(t for t in traits if not call.store.has_trait(t))
    if unknown:
        raise HttpProblem(400, f"No such trait {', '.join(unknown)}")
    try:
        call.store.set_provider_traits(rp.uuid, generation, traits)
    except PlacementError as err:
        raise HttpProblem.from_error(err) from None
    call.changes.providers.add(rp.uuid)
    return _traits_answer(call)


def delete_provider_traits(call: Call) -> PlacementResponse:
    """``DELETE .../traits`` (1.6)."""
    forbid_read_only(call, "resource_providers:traits:delete")
    rp = _provider(call)
    call.store.set_provider_traits(rp.uuid, rp.generation, [])
    call.changes.providers.add(rp.uuid)
    return PlacementResponse(204)


# ----- usages and allocations of a provider -----

def provider_usages(call: Call) -> PlacementResponse:
    """``GET .../usages``."""
    rp = _provider(call)
    return json_response(200, {"resource_provider_generation": rp.generation,
                               "usages": call.store.usages(rp.uuid)})


def provider_allocations(call: Call) -> PlacementResponse:
    """``GET .../allocations``: what each consumer holds on the provider."""
    rp = _provider(call)
    out: dict[str, Any] = {}
    for consumer_uuid in sorted(call.store.at(call.store.slot_of(rp.uuid) or 0).consumers):
        consumer = call.store.consumer(consumer_uuid)
        if consumer is None or rp.uuid not in consumer.allocations:
            continue
        entry: dict[str, Any] = {"resources": dict(consumer.allocations[rp.uuid])}
        if call.at_least(28):
            entry["consumer_generation"] = consumer.generation
        out[consumer_uuid] = entry
    return json_response(200, {"allocations": out,
                               "resource_provider_generation": rp.generation})
